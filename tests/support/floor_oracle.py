"""An independent, dictionary-based transcription of Eq. 2 and Eq. 1, used only by the tests.

It is written straight from the paper's definition (per token, in float64 Python arithmetic) so that the
vectorised reference in ``bsb.kernels.reference`` is checked against something other than itself.
"""

from __future__ import annotations

import math


def floored_pair(a: dict[int, float], b: dict[int, float]) -> tuple[dict[int, float], dict[int, float]]:
    """Eq. 2: floor each side on S = S_a ∪ S_b and renormalise. ``a``/``b`` map token -> probability (> 0)."""
    s = set(a) | set(b)
    fa, fb = 0.5 * min(a.values()), 0.5 * min(b.values())
    qa = {v: a.get(v, fa) for v in s}
    qb = {v: b.get(v, fb) for v in s}
    za, zb = sum(qa.values()), sum(qb.values())
    return {v: p / za for v, p in qa.items()}, {v: p / zb for v, p in qb.items()}


def js(p: dict[int, float], q: dict[int, float]) -> float:
    """Eq. 1 in nats on a common support."""
    total = 0.0
    for v in set(p) | set(q):
        pv, qv = p.get(v, 0.0), q.get(v, 0.0)
        m = 0.5 * (pv + qv)
        if pv > 0:
            total += 0.5 * pv * math.log(pv / m)
        if qv > 0:
            total += 0.5 * qv * math.log(qv / m)
    return total


def belief(logp, idx) -> dict[int, float]:
    """A top-k row (log-probs, ids) as token -> probability, dropping -inf (probability-0) entries."""
    return {int(i): math.exp(float(lp)) for lp, i in zip(logp, idx) if lp != float("-inf")}
