"""Floors that are floors: in real training steps, every trainable selector's computed read tokens are at least the
floor it reports (C·(E + L − 1) for Probe-JS at L ∈ {1, 2, 4}, C·(E + n − 1) for Lens-Shift, 0 for selectors that
read no belief), on the HF backend (reads from the kept KV) and through vLLM's engine (its prefix cache)."""

import pytest
from script_run import run_script

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
    engine, out = None, {}
    for cfg in json.loads(sys.argv[1]):  # the longest read first: its engine has room for every later probe
        tr = Trainer(TrainConfig(**cfg), rollout_backend=engine)
        engine = engine or tr.backend
        row = tr.train_step()  # one step, nothing validated or saved: the reads are what is checked
        out[cfg["read_len"]] = {"row": row, "suffix": len(tr.selector.config.suffix),
                                "reader": type(tr.selector.reader).__name__, "engine": id(tr.backend)}
    print(json.dumps(out))
"""
READ_LENS = (4, 2, 1)


@pytest.fixture(scope="module")
def engine_runs(tmp_path_factory):
    """One process, one vLLM engine: a training step with Probe-JS reading through it at each read length."""
    pytest.importorskip("vllm", reason="vLLM is not installed (pip install 'belief-shift-branching[cpu]')")
    tmp = tmp_path_factory.mktemp("engine-floors")
    cfgs = [dict(backend="vllm", probe_reader="engine", selector="probe_js", read_len=n,
                 out_dir=str(tmp / f"run{n}"), **SMALL) for n in READ_LENS]
    out = run_script(SCRIPT, cfgs, tmp)
    assert len({run["engine"] for run in out.values()}) == 1  # every trainer read through the first one's engine
    return {int(n): run for n, run in out.items()}


@pytest.mark.vllm
@pytest.mark.parametrize("read_len", [1, 2, 4])
def test_probe_js_engine_reads_cost_at_least_their_floor(read_len, engine_runs):
    out = engine_runs[read_len]
    assert out["reader"] == "VLLMBackend" and out["row"]["probe_read_path"].startswith("engine prefix cache")
    check(out["row"], "probe_js", read_len, out["suffix"])
