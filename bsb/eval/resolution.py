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

The split-half oracle asks the same question of the validation's own metric: each chain's draws are split in two
halves (draws ``0..h−1`` and ``h..2h−1``, ``h = n // 2``), the B points with the least reconstruction error on one
half's V* (the DP floor's choice) are scored on the other half's V*, and back, beside Midpoint's points on the same
half-curves. Only where the oracle of half the draws beats Midpoint on the other half do the curves agree with
themselves on where they move; where it does not, the measurement cannot reward a selector for finding a pivot, and no
selector's E can be told from Midpoint's at this N_MC.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from bsb.eval.bootstrap import Interval, cluster_mean
from bsb.eval.reconstruction import oracle_floor, reconstruction_error


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
        f"V* resolution (over the non-flat chains): the mean squared step of V* between boundaries, against what the "
        f"sampling noise of two {rows[0].n_mc}-draw estimates gives alone (ratio 1: the steps are noise): {cells}."
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
        else "the measured steps show no signal beyond the noise"
    )
    return (
        f"V*'s steps between neighbouring boundaries are mostly sampling noise (ratio {r.ratio:.2f}: "
        f"{share:.0%} of their mean square is signal at N_MC={r.n_mc}); E then rewards whichever points interpolate "
        f"the noise best (an even grid), and a read that points at a step is hard to tell from one that does not; "
        f"{more}"
    )


@dataclass(frozen=True)
class SplitHalf:
    """The split-half oracle over ``chains`` non-flat chains, ``half`` draws a side: the mean E of the oracle's points
    and of Midpoint's on the other half's V*, and their paired difference with its 95% interval over problems
    (None, and the means NaN, when no chain could be measured); ``missing``: the chains left out for a draw missing
    from the completions."""

    half: int
    chains: int
    oracle: float
    midpoint: float
    vs_midpoint: Interval | None
    missing: int = 0


def split_half_oracle(
    rows: Sequence[dict], draws: Mapping[tuple[str, int, int], bool], n_mc: int, seed: int = 0
) -> SplitHalf | None:
    """The :class:`SplitHalf` of the ``curves.jsonl`` ``rows`` (each with ``id``, ``prompt``, ``cuts``, ``b`` and
    Midpoint's ``top_b``) from ``draws``: whether completion ``(chain id, cut, draw)`` was correct (a
    :class:`~bsb.eval.value_curve.CompletionStore`'s ``done``). None when no row has Midpoint's points; a chain with a
    draw missing is left out and counted. ``seed``: the bootstrap's."""
    if isinstance(n_mc, bool) or not isinstance(n_mc, int) or n_mc < 2:
        raise ValueError(f"n_mc must be an integer >= 2 to split the draws in halves, got {n_mc!r}")
    h = n_mc // 2
    diffs, prompts, oracle, mid = [], [], [], []
    missing = 0
    for r in (r for r in rows if "midpoint" in r.get("top_b", {})):
        if any((r["id"], c, j) not in draws for c in r["cuts"] for j in range(2 * h)):
            missing += 1
            continue
        halves = [
            [sum(bool(draws[(r["id"], c, j)]) for j in part) / h for c in r["cuts"]]
            for part in (range(h), range(h, 2 * h))
        ]
        b = min(int(r["b"]), len(r["cuts"]))
        o = m = 0.0
        for fit, scored in (halves, halves[::-1]):
            o += reconstruction_error(scored, oracle_floor(fit, b)[1]) / 2
            m += reconstruction_error(scored, r["top_b"]["midpoint"]) / 2
        oracle.append(o)
        mid.append(m)
        diffs.append(o - m)
        prompts.append(r["prompt"])
    if not diffs:
        return SplitHalf(h, 0, math.nan, math.nan, None, missing) if missing else None
    interval = cluster_mean(diffs, prompts, seed=seed)
    return SplitHalf(h, len(diffs), sum(oracle) / len(oracle), sum(mid) / len(mid), interval, missing)


def _chains(n: int) -> str:
    return f"{n} chain" if n == 1 else f"{n} chains"


def split_half_line(s: SplitHalf | None) -> str:
    """The table's and the console's sentence on the split-half oracle ("" when it was not measured)."""
    if s is None:
        return ""
    left = f"; {_chains(s.missing)} left out, a draw missing from the completions" if s.missing else ""
    if s.vs_midpoint is None:
        return f"Split-half oracle: not measured ({_chains(s.missing)}, each with a draw missing from the completions)."
    i = s.vs_midpoint

    def drawn(lo: int, hi: int) -> str:
        return f"draw {lo}" if lo == hi else f"draws {lo}-{hi}"

    return (
        f"Split-half oracle (can these curves tell a selector from Midpoint?): the best B points for V* of "
        f"{drawn(0, s.half - 1)}, scored on V* of {drawn(s.half, 2 * s.half - 1)} and back, over {_chains(s.chains)}: "
        f"E {s.oracle:.3f} "
        f"against Midpoint's {s.midpoint:.3f} on the same half-curves, {i.diff:+.3f} [{i.low:+.3f}, {i.high:+.3f}] "
        f"(95% over problems; an interval wholly below 0: half the draws find where the other half moves{left})."
    )


def split_half_warning(s: SplitHalf | None) -> str:
    """A warning when the oracle of half the draws does not beat Midpoint beyond its interval; "" otherwise."""
    if s is None or s.vs_midpoint is None or s.vs_midpoint.high < 0:
        return ""
    return (
        f"the best B points of half the draws do not beat Midpoint on the other half ({s.vs_midpoint.diff:+.3f} "
        f"[{s.vs_midpoint.low:+.3f}, {s.vs_midpoint.high:+.3f}]): these curves give no evidence that any placement, "
        "known or read, beats Midpoint, so a selector's difference from Midpoint here says little about the selector"
    )
