"""bsb's fork statistics in the metrics verl logs (every ``trainer.logger`` backend: console, file, wandb,
tensorboard).

The statistics are :mod:`bsb.train.fork_stats`'s, as ``bsb train`` writes them to ``metrics.jsonl``, reduced here to
verl's scalars ``bsb/<name>``: the lists become their mean and quartiles (``bsb/fork_rel_mean``, ``_q25``, ``_q50``,
``_q75``), and a statistic with nothing to average (NaN) is left out, as bsb's own trackers leave it out.

Where each part comes from:

* the forks: each ``bsb_tree`` call records its tree's :class:`~bsb.train.fork_stats.TreeForks` in its worker
  (:func:`bsb.integrations.verl.tree_loop.take_finished`); the trainer collects every worker's trees once per step.
  So the step's forks are those of every tree finished since the last step's log, DAPO-filtered trees included, as
  ``bsb train`` counts every generated tree;
* the prefix nodes' |advantage|: the trained batch's rows (their uids carry the tree, their advantages are the ones
  verl's advantage step wrote).

verl 0.9.1 has no hook that adds metrics to a step, so :func:`with_fork_metrics` subclasses the trainer class verl
chose for ``trainer.v1.trainer_mode`` (the subclass is never registered under a name of its own: verl compares the
mode's name with ``"sync"``, and the config still names the mode). :func:`task_runner` is verl's ``TaskRunnerV1`` that
trains with it, started by ``python -m bsb.integrations.verl.launch``.

This module imports verl only inside the functions that need it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from bsb.integrations.verl.estimators import decode_uid
from bsb.train.fork_stats import TreeForks, fork_metrics, node_advantages
from bsb.train.tree import Leaf, PromptTree

PREFIX = "bsb/"


def row_advantages(uids: Sequence[str], advantages: Sequence) -> tuple[list[float], list[float]]:
    """The prefix nodes' and the leaves' mean |advantage| (:func:`~bsb.train.fork_stats.node_advantages`) of a trained
    batch: each row's uid (``prompt#group#prefix_len``) and its per-token advantages over its response."""
    trees: dict[str, tuple[PromptTree, list]] = {}
    for uid, adv in zip(uids, advantages, strict=True):
        prompt, group, prefix_len = decode_uid(uid)
        tree, advs = trees.setdefault(prompt, (PromptTree(prompt, None), []))
        tree.leaves.append(Leaf([], [0] * len(adv), group, min(prefix_len, len(adv))))
        advs.append(adv)
    return node_advantages([t for t, _ in trees.values()], [a for _, a in trees.values()])


def verl_fork_metrics(trees: Iterable[TreeForks], uids: Sequence[str] = (), advantages: Sequence = ()) -> dict:
    """The step's fork statistics as verl's scalars ``bsb/<name>`` (NaN left out, ``fork_rel`` as mean and
    quartiles)."""
    import numpy as np

    stats = fork_metrics(trees, *row_advantages(uids, advantages))
    fracs = stats.pop("fork_rel")
    if fracs:
        for q in (25, 50, 75):
            stats[f"fork_rel_q{q}"] = float(np.percentile(fracs, q))
    return {PREFIX + k: float(v) for k, v in stats.items() if not math.isnan(v)}


class ForkMetrics:
    """The trainer mixin: verl's step metrics, then bsb's fork statistics of the step (needs verl and the
    ``bsb_tree`` worker, which ``bsb_tree.yaml`` and the launcher's check require)."""

    def _compute_metrics(self, batch, metrics, timing_raw, global_steps, epoch):
        super()._compute_metrics(batch, metrics, timing_raw, global_steps=global_steps, epoch=epoch)
        metrics.update(self._bsb_fork_metrics(batch))

    def _bsb_fork_metrics(self, batch) -> dict:
        import ray
        import transfer_queue as tq

        workers = self.agent_loop_manager.agent_loop_workers
        trees = [t for part in ray.get([w.bsb_fork_trees.remote() for w in workers]) for t in part]
        keys = [k for k, tag in zip(batch.keys, batch.tags) if not tag.get("is_padding", False)]
        if not keys:
            return verl_fork_metrics(trees)
        data = tq.kv_batch_get(keys=keys, partition_id=batch.partition_id, select_fields=["uid", "advantages"])
        return verl_fork_metrics(trees, [str(u) for u in data["uid"]], list(data["advantages"]))


def with_fork_metrics(trainer_cls: type) -> type:
    """``trainer_cls`` (verl's trainer of the configured mode) with :class:`ForkMetrics` (once)."""
    if issubclass(trainer_cls, ForkMetrics):
        return trainer_cls
    return type(f"Bsb{trainer_cls.__name__}", (ForkMetrics, trainer_cls), {"__module__": __name__})


def task_runner():
    """verl's ``TaskRunnerV1`` (a Ray actor class) whose trainer is :func:`with_fork_metrics` of the configured mode's.
    The mode's entry in verl's trainer registry is replaced in the runner's own process, which bsb's launcher
    started for this run."""
    import ray
    from verl.trainer.main_ppo import TaskRunnerV1

    class BsbTaskRunner(TaskRunnerV1.__ray_actor_class__):
        def run(self, config):
            from verl.trainer.ppo.v1 import trainer_base

            mode = config.trainer.v1.trainer_mode
            trainer_base.TRAINER_REGISTRY[mode] = with_fork_metrics(trainer_base.get_trainer_cls(mode))
            return super().run(config)

    return ray.remote(BsbTaskRunner)
