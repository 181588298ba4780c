"""`bsb train` end to end with vLLM rollouts on the CPU (a fresh process: its own in-process engine)."""

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed (pip install 'bsb[vllm]')")

from bsb.tasks.tiny_model import TinyConfig, train_tiny_model  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.vllm]


def test_bsb_train_with_vllm_rollouts(tmp_path):
    model = train_tiny_model(TinyConfig(steps=30, batch=8, hidden=64, layers=1, max_operand=3, ops=(1, 2)), tmp_path / "m", progress=False)
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "bsb.cli", "train", "--set", f"model={model}", "backend=vllm", "steps=2", "prompts_per_step=2",
           "gen_prompts=2", "chains=2", "siblings=1", "max_response_len=48", "val_problems=4", "synthetic_ops=[1]",
           "synthetic_max_operand=3", "dynamic_sampling=false", f"out_dir={out}", "progress=false", "lr=1e-3"]
    env = dict(os.environ, VLLM_ENABLE_V1_MULTIPROCESSING="0", VLLM_CPU_KVCACHE_SPACE="1")
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1, 2]
    assert rows[-1]["tokens_generated"] > 0 and rows[-1]["time_sync"] > 0  # the weights went into the engine
    assert "held-out accuracy by step" in proc.stdout
