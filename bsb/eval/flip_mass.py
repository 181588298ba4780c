"""Flip mass: the value a fork can change. Fork-before, a fork at boundary j re-rolls the step (t_j, t_{j+1}], so what
its siblings can move is V*'s jump across that step, ``|V*(t_{j+1}) − V*(t_j)|``. ``bsb validate`` reports the share of
a chain's total that each selector's top-B captures; ``bsb demo`` the flip mass at each selector's fork."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from bsb.eval.lag import jumps


def flip_mass(v_star: Sequence[float], kept: Iterable[int]) -> float:
    """Σ |ΔV*| over the steps the boundaries ``kept`` (indices into ``v_star``) re-roll; the last boundary re-rolls
    none."""
    d = jumps(v_star)
    return float(sum(d[j] for j in kept if j < len(d)))


def at_fork(cuts: Sequence[int], v_star: Sequence[float], fork: int | None) -> float:
    """The flip mass of a fork at response position ``fork``: the step from the boundary at or before it (the first
    boundary when none is); none for an unforkable chain."""
    if fork is None:
        return 0.0
    return flip_mass(v_star, [max((j for j, t in enumerate(cuts) if t <= fork), default=0)])
