"""Pre-RL validation metric (§4): how well a selector's top-B boundaries reconstruct the Monte-Carlo value curve.

Given V*(t_1..t_m) at the m candidate boundaries, a selector keeps its top-B boundaries. V̂ is the linear
interpolation through the kept points; before the first and after the last kept point V̂ is held constant at
that point's value (the paper does not say how the ends are handled; this is the choice, and the DP floor uses
the same rule). The selector is charged ``E = Σ_j |V*(t_j) − V̂(t_j)|``. :func:`oracle_floor` is the smallest E any
choice of B points achieves (a dynamic program over V*). Flat curves (V* constant) carry no signal and are
excluded by the caller (:func:`is_flat`). Positions are the candidate indices 0..m−1, evenly spaced as in the
paper's subsampled pool.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np


def _curve(values: Sequence[float]) -> np.ndarray:
    v = np.asarray(values, dtype=np.float64)
    if v.ndim != 1 or v.size == 0:
        raise ValueError("values must be a non-empty 1-D sequence of V* estimates")
    if not np.isfinite(v).all():
        raise ValueError("values must be finite (V* is a success rate in [0, 1])")
    return v


def reconstruct(values: Sequence[float], kept: Sequence[int]) -> np.ndarray:
    """V̂: linear interpolation through ``(j, values[j])`` for j in ``kept``, constant beyond the end points."""
    v = _curve(values)
    idx = sorted(set(int(j) for j in kept))
    if not idx:
        raise ValueError("kept is empty: keep at least one boundary")
    if idx[0] < 0 or idx[-1] >= v.size:
        raise ValueError(f"kept indices must be in [0, {v.size})")
    return np.interp(np.arange(v.size), idx, v[idx])  # np.interp holds the end values constant


def reconstruction_error(values: Sequence[float], kept: Sequence[int]) -> float:
    """E = Σ_j |V*(t_j) − V̂(t_j)| (§4)."""
    v = _curve(values)
    return float(np.abs(v - reconstruct(v, kept)).sum())


def top_b(scores: Sequence[float], b: int) -> list[int]:
    """The indices of the B highest scores (NaN scores never kept; ties to the earlier boundary)."""
    if b < 1:
        raise ValueError(f"b must be >= 1, got {b}")
    order = sorted((j for j, s in enumerate(scores) if not math.isnan(s)), key=lambda j: (-scores[j], j))
    return sorted(order[:b])


def is_flat(values: Sequence[float], tol: float = 0.0) -> bool:
    v = _curve(values)
    return bool(v.max() - v.min() <= tol)


def oracle_floor(values: Sequence[float], b: int) -> tuple[float, list[int]]:
    """The smallest reconstruction error over all choices of B points, and one choice that attains it.

    DP over the last kept point: ``f[c][j]`` = best cost of the curve up to j with c kept points, the last at j.
    ``f[1][j] = head(j)``, ``f[c][j] = min_{i<j} f[c−1][i] + seg(i, j)``, answer ``min_j f[B][j] + tail(j)``,
    where head / tail charge the constant ends and seg the interpolated interior. O(B·m²) after O(m³) segment
    costs (m ≤ 128 in the paper's setting).
    """
    v = _curve(values)
    m = v.size
    if b < 1:
        raise ValueError(f"b must be >= 1, got {b}")
    if b >= m:
        return 0.0, list(range(m))
    head = np.array([np.abs(v[:j] - v[j]).sum() for j in range(m)])
    tail = np.array([np.abs(v[j + 1 :] - v[j]).sum() for j in range(m)])
    seg = np.full((m, m), np.inf)
    for i in range(m):
        for j in range(i + 1, m):
            k = np.arange(i + 1, j)
            line = v[i] + (v[j] - v[i]) * (k - i) / (j - i)
            seg[i, j] = np.abs(v[k] - line).sum()
    f = head.copy()
    back = [np.full(m, -1)]
    for _ in range(1, b):
        cand = f[:, None] + seg  # (i, j)
        arg = cand.argmin(0)
        f = cand[arg, np.arange(m)]
        back.append(arg)
    total = f + tail
    j = int(total.argmin())
    best, chosen = float(total[j]), [j]
    for c in range(b - 1, 0, -1):
        j = int(back[c][j])
        chosen.append(j)
    return best, sorted(chosen)
