"""bsb sweep: checks before anything trains, resumable runs in their own folders and processes, the table and the
figure (best-aggregate checkpoint, 3-point moving average, two-level bootstrap against a reference)."""

import json
from pathlib import Path

import pytest
import yaml

from bsb.commands import sweep
from bsb.eval.sweep_summary import moving_average
from bsb.train.config import TrainConfig

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def write(tmp_path, name, **fields):
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(fields))
    return path


def test_every_shipped_config_is_a_valid_train_config():
    files = sorted(CONFIGS.rglob("*.yaml"))
    assert len(files) >= 4 * 4 * 2 + 5  # Table 3 arms (4 models incl. the scale study, math and code) and Table 4 panels
    for f in files:
        TrainConfig.from_yaml(f)  # raises on an unknown field or a bad value
    names = {f.stem for f in (CONFIGS / "cpu").rglob("*.yaml")}
    assert {"midpoint", "entropy", "probe_js", "lens_shift", "b_updater_grpo", "c_read_len_4", "a_tree_2_1"} <= names


def test_the_cpu_twins_plan_as_one_sweep(tmp_path):
    twins = sorted(p for d in ("arms", "ablations") for p in (CONFIGS / "cpu" / d).glob("*.yaml"))  # real/: other models
    runs = sweep.plan(twins, [0, 1, 2], tmp_path)
    assert len(runs) == 9 * 3 and len({r.dir for r in runs}) == 27
    assert [r.seed for r in runs] == [0] * 9 + [1] * 9 + [2] * 9  # seed by seed: a sweep cut short has every config alike
    grpo = next(r for r in runs if r.name == "b_updater_grpo" and r.seed == 1)
    assert grpo.config["loss_agg"] == "seq-mean-token-mean" and grpo.config["clip_high"] == 0.2 and grpo.config["seed"] == 1


def test_the_gsm_arms_plan_as_one_sweep_at_one_budget(tmp_path):
    """Every arm of the Qwen2.5-Coder GSM-Symbolic study (flat_dynamic.yaml among them) is one sweep against flat
    GRPO: the same benchmark and evaluation (plan checks), one question an update, 50 updates at one learning rate."""
    arms = sorted((CONFIGS / "cpu" / "real" / "gsm-arms").glob("*.yaml"))
    runs = sweep.plan(arms, [1, 2], tmp_path)
    assert {r.name for r in runs} >= {"flat", "flat_dynamic", "stopped_probe_js", "stopped_midpoint"}
    assert {(r.config["steps"], r.config["prompts_per_step"], r.config["lr"]) for r in runs} == {(50, 1, 1e-6)}
    dynamic = next(r.config for r in runs if r.name == "flat_dynamic")
    assert dynamic["dynamic_sampling"] and dynamic["homogeneous"] == "skip_step" and dynamic["rollout"] == "flat"


def test_bad_sweeps_fail_before_anything_trains(tmp_path):
    a = write(tmp_path, "a", steps=2)
    (tmp_path / "sub").mkdir()
    b = tmp_path / "sub" / "a.yaml"
    b.write_text(yaml.safe_dump({"steps": 3}))
    with pytest.raises(ValueError, match="two runs would write to one folder"):
        sweep.plan([a, b], [0], tmp_path / "out")
    bad = write(tmp_path, "bad", learning_rate=1.0)
    with pytest.raises(ValueError, match=r"bad.yaml: unknown config field\(s\): learning_rate"):
        sweep.plan([a, bad], [0], tmp_path / "out")
    other = write(tmp_path, "other", val_problems=64)
    with pytest.raises(ValueError, match="disagree on the evaluation set"):
        sweep.plan([a, other], [0], tmp_path / "out")
    hot = write(tmp_path, "hot", val_temperature=0.5)
    with pytest.raises(ValueError, match="differ in val_temperature"):
        sweep.plan([a, hot], [0], tmp_path / "out")
    with pytest.raises(ValueError, match="seeds repeat"):
        sweep.plan([a], [0, 0], tmp_path / "out")
    # a folder that already holds another config's run
    run_dir = tmp_path / "out" / "a-s0"
    run_dir.mkdir(parents=True)
    (run_dir / "config.yaml").write_text(yaml.safe_dump(TrainConfig(steps=9, seed=0).to_dict()))
    with pytest.raises(ValueError, match="already holds a run of another config \\(differs in steps\\)"):
        sweep.plan([a], [0], tmp_path / "out")
    (run_dir / "config.yaml").write_text(yaml.safe_dump(TrainConfig(steps=2, seed=0, save_every=3, progress=False).to_dict()))
    assert sweep.plan([a], [0], tmp_path / "out")[0].dir == run_dir  # run-only fields may differ


