"""The tree's and the credit's options, declared once: each field's default, help and bounds are written here and
inherited by ``bsb train``'s :class:`~bsb.train.config.TrainConfig` and verl's
:class:`~bsb.integrations.verl.settings.BsbSettings` (as both inherit :class:`~bsb.engine.probe.ProbeConfig`), so a
value one of them refuses the other refuses too, at start."""

from __future__ import annotations

from dataclasses import dataclass

from bsb.fields import help_field as _f

GRPO_STDS = ("population", "sample")  # σ_R of the estimators that standardise


@dataclass
class TreeOptions:
    """The tree's shape: M roots, k siblings per fork, refills for roots that cannot fork."""

    chains: int = _f(
        4, "M root chains per prompt (tree); K roots (two_stage); group size M(1+k) for flat", ge=1, size_limit=4096
    )
    siblings: int = _f(2, "k continuations per fork (tree); B branches per root (two_stage)", ge=1, size_limit=4096)
    max_refills: int = _f(2, "refill rounds of fresh roots for chains that cannot fork", ge=0, size_limit=1000)


def check_shape(shape: TreeOptions) -> None:
    """One ``ValueError`` where ``shape``'s M, k or refills break their fields' bounds: the rollouts' guard for a
    caller that built its own (a config's are checked with all its fields at start)."""
    from bsb.fields import value_problems

    problems = value_problems(TreeOptions(shape.chains, shape.siblings, shape.max_refills))
    if problems:
        raise ValueError(f"invalid tree: {'; '.join(problems)}")


@dataclass
class CreditOptions:
    """How leaves' rewards become advantages: DAPO's overlong penalty and the estimators' options, passed to every
    estimator as this object (:func:`bsb.train.advantages.advantages`), under the names the configs give them."""

    overlong_buffer: int = _f(16, "DAPO's soft overlong penalty buffer in tokens; 0: off", ge=0)
    overlong_factor: float = _f(1.0, "DAPO's overlong penalty factor", ge=0)
    grpo_std: str = _f(
        "population",
        "σ_R of grpo and prefix_credit: population | sample (Bessel-corrected, as verl's and TRL's GRPO)",
        choices=GRPO_STDS,
    )
    prefix_beta: float = _f(0.0, "prefix_credit: max-backup bonus β (0.25 in [TwoStage]'s bonus arms)", ge=0, le=1)
    prefix_alpha: float = _f(0.5, "prefix_credit: continuation mix α", ge=0, le=1)
    clamped_prefix: bool = _f(
        False, "prefix_credit: [TwoStage]'s one-sided prefix clamping (Proposition 3; an ablation that fails)"
    )
    zero_cont_token_mass: bool = _f(
        False, "[TwoStage] Arm 11: centre continuation advantages to zero signed token mass per question"
    )
