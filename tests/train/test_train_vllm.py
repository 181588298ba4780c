"""Training with vLLM rollouts on the CPU, in a fresh process (its own in-process engine): after the run, the engine
generates what the trainer's updated policy generates, and no longer what the starting weights did."""

import pytest
from script_run import run_script

pytest.importorskip("vllm", reason="vLLM is not installed (pip install 'belief-shift-branching[cpu]')")

from bsb.embedded.model import TinyConfig, train_tiny_model  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.vllm]

SCRIPT = """
import json, sys
from bsb.train.config import TrainConfig
from bsb.train.trainer import Trainer

if __name__ == "__main__":
    engine, out = None, {}
    for cfg in json.loads(sys.argv[1]):  # one engine: each later trainer syncs its starting weights into it
        tr = Trainer(TrainConfig(**cfg), rollout_backend=engine)
        engine = engine or tr.backend
        prompts = [tr._encode(p) for p in tr.val_problems]
        greedy = lambda backend: backend.generate(prompts, 24, temperature=0.0, eos_token_id=tr.eos)
        before = greedy(tr.backend)
        rows = tr.run()
        out[cfg["probe_reader"]] = {"engine": type(tr.backend).__name__, "before": before, "after": greedy(tr.backend),
                                    "policy": greedy(tr.hf), "steps": [r["step"] for r in rows],
                                    "tokens": rows[-1]["tokens_generated"], "reads": type(tr.selector.reader).__name__}
    print(json.dumps(out))
"""
READERS = {"auto": "HFBackend", "engine": "VLLMBackend"}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two runs in one process on one engine: probe_reader=auto reads Probe-JS on the policy beside the CPU engine
    (grouped packed forwards), engine reads it from the engine's top-k."""
    tmp = tmp_path_factory.mktemp("train-vllm")
    model = train_tiny_model(TinyConfig(steps=30, batch=8, hidden=64, layers=1, max_operand=3, ops=(1, 2)), tmp / "m", progress=False)
    cfgs = [dict(model=str(model), backend="vllm", steps=2, prompts_per_step=4, gen_prompts=4, chains=2, siblings=1,
                 max_response_len=48, val_problems=16, val_samples=1, task="arith", task_options={"ops": [1], "max_operand": 3},
                 dynamic_sampling=False, out_dir=str(tmp / f"run-{reader}"), progress=False, lr=3e-2, val_every=0,
                 probe_reader=reader) for reader in READERS]
    return run_script(SCRIPT, cfgs, tmp)


@pytest.mark.parametrize("reader", list(READERS))
def test_training_with_vllm_rollouts_syncs_the_new_weights_into_the_engine(runs, reader):
    out = runs[reader]
    assert out["engine"] == "VLLMBackend" and out["steps"] == [0, 1, 2] and out["tokens"] > 0
    assert out["reads"] == READERS[reader]
    assert out["after"] == out["policy"]  # the engine serves the trained weights
    assert out["after"] != out["before"]  # ... which differ from the starting ones