def _fake_run(out, name, seed, accs, n_q=4):
    d = out / f"{name}-s{seed}"
    d.mkdir(parents=True)
    rows = []
    for i, acc in enumerate(accs):
        k = round(acc * n_q)
        rows.append({"step": 2 * i, "val_accuracy": acc, "val_correct": [1] * k + [0] * (n_q - k), "val_samples": 1})
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return sweep.Run(name, seed, d, {"steps": 2 * (len(accs) - 1)})


def test_summary_best_checkpoint_moving_average_and_bootstrap(tmp_path):
    runs = [_fake_run(tmp_path, "ref", 0, [0.25, 0.5, 0.5]), _fake_run(tmp_path, "ref", 1, [0.25, 0.25, 0.5]),
            _fake_run(tmp_path, "arm", 0, [0.25, 1.0, 0.5]), _fake_run(tmp_path, "arm", 1, [0.25, 0.75, 0.75])]
    assert all(sweep.finished(r) for r in runs)
    res = sweep.summarize(runs, tmp_path / "summary", reference="ref", resamples=200)
    arm, ref = res["configs"]["arm"], res["configs"]["ref"]
    assert arm["best_step"] == 2 and arm["best"] == pytest.approx(0.875) and arm["final"] == pytest.approx(0.625)
    assert ref["best_step"] == 4 and ref["best"] == pytest.approx(0.5)  # the seed-mean peaks at the last step
    assert moving_average([0.25, 0.875, 0.625]) == pytest.approx([0.5625, 0.5833333, 0.75])
    assert arm["diff_final"].startswith("+0.125") and "[" in arm["diff_best"]
    table = (tmp_path / "summary" / "table.md").read_text()
    assert "| arm | 0.250 | 0.875 ± " in table and "(2)" in table and (tmp_path / "summary" / "curves.png").exists()
    assert "- arm, step 2: kept in 0 of 2 runs (train with keep_last: -1" in table
    assert "| arm-s1 | 0.250 | 0.750 (2) | 0.750 | 0 | 0 | nan | - / - / - | nan | 0.00 |" in table  # each run: ties earlier
    kept = runs[2].dir / "weights" / "step-2"  # seed 0 of arm kept its step-2 weights
    kept.mkdir(parents=True)
    (kept / "config.json").write_text("{}")
    res = sweep.summarize(runs, tmp_path / "summary", reference="ref", resamples=50)
    assert res["configs"]["arm"]["best_weights"] == [str(kept), None]
    assert f"- arm, step 2: kept in 1 of 2 runs ({kept}, ...)" in (tmp_path / "summary" / "table.md").read_text()
    best = runs[3].dir / "best"  # seed 1 kept its own best (keep_best), which is step 2 too; seed 0's best/ is not
    best.mkdir()
    (best / "bsb_best.json").write_text(json.dumps({"step": 2, "val_accuracy": 0.75}))
    (runs[2].dir / "best").mkdir()
    (runs[2].dir / "best" / "bsb_best.json").write_text(json.dumps({"step": 4, "val_accuracy": 0.5}))
    res = sweep.summarize(runs, tmp_path / "summary", reference="ref", resamples=50)
    assert res["configs"]["arm"]["best_weights"] == [str(kept), str(best)]
    sweep.summarize(runs[2:3], tmp_path / "one", resamples=50)  # one seed: no interval, no "± nan"
    assert "| arm | 0.250 | 1.000 (2) | 0.500 |" in (tmp_path / "one" / "table.md").read_text()
    with pytest.raises(ValueError, match="reference 'nope' is none"):
        sweep.summarize(runs, tmp_path / "summary", reference="nope")
    with pytest.raises(ValueError, match="1 run\\(s\\) have no metrics yet"):
        sweep.summarize(runs + [sweep.Run("new", 0, tmp_path / "new-s0", {"steps": 2})], tmp_path / "summary")


def test_ties_go_to_the_earlier_checkpoint(tmp_path):
    runs = [_fake_run(tmp_path, "x", 0, [0.5, 0.75, 0.75])]
    assert sweep.summarize(runs, tmp_path / "s", resamples=10)["configs"]["x"]["best_step"] == 2


