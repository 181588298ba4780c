"""Paired bootstrap confidence intervals for the difference between two arms ([TwoStage] §5.3, §5.5).

Scores are arrays ``a[s, q]``, ``b[s, q]`` (seed × question; one row for a single seed) on the same questions,
paired by seed index and question. The difference is ``d = a − b``.

* :func:`question_clustered`: resample questions with replacement (all seeds of a question travel
  together); statistic: the mean of ``d`` over seeds and resampled questions.
* :func:`two_level`: resample seeds with replacement, then questions with replacement, independently; statistic:
  the mean of ``d[s*, q*]``. It adds the seed-to-seed variation to the question variation.

* :func:`cluster_mean`: one score difference per item (a chain), items grouped in clusters (the chains of one
  problem); resample clusters with replacement; statistic: the mean over the resampled clusters' items. With one item
  a cluster it is the plain bootstrap of a paired mean.

All use a fixed number of resamples (4,000 as in the paper) and a seed, and return the observed mean
difference with the percentile 95% interval.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Interval:
    diff: float  # observed mean difference a − b
    low: float
    high: float
    resamples: int

    def __str__(self) -> str:
        return f"{self.diff:+.4f} [{self.low:+.4f}, {self.high:+.4f}]"


def _diff(a, b) -> np.ndarray:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.ndim == 1:
        a, b = a[None], b[None]
    if a.shape != b.shape or a.ndim != 2 or a.size == 0:
        raise ValueError(f"paired scores must have the same (seeds, questions) shape, got {a.shape} and {b.shape}")
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        raise ValueError("scores must be finite")
    return a - b


def _interval(d: np.ndarray, stats: np.ndarray, level: float, resamples: int) -> Interval:
    lo, hi = np.percentile(stats, [50 * (1 - level), 50 * (1 + level)])
    return Interval(float(d.mean()), float(lo), float(hi), resamples)


def question_clustered(a, b, resamples: int = 4000, seed: int = 0, level: float = 0.95) -> Interval:
    d = _diff(a, b)
    per_q = d.mean(axis=0)  # (Q,)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, per_q.size, size=(resamples, per_q.size))
    return _interval(d, per_q[idx].mean(axis=1), level, resamples)


def two_level(a, b, resamples: int = 4000, seed: int = 0, level: float = 0.95) -> Interval:
    d = _diff(a, b)
    n_s, n_q = d.shape
    rng = np.random.default_rng(seed)
    stats = np.empty(resamples)
    for r in range(resamples):
        s = rng.integers(0, n_s, size=n_s)
        q = rng.integers(0, n_q, size=n_q)
        stats[r] = d[np.ix_(s, q)].mean()
    return _interval(d, stats, level, resamples)


def cluster_mean(d, clusters, resamples: int = 4000, seed: int = 0, level: float = 0.95) -> Interval:
    """The mean of the paired differences ``d`` (one an item) with its interval, resampling the ``clusters`` (one
    label an item: items of a cluster travel together, as chains sampled from one problem do)."""
    d = np.asarray(d, dtype=np.float64)
    if d.ndim != 1 or d.size == 0 or len(clusters) != d.size:
        raise ValueError(f"one cluster label per difference, got {len(clusters)} labels for shape {d.shape}")
    if not np.isfinite(d).all():
        raise ValueError("scores must be finite")
    labels, index = np.unique(np.asarray(clusters, dtype=object).astype(str), return_inverse=True)
    sums, counts = np.bincount(index, weights=d), np.bincount(index).astype(np.float64)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, labels.size, size=(resamples, labels.size))
    return _interval(d, sums[idx].sum(axis=1) / counts[idx].sum(axis=1), level, resamples)
