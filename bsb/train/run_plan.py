"""What a run resolves once, at trainer start, from its config's names: the log-prob pass the update forwards with
(``update_packing``, :mod:`bsb.train.logprob_pass`, checked against the model), the loss (``loss``,
:data:`bsb.train.loss.LOSSES`), the advantage estimator (``advantage``, :data:`bsb.train.advantages.ADVANTAGES`) and
the rollout's sampling (:class:`~bsb.train.sampling.Sampling`) with [TwoStage]'s stopping rule where the run uses it.
The phases and the update take a :class:`RunPlan` and look nothing up by name."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from bsb.train.advantages import ADVANTAGES
from bsb.train.config import TrainConfig
from bsb.train.logprob_pass import PathPass, TreePass, resolve_pass
from bsb.train.loss import LOSSES
from bsb.train.sampling import Sampling
from bsb.train.two_stage import TwoStageConfig


@dataclass(frozen=True)
class RunPlan:
    logprob_pass: PathPass | TreePass
    loss: Callable
    advantage: Callable
    sampling: Sampling
    two_stage: TwoStageConfig | None = None  # the rollout="two_stage" runs' stopping rule

    @property
    def needs_old_logp(self) -> bool:
        """The loss takes ratios against the rollout policy (its log-probs recorded before a first optimizer step)."""
        return bool(getattr(self.loss, "needs_old_logp", False))


def resolve_plan(cfg: TrainConfig, model: torch.nn.Module) -> tuple[RunPlan, str]:
    """The run's plan for ``model``, and why the tree-packed pass cannot update it ("" when it can or was not asked
    for; the plan then forwards per path, which computes the same loss)."""
    chosen, why = resolve_pass(cfg.update_packing, model)
    two_stage = cfg.two_stage_config() if cfg.rollout == "two_stage" else None
    return RunPlan(chosen, LOSSES.get(cfg.loss), ADVANTAGES.get(cfg.advantage), cfg.sampling(), two_stage), why