@pytest.mark.slow
def test_sweep_end_to_end_trains_each_run_once_and_resumes(tmp_path, capsys):
    from bsb.cli import main
    from bsb.embedded.model import TinyConfig, train_tiny_model

    model = train_tiny_model(TinyConfig(steps=40, batch=8, hidden=64, layers=1, max_operand=3, ops=(1, 2)), tmp_path / "m", progress=False)
    shared = dict(model=str(model), backend="hf", steps=2, prompts_per_step=2, gen_prompts=2, chains=2, siblings=1, max_response_len=32,
                  val_problems=4, val_every=1, task="arith", task_options={"ops": [1], "max_operand": 3}, progress=False)
    a = write(tmp_path, "mid", selector="midpoint", **shared)
    b = write(tmp_path, "grpo", selector="midpoint", loss_agg="seq-mean-token-mean", clip_high=0.2, **shared)
    out = tmp_path / "sweep"
    args = ["sweep", str(a), str(b), "--seeds", "0", "1", "--out", str(out), "--reference", "mid"]
    main(args)
    for name in ("mid", "grpo"):
        for seed in (0, 1):
            rows = [json.loads(x) for x in (out / f"{name}-s{seed}" / "metrics.jsonl").read_text().splitlines()]
            assert [r["step"] for r in rows] == [0, 1, 2]
            assert yaml.safe_load((out / f"{name}-s{seed}" / "config.yaml").read_text())["seed"] == seed
    assert (out / "curves.png").exists() and "| grpo |" in (out / "table.md").read_text()
    stamp = (out / "mid-s0" / "metrics.jsonl").stat().st_mtime_ns
    main(args)  # everything finished: nothing trains again
    assert (out / "mid-s0" / "metrics.jsonl").stat().st_mtime_ns == stamp
    assert "4 of 4 runs already done" in capsys.readouterr().err


def test_the_table_shows_each_arms_mean_fork_yield_beside_its_accuracy(tmp_path):
    import math

    import numpy as np
    from scipy.stats import t

    runs = [_fake_run(tmp_path, arm, s, [0.25, 0.5, 0.5]) for arm in ("tree", "flat") for s in (0, 1)]
    yields = {0: [0.5, math.nan, 0.25], 1: [0.75, 0.5, 0.5]}  # seed 0's second step is flat: no forks
    for seed, ys in yields.items():
        with runs[seed].metrics.open("a") as f:
            for i, y in enumerate(ys):
                f.write(json.dumps({"step": i + 1, "rollout": "tree", "fork_yield": y}) + "\n")
    with runs[1].metrics.open("a") as f:  # the run's own costs: tokens, probe share, time
        for i in range(2):
            f.write(json.dumps({"step": 5 + i, "rollout": "tree", "tokens_generated": 1500, "update_tokens": 700,
                                "probe_frac": 0.05 + 0.02 * i, "time_step": 90.0, "fork_yield_low": 0.5 * i,
                                "fork_yield_mid": math.nan, "fork_yield_high": 1.0}) + "\n")
    res = sweep.summarize(runs, tmp_path / "summary", reference="flat", resamples=20)
    table = (tmp_path / "summary" / "table.md").read_text()
    # the tercile yields are means over the steps with scored forks there; none at all is "-"
    assert "| tree-s1 | 0.250 | 0.500 (2) | 0.500 | 3,000 | 1,400 | 0.060 | 0.25 / - / 1.00 | 90 | 0.05 |" in table
    assert "| flat-s1 | 0.250 | 0.500 (2) | 0.500 | 0 | 0 | nan | - / - / - | nan | 0.00 |" in table
    per_seed = [0.375, 0.5833333333]  # each seed's mean over its steps with forks
    hw = t.ppf(0.975, 1) * float(np.std(per_seed, ddof=1)) / math.sqrt(2)
    assert res["configs"]["tree"]["fork_yield"] == pytest.approx(np.mean(per_seed))
    assert res["configs"]["tree"]["fork_yield_hw"] == pytest.approx(hw)
    table = (tmp_path / "summary" / "table.md").read_text()
    assert "| config | start | best-aggregate (step) | final | fork yield | final − flat" in table
    (row,) = [x for x in table.splitlines() if x.startswith("| tree |")]
    assert row.split(" | ")[4] == f"{np.mean(per_seed):.3f} ± {hw:.3f}"
    (row,) = [x for x in table.splitlines() if x.startswith("| flat |")]
    assert row.split(" | ")[4] == ""  # validation rows only: no forks to count
