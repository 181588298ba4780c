"""Issue 65's validations on Qwen2.5-Coder-0.5B-Instruct (docs/RESULTS.md), reproduced on a slice: each domain's
committed command (``examples/qwen_validation.py``) on the recorded run's first chain, seeded with the recorded screen
and sampling settings (a command that samples otherwise than the record is refused), estimates V* at three of the
chain's boundaries, and each agrees with the recorded completions' estimate within sampling error (N_MC completions a
boundary, two independent estimates), and so does their sum. A domain whose run is not recorded yet is skipped, saying so."""

import importlib.util
import json
import math
import shutil
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest
from real_models import real_model

ROOT = Path(__file__).resolve().parents[2]
CUTS = 3  # boundaries of the chain re-estimated (--m: evenly spaced over its boundaries)


def _script():
    spec = importlib.util.spec_from_file_location("bsb_qwen_validation", ROOT / "examples" / "qwen_validation.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _recorded_values(path: Path, chain: str, n_mc: int) -> dict[int, float]:
    """V* at each cut of ``chain`` whose n_mc completions the record holds."""
    draws = defaultdict(list)
    for line in path.read_text().splitlines():
        r = json.loads(line)
        if r["chain"] == chain:
            draws[r["cut"]].append(r["correct"])
    return {cut: sum(c) / n_mc for cut, c in draws.items() if len(c) == n_mc}


@pytest.mark.slow
@pytest.mark.parametrize("domain", ["code", "math"])
def test_a_slice_of_the_qwen_validation_reproduces(domain, tmp_path):
    script = _script()
    record = script.record_dir(domain)
    if not (record / "completions.jsonl").exists():
        pytest.skip(f"no recorded {domain} run in {record.relative_to(ROOT)} yet (issue 65 records it)")
    real_model(script.MODEL.removeprefix("pypi:"))
    chain = json.loads((record / "chains.jsonl").read_text().splitlines()[0])
    command = script.validate(domain)
    n_mc = int(command[command.index("--n-mc") + 1])
    recorded = _recorded_values(record / "completions.jsonl", chain["id"], n_mc)
    assert len(recorded) >= CUTS, f"the record holds V* at {len(recorded)} boundaries of {chain['id']}"
    # the slice's one chain is the recorded one, under the id a one-chain-a-problem run gives it
    slice_id = chain["id"].removesuffix("#c0")
    assert slice_id != chain["id"], chain["id"]
    (tmp_path / "chains.jsonl").write_text(json.dumps({**chain, "id": slice_id}) + "\n")
    for f in ("screen.jsonl", "sampling.json"):
        shutil.copy(record / f, tmp_path / f)
    command.remove("--bsv-cross-fit")
    at = command.index("--engine-batch-tokens")  # how many completions go in one wave (the same seeds; a bf16 near-tie
    del command[at : at + 2]  # may flip with the batch): the engine's default step starts in a minute less
    command[command.index("--n-problems") + 1] = "1"
    command[command.index("--chains-per-problem") + 1] = "1"
    command[command.index("--out") + 1] = str(tmp_path)
    command += ["--m", str(CUTS), "--selectors", "midpoint", "probe_js", "--case-plots", "0"]
    bsb = Path(sys.executable).with_name("bsb")
    done = subprocess.run([str(bsb), *command[1:]], cwd=ROOT, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stderr[-3000:]
    (row,) = [json.loads(line) for line in (tmp_path / "curves.jsonl").read_text().splitlines()]
    assert row["id"] == slice_id and len(row["cuts"]) == CUTS
    assert set(row["cuts"]) <= set(recorded), (row["cuts"], sorted(recorded))  # --m keeps recorded boundaries
    diff = var = 0.0
    for cut, v in zip(row["cuts"], row["v_star"]):
        w = recorded[cut]
        p = (v + w) / 2
        assert abs(v - w) <= 3 * math.sqrt(2 * p * (1 - p) / n_mc) + 1 / n_mc, (chain["id"], cut, v, w)
        diff, var = diff + v - w, var + 2 * p * (1 - p) / n_mc
    # pooled over the boundaries (independent draws given the chain): a boundary's 8 draws alone accept any V* in
    # [0, 1] where the record's is near 0.5; the sum sees a slice that grades every completion wrong
    assert abs(diff) <= 3 * math.sqrt(var) + 1 / n_mc, (chain["id"], diff, var)
