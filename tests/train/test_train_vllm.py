"""Training with vLLM rollouts on the CPU, in a fresh process (its own in-process engine): after the run, the engine
generates what the trainer's updated policy generates, and no longer what the starting weights did."""

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed (pip install 'belief-shift-branching[cpu]')")

from bsb.embedded.model import TinyConfig, train_tiny_model  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.vllm]

SCRIPT = """
import json, sys
from bsb.train.config import TrainConfig
from bsb.train.trainer import Trainer

if __name__ == "__main__":
    tr = Trainer(TrainConfig(**json.loads(sys.argv[1])))
    prompts = [tr._encode(p) for p in tr.val_problems]
    greedy = lambda backend: backend.generate(prompts, 24, temperature=0.0, eos_token_id=tr.eos)
    before = greedy(tr.backend)
    rows = tr.run()
    print(json.dumps({"engine": type(tr.backend).__name__, "before": before, "after": greedy(tr.backend), "policy": greedy(tr.hf),
                      "steps": [r["step"] for r in rows], "tokens": rows[-1]["tokens_generated"],
                      "reads": type(tr.selector.reader).__name__}))
"""


@pytest.mark.parametrize("reader,serves", [("auto", "HFBackend"), ("engine", "VLLMBackend")])
def test_training_with_vllm_rollouts_syncs_the_new_weights_into_the_engine(tmp_path, reader, serves):
    """probe_reader=auto reads Probe-JS on the policy beside a CPU engine (grouped packed forwards); engine reads it
    from the engine's top-k."""
    model = train_tiny_model(TinyConfig(steps=30, batch=8, hidden=64, layers=1, max_operand=3, ops=(1, 2)), tmp_path / "m", progress=False)
    cfg = dict(model=str(model), backend="vllm", steps=2, prompts_per_step=4, gen_prompts=4, chains=2, siblings=1, max_response_len=48,
               val_problems=16, task="arith", task_options={"ops": [1], "max_operand": 3}, dynamic_sampling=False, out_dir=str(tmp_path / "run"),
               progress=False, lr=3e-2, val_every=0, probe_reader=reader)
    script = tmp_path / "run_training.py"
    script.write_text(SCRIPT)
    env = dict(os.environ, VLLM_ENABLE_V1_MULTIPROCESSING="0", VLLM_CPU_KVCACHE_SPACE="1")
    proc = subprocess.run([sys.executable, str(script), json.dumps(cfg)], capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["engine"] == "VLLMBackend" and out["steps"] == [0, 1, 2] and out["tokens"] > 0
    assert out["reads"] == serves
    assert out["after"] == out["policy"]  # the engine serves the trained weights
    assert out["after"] != out["before"]  # ... which differ from the starting ones
