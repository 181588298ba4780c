"""report_to: TensorBoard event files and W&B offline run files, read back with their own readers; a resume continues
the same record instead of duplicating it."""

import json

import pytest

from bsb.train.trackers import scalars

pytest.importorskip("tensorboard")
wandb = pytest.importorskip("wandb")


def test_scalars_are_namespaced_numbers_and_the_mean_fork():
    row = {"step": 3, "probe_frac": 0.1, "groups_kept": 8, "rollout": "tree", "fork_positions": [4, None, 8],
           "val_correct": [1, 0], "loss": float("nan"), "unforked": True}
    assert scalars(row) == {"bsb/probe_frac": 0.1, "bsb/groups_kept": 8.0, "bsb/unforked": 1.0,
                            "bsb/fork_position_mean": 6.0}


def _tensorboard(folder):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(folder), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def test_tensorboard_and_wandb_offline_get_every_row_and_a_resume_continues_them(tmp_path, monkeypatch):
    from test_trainer import SMALL, config  # the trainer tests' test-size model and config
    from wandb_log import history_and_config

    from bsb.embedded.model import train_tiny_model
    from bsb.train.trainer import Trainer

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    model = str(train_tiny_model(SMALL, tmp_path / "tiny", progress=False))
    out = tmp_path / "run"
    Trainer(config(model, out, steps=2, report_to=["tensorboard", "wandb"], dynamic_sampling=False)).run()
    tb = _tensorboard(out / "tensorboard")
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [s for s, _ in tb["bsb/val_accuracy"]] == [0, 1, 2]
    want = [(r["step"], r["probe_frac"]) for r in rows if "probe_frac" in r]
    assert [s for s, _ in tb["bsb/probe_frac"]] == [s for s, _ in want] == [1, 2]
    assert [v for _, v in tb["bsb/probe_frac"]] == pytest.approx([v for _, v in want])  # float32 in the event file
    run_id = (out / "wandb_run_id").read_text()
    (log,) = (out / "wandb").glob(f"offline-run-*-{run_id}/run-{run_id}.wandb")
    history, cfg = history_and_config(log)
    assert [h["_step"] for h in history] == [0, 1, 2] and cfg["selector"] == "probe_js" and cfg["steps"] == 2
    assert history[1]["bsb/probe_frac"] == pytest.approx(rows[1]["probe_frac"])

    Trainer(config(model, out, steps=3, report_to=["tensorboard", "wandb"], dynamic_sampling=False)).run()  # resume
    tb = _tensorboard(out / "tensorboard")
    assert [s for s, _ in tb["bsb/val_accuracy"]] == [0, 1, 2, 3]  # no step twice
    assert (out / "wandb_run_id").read_text() == run_id  # the same W&B run, resumed
    logs = sorted((out / "wandb").glob(f"offline-run-*-{run_id}/run-{run_id}.wandb"))
    assert [h["_step"] for h in history_and_config(logs[-1])[0]] == [3]  # the resumed part logs only the new step


def test_an_unknown_tracker_is_an_error_before_anything_runs():
    from bsb.train.config import TrainConfig

    with pytest.raises(ValueError, match="report_to: unknown tracker"):
        TrainConfig(report_to=["mlflow"])


def test_the_fork_fractions_are_a_histogram_and_their_mean_a_scalar():
    from bsb.train.trackers import histograms

    row = {"step": 2, "fork_rel": [0.25, 0.5], "fork_rel_mean": 0.375, "fork_yield": float("nan")}
    assert histograms(row) == {"bsb/fork_rel": [0.25, 0.5]} and scalars(row) == {"bsb/fork_rel_mean": 0.375}
    assert histograms({"step": 3, "fork_rel": []}) == {} == histograms({"step": 0, "val_accuracy": 0.5})


FORK_SCALARS = ("fork_yield", "fork_yield_reward", "forks", "fork_rel_mean", "adv_abs_prefix", "adv_abs_leaf", "refill_rate",
                "fallback_rate", "fork_yield_low", "fork_yield_mid", "fork_yield_high")


