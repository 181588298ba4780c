"""How well Monte-Carlo V* curves resolve their own steps: signal against sampling noise between boundaries.

A V* estimate is the mean of ``n_mc`` verified completions, so two boundaries' estimates differ by the true step plus
the sampling noise of both. The squared step between boundaries ``lag`` apart has expectation
``(p_a − p_b)² + p_a(1 − p_a)/n + p_b(1 − p_b)/n``, and ``p̂(1 − p̂)/(n − 1)`` estimates each variance term without
bias whatever the true values, so over a set of chains

    ratio = Σ (p̂_a − p̂_b)² / Σ [p̂_a(1 − p̂_a) + p̂_b(1 − p̂_b)] / (n − 1)

is 1 in expectation when the curves do not move at all and grows with the true steps; ``1 − 1/ratio`` of the mean
squared step is signal. Near 1, a selector's reconstruction error mostly scores how well its points interpolate
noise (an evenly spaced grid does that best) and no read of the model can point at a step. Noise falls as 1/n, so
``n · noise / signal`` draws a boundary would bring the ratio to 2 (half the mean square signal).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Resolution:
    """V*'s steps between boundaries ``lag`` apart over ``pairs`` pairs: their mean square, the mean square sampling
    alone gives (``noise``), the ratio (None when no noise is estimated: every estimate 0 or 1) and the draws a
    boundary that would bring it to 2 (None when the steps hold no signal beyond the noise, or no noise)."""

    lag: int
    pairs: int
    n_mc: int
    step_sq: float
    noise: float
    ratio: float | None
    n_mc_for_2: int | None

    @property
    def signal_share(self) -> float | None:
        """The share of the mean squared step that is not sampling noise (clipped to [0, 1])."""
        return None if self.ratio is None else min(1.0, max(0.0, 1.0 - 1.0 / self.ratio))


def step_resolution(curves: Sequence[Sequence[float]], n_mc: int, lag: int = 1) -> Resolution | None:
    """The :class:`Resolution` of ``curves`` (each a chain's V* at its boundaries in order, every value a mean of
    ``n_mc`` 0/1 draws) at ``lag``; None when no chain has two boundaries ``lag`` apart. ``n_mc`` must be at least 2
    (one draw gives no variance estimate) and ``lag`` at least 1."""
    if isinstance(n_mc, bool) or not isinstance(n_mc, int) or n_mc < 2:
        raise ValueError(f"n_mc must be an integer >= 2 to estimate the sampling noise, got {n_mc!r}")
    if isinstance(lag, bool) or not isinstance(lag, int) or lag < 1:
        raise ValueError(f"lag must be an integer >= 1, got {lag!r}")
    step_sq = noise = 0.0
    pairs = 0
    for k, curve in enumerate(curves):
        v = [float(x) for x in curve]
        if not all(0.0 <= x <= 1.0 for x in v):  # NaN fails too
            raise ValueError(f"curve {k}: V* values must lie in [0, 1], got {curve!r}")
        for a, b in zip(v, v[lag:]):
            step_sq += (a - b) ** 2
            noise += (a * (1 - a) + b * (1 - b)) / (n_mc - 1)
            pairs += 1
    if not pairs:
        return None
    step_sq, noise = step_sq / pairs, noise / pairs
    ratio = step_sq / noise if noise > 0 else None
    signal = step_sq - noise
    needed = math.ceil(n_mc * noise / signal) if noise > 0 and signal > 0 else None
    return Resolution(lag, pairs, n_mc, step_sq, noise, ratio, needed)


def resolution_line(rows: Sequence[Resolution | None]) -> str:
    """The table's and the console's sentence on V*'s resolution ("" when nothing was measured)."""
    rows = [r for r in rows if r is not None]
    if not rows:
        return ""
    cells = "; ".join(
        f"{r.lag} apart: {r.step_sq:.4f} against {r.noise:.4f} ("
        + ("ratio n/a: every estimate 0 or 1" if r.ratio is None else f"ratio {r.ratio:.2f}")
        + f", {r.pairs} pairs)"
        for r in rows
    )
    return (
        f"V* resolution: the mean squared step of V* between boundaries, against what the sampling noise of two "
        f"{rows[0].n_mc}-draw estimates gives alone (ratio 1: the steps are noise): {cells}."
    )


def resolution_warning(r: Resolution | None, threshold: float = 2.0) -> str:
    """A warning when V*'s neighbouring steps are mostly sampling noise (ratio under ``threshold``), with the draws a
    boundary that would make half their mean square signal; "" otherwise."""
    if r is None or r.ratio is None or r.ratio >= threshold:
        return ""
    share = r.signal_share or 0.0
    more = (
        f"--n-mc {r.n_mc_for_2} would make half of it signal"
        if r.n_mc_for_2 is not None
        else "no number of draws separates steps that are not there"
    )
    return (
        f"V*'s steps between neighbouring boundaries are mostly sampling noise (ratio {r.ratio:.2f}: "
        f"{share:.0%} of their mean square is signal at N_MC={r.n_mc}); E then rewards whichever points interpolate "
        f"the noise best (an even grid) and no read can point at a step; {more}"
    )
