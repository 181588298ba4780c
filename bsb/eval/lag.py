"""The lag diagnostic: does a score lead, coincide with or lag the value pivots it should mark?

Fork-before assumes that the score at boundary j (a selector's, or the change of the probe belief from boundary j
to j + 1) is large where the value moves across the step that follows it: ``d_j = |V*(t_{j+1}) − V*(t_j)|``. For each
lag ℓ in −2..+2 the diagnostic pairs the score at boundary ``j + ℓ`` with ``d_j`` over every chain, pools the pairs,
and takes their Pearson correlation, with a 95% bootstrap interval over chains (chains resampled with replacement).
A score that peaks at ℓ = 0 coincides with the pivots; at ℓ = +1 it reacts one boundary late (fork-before then
lands one boundary after the pivot); at ℓ = −1 it anticipates them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

LAGS = (-2, -1, 0, 1, 2)


def jumps(values: Sequence[float], *, score: bool = False) -> list[float]:
    """``|x_{j+1} − x_j|``, the move across the step after boundary j: V*'s jumps, or the probe belief's changes.
    ``score``: one per boundary, as a score is (the last boundary, with no step after it, is NaN)."""
    moves = [abs(float(b) - float(a)) for a, b in zip(values[:-1], values[1:])]
    return moves + [math.nan] if score else moves


def _pairs(chains: Sequence[tuple[Sequence[float | None], Sequence[float]]], lag: int) -> list[np.ndarray]:
    """Per chain, the (score at j + lag, jump at j) pairs with both finite: (n, 2) arrays."""
    out = []
    for scores, v_star in chains:
        d = jumps(v_star)
        rows = []
        for j, jump in enumerate(d):
            k = j + lag
            if 0 <= k < len(scores) and scores[k] is not None and math.isfinite(scores[k]):
                rows.append((float(scores[k]), jump))
        out.append(np.asarray(rows, dtype=float).reshape(-1, 2))
    return out


def _corr(parts: list[np.ndarray]) -> float:
    xy = np.concatenate(parts) if parts else np.zeros((0, 2))
    if len(xy) < 3 or xy[:, 0].std() == 0 or xy[:, 1].std() == 0:
        return math.nan
    return float(np.corrcoef(xy[:, 0], xy[:, 1])[0, 1])


def lag_profile(
    chains: Sequence[tuple[Sequence[float | None], Sequence[float]]],
    lags: Sequence[int] = LAGS,
    resamples: int = 1000,
    seed: int = 0,
) -> dict:
    """``chains``: per chain ``(scores, v_star)``, a score per boundary (None / NaN: none) and V* at the same
    boundaries. Returns ``{"lags": {ℓ: {"r", "lo", "hi", "pairs"}}, "peak": ℓ}``: the lag of the largest r among
    those positive beyond their 95% interval, None when there is none (the score does not mark the pivots)."""
    rng = np.random.default_rng(seed)
    out = {}
    for lag in lags:
        parts = _pairs(chains, lag)
        r = _corr(parts)
        boot = []
        if not math.isnan(r) and len(parts) > 1:
            for _ in range(resamples):
                pick = rng.integers(0, len(parts), len(parts))
                boot.append(_corr([parts[i] for i in pick]))
        boot = [b for b in boot if not math.isnan(b)]
        lo, hi = (float(np.quantile(boot, 0.025)), float(np.quantile(boot, 0.975))) if boot else (math.nan, math.nan)
        out[lag] = {"r": r, "lo": lo, "hi": hi, "pairs": int(sum(len(p) for p in parts))}
    # the peak among the lags whose correlation is positive beyond its interval (None: the score marks no pivots)
    clear = {lag: x["r"] for lag, x in out.items() if not math.isnan(x["r"]) and x["r"] > 0 and x["lo"] > 0}
    return {"lags": out, "peak": max(clear, key=lambda lag: (clear[lag], -abs(lag))) if clear else None}