def test_a_three_step_bsb_train_run_logs_the_fork_statistics_to_tensorboard(tmp_path):
    import math

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from test_trainer import SMALL

    from bsb.cli import main
    from bsb.embedded.model import train_tiny_model

    model = train_tiny_model(SMALL, tmp_path / "tiny", progress=False)
    out = tmp_path / "run"
    assert main(["train", "--set", f"model={model}", "backend=hf", "steps=3", "prompts_per_step=2", "gen_prompts=2", "chains=3",
                 "siblings=1", "max_response_len=48", "overlong_buffer=8", "val_problems=4", "val_every=3", "save_every=3",
                 "task=arith", "task_options.ops=[1]", "task_options.max_operand=3", "progress=false", "dynamic_sampling=false",
                 "report_to=tensorboard", f"out_dir={out}"]) == 0
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "rollout" in r]
    assert [r["step"] for r in steps] == [1, 2, 3] and all(r["forks"] > 0 for r in steps)
    acc = EventAccumulator(str(out / "tensorboard"), size_guidance={"scalars": 0, "histograms": 0})
    acc.Reload()
    for key in FORK_SCALARS:
        want = [(r["step"], r[key]) for r in steps if not math.isnan(r[key])]
        got = [(e.step, e.value) for e in acc.Scalars(f"bsb/{key}")] if want else []
        assert [s for s, _ in got] == [s for s, _ in want], key
        assert [v for _, v in got] == pytest.approx([v for _, v in want]), key  # float32 in the event file
    assert [s for s, _ in _tensorboard(out / "tensorboard")["bsb/fork_yield"]] == [1, 2, 3]
    hist = acc.Histograms("bsb/fork_rel")
    assert [h.step for h in hist] == [1, 2, 3]
    for h, r in zip(hist, steps):  # the histogram holds every fork's position as a fraction of its chain
        assert h.histogram_value.num == len(r["fork_rel"]) == 2 * 3 - r["unforked"]
        assert h.histogram_value.sum == pytest.approx(sum(r["fork_rel"]), rel=1e-5)
        assert h.histogram_value.min >= 0.0 and h.histogram_value.max <= 1.0


def test_steps_redone_after_a_crash_go_to_a_new_wandb_run_that_names_the_old(tmp_path, monkeypatch):
    """A crash after step 3's row but before its checkpoint: the resume trains step 3 again. W&B drops a step logged
    twice, so the old run would keep the crashed step's numbers; the redone steps go to a new run marked as its
    continuation (issue 37). TensorBoard purges them itself."""
    from test_trainer import SMALL, config
    from wandb_log import history_and_config

    from bsb.embedded.model import train_tiny_model
    from bsb.train.trainer import Trainer

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    model = str(train_tiny_model(SMALL, tmp_path / "tiny", progress=False))
    out = tmp_path / "run"
    Trainer(config(model, out, steps=2, report_to=["wandb"], dynamic_sampling=False)).run()
    old = (out / "wandb_run_id").read_text()
    with (out / "metrics.jsonl").open("a") as f:
        f.write(json.dumps({"step": 3, "loss": 123.0}) + "\n")  # logged, then the crash
    Trainer(config(model, out, steps=3, report_to=["wandb"], dynamic_sampling=False)).run()
    new = (out / "wandb_run_id").read_text()
    assert new != old
    (log,) = (out / "wandb").glob(f"offline-run-*-{new}/run-{new}.wandb")
    history, cfg = history_and_config(log)
    assert [h["_step"] for h in history] == [3] and "bsb/loss" in history[0] and history[0]["bsb/loss"] != 123.0
    assert cfg["bsb_resumed_from"] == {"wandb_run_id": old, "step": 2}
    Trainer(config(model, out, steps=4, report_to=["wandb"], dynamic_sampling=False)).run()  # a clean resume: same run
    assert (out / "wandb_run_id").read_text() == new
