"""bsb's fork statistics in verl's logged metrics: the reduction equals bsb.train.fork_stats on the same trees, verl's own
file logger writes them, and the launcher's runner trains with the trainer subclass that adds them (still under the
configured mode's name). The Ray end (a real worker's trees, verl's advantage step) is in test_worker_ray.py."""

import json
import math

import pytest
import torch

from bsb.integrations.verl.estimators import encode_uid
from bsb.integrations.verl.metrics import ForkMetrics, task_runner, verl_fork_metrics, with_fork_metrics
from bsb.train.fork_stats import Fork, TreeForks, fork_metrics


def hand_trees():
    forks_a = [Fork(4, 10, 0.9, (True, False), (1.0, 0.0)), Fork(2, 8, 0.1, (False, False), (0.0, -0.5))]
    forks_b = [Fork(6, 12, 0.5, (True, True), (1.0, 1.0)), Fork(3, 6, math.nan, (True, False), (1.0, 0.0)),
               Fork(5, 10, 0.7, (False, True), (0.0, 1.0)), Fork(1, 4, 0.3, (False, False), (0.0, 0.0))]
    return [TreeForks(forks_a, 3, 2, 1), TreeForks(forks_b, 4, 0, 1)]


def test_the_reduction_is_bsbs_statistics_as_verl_scalars():
    uids = [encode_uid("p", 0, 2), encode_uid("p", 0, 2), encode_uid("p", 1, 0)]
    advs = [torch.tensor([0.5, 0.5, 1.0]), torch.tensor([-0.5, -0.5, -1.0, -1.0]), torch.tensor([0.3, -0.3])]
    got = verl_fork_metrics(hand_trees(), uids, advs)
    want = fork_metrics(hand_trees(), [0.5], [1.0, 1.0, 0.3])
    assert got["bsb/fork_yield"] == pytest.approx(0.5) and got["bsb/fork_yield_reward"] == pytest.approx(4 / 6)
    assert (got["bsb/fork_yield_low"], got["bsb/fork_yield_mid"], got["bsb/fork_yield_high"]) == pytest.approx((0, 0.5, 1))
    for key, value in want.items():
        if key != "fork_rel":
            assert got[f"bsb/{key}"] == pytest.approx(value), key
    assert got["bsb/fork_rel_q50"] == pytest.approx(0.45)  # of 0.25 0.25 0.4 0.5 0.5 0.5
    assert all(isinstance(v, float) for v in got.values())
    empty = verl_fork_metrics([TreeForks([], 4, 0, 0)])
    assert "bsb/fork_yield" not in empty and empty["bsb/forks"] == 0.0  # NaN left out, as bsb's trackers do


def test_verls_file_logger_writes_them(tmp_path, monkeypatch):
    from verl.utils.tracking import Tracking

    path = tmp_path / "verl.jsonl"
    monkeypatch.setenv("VERL_FILE_LOGGER_PATH", str(path))
    metrics = {"actor/pg_loss": 0.1, **verl_fork_metrics(hand_trees())}
    logger = Tracking(project_name="bsb", experiment_name="t", default_backend=["file"], config={})
    logger.log(data=metrics, step=3)
    logger.finish()
    (line,) = path.read_text().splitlines()
    row = json.loads(line)
    assert row["step"] == 3 and row["data"]["bsb/fork_yield"] == pytest.approx(0.5)
    assert row["data"]["bsb/refill_rate"] == pytest.approx(2 / 7) and row["data"]["bsb/fallback_rate"] == pytest.approx(2 / 6)


def test_the_launchers_runner_trains_with_the_subclass_under_the_configured_mode(monkeypatch):
    from omegaconf import OmegaConf
    from verl.trainer.main_ppo import TaskRunnerV1
    from verl.trainer.ppo.v1 import PPOTrainerSync, get_trainer_cls, trainer_base

    monkeypatch.setitem(trainer_base.TRAINER_REGISTRY, "sync", PPOTrainerSync)
    picked = []
    monkeypatch.setattr(TaskRunnerV1.__ray_actor_class__, "run",
                        lambda self, config: picked.append(get_trainer_cls(config.trainer.v1.trainer_mode)))
    runner = task_runner().__ray_actor_class__()
    runner.run(OmegaConf.create({"trainer": {"v1": {"trainer_mode": "sync"}}}))
    (cls,) = picked
    assert issubclass(cls, PPOTrainerSync) and issubclass(cls, ForkMetrics) and cls is not PPOTrainerSync
    assert cls._compute_metrics is ForkMetrics._compute_metrics  # verl's step metrics, then bsb's (super())
    assert with_fork_metrics(cls) is cls  # wrapped once
