"""Floors that are floors: in real training steps, every trainable selector's computed read tokens are at least the
floor it reports (C·(E + L − 1) for Probe-JS at L ∈ {1, 2, 4}, C·(E + n − 1) for Lens-Shift, 0 for selectors that
read no belief), on the HF backend (reads from the kept KV) and through vLLM's engine (its prefix cache)."""

import json
import os
import subprocess
import sys

import pytest

from bsb.train.config import TrainConfig
from bsb.train.trainer import Trainer

pytestmark = pytest.mark.slow

SMALL = dict(steps=1, prompts_per_step=4, gen_prompts=4, chains=2, siblings=1, val_every=0, val_problems=4,
             save_every=0, progress=False, dynamic_sampling=False)
CASES = [("probe_js", 1), ("probe_js", 2), ("probe_js", 4), ("lens_shift", None), ("entropy", None),
         ("min_margin", None), ("first_gap", None), ("midpoint", None), ("newline", None), ("random", None),
         ("uniform", None)]


def check(row, selector, read_len, suffix_len):
    assert row["probe_tokens"] >= row["probe_tokens_floor"], row
    if selector == "probe_js":  # the floor is exactly C·(E + L − 1) over the chains read
        assert row["probe_tokens_floor"] > 0 and row["probe_tokens_floor"] % (suffix_len + read_len - 1) == 0
    elif selector == "lens_shift":
        assert row["probe_tokens_floor"] > 0
    else:
        assert row["probe_tokens_floor"] == 0


@pytest.mark.parametrize("selector,read_len", CASES)
def test_every_selectors_reads_cost_at_least_its_floor_on_the_hf_backend(selector, read_len, tmp_path):
    extra = {"read_len": read_len} if read_len else {}
    trainer = Trainer(TrainConfig(backend="hf", selector=selector, out_dir=str(tmp_path / "run"), **SMALL, **extra))
    row = trainer.run()[-1]
    check(row, selector, read_len or 1, len(trainer.selector.config.suffix))
    if selector == "probe_js" and read_len == 1:  # from the kept KV, at the floor itself
        assert row["probe_tokens"] == row["probe_tokens_floor"] and row["probe_read_path"] == "kept KV"


SCRIPT = """
import json, sys
from bsb.train.config import TrainConfig
from bsb.train.trainer import Trainer

if __name__ == "__main__":
    tr = Trainer(TrainConfig(**json.loads(sys.argv[1])))
    row = tr.run()[-1]
    print(json.dumps({"row": row, "suffix": len(tr.selector.config.suffix), "reader": type(tr.selector.reader).__name__}))
"""


@pytest.mark.vllm
@pytest.mark.parametrize("read_len", [1, 2, 4])
def test_probe_js_engine_reads_cost_at_least_their_floor(read_len, tmp_path):
    pytest.importorskip("vllm", reason="vLLM is not installed (pip install 'belief-shift-branching[cpu]')")
    cfg = dict(backend="vllm", probe_reader="engine", selector="probe_js", read_len=read_len,
               out_dir=str(tmp_path / "run"), **SMALL)
    script = tmp_path / "run.py"
    script.write_text(SCRIPT)
    env = dict(os.environ, VLLM_ENABLE_V1_MULTIPROCESSING="0", VLLM_CPU_KVCACHE_SPACE="1")
    proc = subprocess.run([sys.executable, str(script), json.dumps(cfg)], capture_output=True, text=True, env=env,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["reader"] == "VLLMBackend" and out["row"]["probe_read_path"].startswith("engine prefix cache")
    check(out["row"], "probe_js", read_len, out["suffix"])
