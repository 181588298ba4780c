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
