"""The real-model validations of docs/RESULTS.md, reproduced on a slice: each model's committed command
(``examples/real_model.py``) on its first three problems samples the recorded chains (a chain with no newline boundary
has no curve), and their Monte-Carlo V* curves agree with the recorded ones within sampling error (N_MC completions a
boundary, two independent estimates). Gemma's command ends its chains with ``--stop``, so its slice runs that path on
a real tokenizer and engine."""

import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from real_models import real_model

ROOT = Path(__file__).resolve().parents[2]
SLICE = 2  # problems re-validated of the recorded run (each a chain and its V* curve at every boundary)


def _script():
    spec = importlib.util.spec_from_file_location("bsb_real_model_example", ROOT / "examples" / "real_model.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up there
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
@pytest.mark.parametrize("name", ["smollm2", "gemma3"])
def test_a_slice_of_the_real_model_validation_reproduces(name, tmp_path):
    spec = _script().SPECS[name]
    real_model(spec.model.removeprefix("pypi:"))
    recorded_path = ROOT / "examples" / "results" / "real" / f"{name}_curves.jsonl"
    command = spec.validate()
    at = command.index("--bsv")  # the direction is not needed to check V*; the slice ranks the other selectors
    del command[at : at + 2]
    command[command.index("--n-problems") + 1] = str(SLICE)
    command[command.index("--out") + 1] = str(tmp_path)
    command += ["--case-plots", "0"]
    bsb = Path(sys.executable).with_name("bsb")
    done = subprocess.run([str(bsb), *command[1:]], cwd=ROOT, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stderr[-3000:]
    recorded = {r["id"]: r for r in map(json.loads, recorded_path.read_text().splitlines())}
    rows = [json.loads(line) for line in (tmp_path / "curves.jsonl").read_text().splitlines()]
    assert 1 <= len(rows) <= SLICE  # a chain with no newline boundary has no curve (as in the recorded run)
    n_mc = int(command[command.index("--n-mc") + 1])
    compared, diff, var = 0, 0.0, 0.0
    for row in rows:
        want = recorded[row["id"]]
        same = 0  # the recorded chain's tokens this run sampled too (seeded; a near-tie can flip a token)
        while same < min(len(row["response"]), len(want["response"])) and row["response"][same] == want["response"][same]:
            same += 1
        for cut, v, w in zip(row["cuts"], row["v_star"], want["v_star"]):
            if cut > same or cut not in want["cuts"]:
                break
            w = want["v_star"][want["cuts"].index(cut)]
            p = (v + w) / 2
            assert abs(v - w) <= 3 * math.sqrt(2 * p * (1 - p) / n_mc) + 1 / n_mc, (row["id"], cut, v, w)
            compared, diff, var = compared + 1, diff + v - w, var + 2 * p * (1 - p) / n_mc
    assert compared >= len(rows)  # at least a boundary a chain, on average, on the recorded chain
    # pooled over the boundaries (independent draws given the chain): a bias a boundary's 8 draws could not show
    assert abs(diff) <= 3 * math.sqrt(var) + 1 / n_mc, (compared, diff, var)
