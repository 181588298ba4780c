"""bench/gpu_check.sh, the one command a lent H200 runs: its stages fit 8 minutes, and every stage's script works before
a GPU ever runs it (``--smoke``: the same scripts at toy sizes on the CPU). Each stage writes as it goes."""

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "bench" / "gpu_check.sh"
STAGES = ["env", "kernels", "warm", "e2e", "tests", "train", "update"]


def _dry_run(script=SCRIPT):
    return subprocess.run(["bash", str(script), "--dry-run"], capture_output=True, text=True, timeout=60)


def test_the_stage_plan_fits_in_eight_minutes():
    proc = _dry_run()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    limits = dict(re.findall(r"^stage (\w+) (\d+) s$", proc.stdout, re.M))
    assert list(limits) == STAGES
    grace = int(re.search(r"with (\d+) s of grace a stage", proc.stdout).group(1))
    total = sum(int(v) + grace for v in limits.values())
    assert total <= 480 and f"total {total} s" in proc.stdout


def test_the_docs_stage_table_is_the_scripts():
    """docs/performance.md's stage table is ``gpu_check.sh --table``: every stage, its limit from STAGES, its text from
    the script's header; a changed limit changes the table."""
    proc = subprocess.run(["bash", str(SCRIPT), "--table"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    table = proc.stdout.split("\n\n")[0].strip()
    rows = [line for line in table.splitlines()[2:]]
    assert [r.split(" | ")[0].strip("| ") for r in rows] == STAGES
    limits = dict(re.findall(r"^stage (\w+) (\d+) s$", _dry_run().stdout, re.M))
    assert [r.split(" | ")[1] for r in rows] == [f"{limits[s]} s" for s in STAGES]
    assert table in (ROOT / "docs" / "performance.md").read_text(), "regenerate the table: bench/gpu_check.sh --table"


def test_a_plan_over_the_budget_fails_the_dry_run(tmp_path):
    over = tmp_path / "gpu_check.sh"
    over.write_text(re.sub(r"train:\d+", "train:200", SCRIPT.read_text()))
    proc = _dry_run(over)
    assert proc.returncode != 0 and "stage train 200 s" in proc.stdout


def test_sm90_rewrites_its_report_after_every_kernel(tmp_path, monkeypatch):
    pytest.importorskip("triton")
    spec = importlib.util.spec_from_file_location("bench_sm90", ROOT / "bench" / "sm90.py")
    sm90 = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sm90)
    done = []

    def compile_report(fn, *args, tag=""):
        if done:  # the stage's limit strikes during the second kernel
            raise KeyboardInterrupt
        done.append(tag)
        return {
            "kernel": fn.__name__,
            "variant": tag,
            "registers": 32,
            "spill_bytes": 0,
            "shared_bytes": 512,
            "num_warps": 4,
            "num_stages": 3,
            "mma": "none",
            "compile_s": 0.1,
        }

    monkeypatch.setattr(sm90, "compile_report", compile_report)
    with pytest.raises(KeyboardInterrupt):
        sm90.main(["--out", str(tmp_path)])
    report = json.loads((tmp_path / "sm90.json").read_text())
    assert report["complete"] is False and [r["variant"] for r in report["rows"]] == done
    assert "Incomplete" in (tmp_path / "sm90.md").read_text()


@pytest.mark.slow
def test_every_stage_runs_at_toy_sizes_on_the_cpu(tmp_path):
    """The whole check with ``--smoke`` (about a minute on 2 cores): the environment and floors, the benchmarks' and
    GPU tests' collection, the warm-up pass, ``bench/gpu_e2e.py --smoke`` and ``bench/gpu_train.py --smoke`` under
    torchrun; no stage leaves a process behind."""
    pytest.importorskip("triton")
    env = {**os.environ, "PYTHON": sys.executable}
    proc = subprocess.run(
        ["bash", str(SCRIPT), "--smoke", str(tmp_path)], capture_output=True, text=True, env=env, cwd=ROOT, timeout=600
    )
    log = (tmp_path / "stages.log").read_text()
    exits = dict(re.findall(r"stage (\w+): exit (\d+) after", log))
    assert list(exits) == STAGES, log
    assert all(rc == "0" for rc in exits.values()), (
        log + proc.stdout[-3000:] + (tmp_path / "bench.log").read_text()[-3000:]
    )
    assert proc.returncode == 0
    assert "missing python packages: none" in log or "missing python packages: math_verify" in log
    assert json.loads((tmp_path / "warm.json").read_text())[0]["seconds"] >= 0  # the flex warm-up's pass
    selected = re.search(r"(\d+)/\d+ tests collected", (tmp_path / "tests.log").read_text())
    assert selected and int(selected.group(1)) > 0  # the GPU tests exist and import
    bench = (tmp_path / "bench.log").read_text()
    assert bench.index("test_bench_ceilings.py") < bench.index("test_bench_lens.py") < bench.index("test_bench_rows.py")
    assert re.search(r"^mask, \d+ tokens +\d+ ", bench, re.M)  # the update stage's mask build rows
    assert re.search(r"^chains 64, forks mid .* gradients differ by \d\.\de-\d+ of the largest$", bench, re.M)
    assert re.search(r"^activations, 1 x 256, checkpointed the activation model \d\.\d+ GB", bench, re.M)
    assert re.search(r"^OLMo-3 window 32, chains 64 .* gradients differ by", bench, re.M)  # the sliding-window case
    e2e = {r["stage"] for r in json.loads((tmp_path / "gpu_e2e.json").read_text())}
    assert {"env", "reads", "train_logprobs", "tree_step"} <= e2e
    train = json.loads((tmp_path / "gpu_train.json").read_text())
    assert train["complete"] and len(train["steps"]) == 2 and all(s["time_step"] > 0 for s in train["steps"])
    assert len(list(tmp_path.iterdir())) <= 8  # what the GPU machine sends back
    left = subprocess.run(["pgrep", "-f", f"bench/gpu_(e2e|train|warm)\\.py {tmp_path}"], capture_output=True, text=True)
    assert left.returncode == 1, f"the check left its scripts running: {left.stdout}"


def test_a_stage_ends_what_it_started_and_nothing_else_of_the_same_name(tmp_path):
    """Each stage ends with whatever it started (by this run's tag in their environment), never a process of the same
    script names that another run started: matching command lines once killed a test's bench/gpu_e2e.py run that
    happened to run beside `gpu_check.sh --smoke` on the other xdist worker."""
    import time

    sleeper = [sys.executable, "-c", "import time; time.sleep(60)", "bench/gpu_e2e.py"]
    ours = subprocess.Popen(sleeper, env={**os.environ, "BSB_GPU_CHECK_RUN": "run-1"}, start_new_session=True)
    other_run = subprocess.Popen(sleeper, env={**os.environ, "BSB_GPU_CHECK_RUN": "run-2"})
    untagged = subprocess.Popen(sleeper, env={k: v for k, v in os.environ.items() if k != "BSB_GPU_CHECK_RUN"})
    try:
        time.sleep(0.5)
        done = subprocess.run(["bash", str(SCRIPT), "--reap", "run-1"], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert ours.wait(10) == -9  # in its own session, as torchrun's workers are: ended all the same
        assert other_run.poll() is None and untagged.poll() is None
    finally:
        for p in (ours, other_run, untagged):
            p.kill()
            p.wait()
