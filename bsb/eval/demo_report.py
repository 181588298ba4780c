"""What ``bsb demo`` reports from its forks and value curves: each chain's table (every selector's fork, its score
there, the pool, the read tokens, and the read time against the chain's rollout time), the value curve's boundaries,
the case chain (the one whose V* moves most) and the flip mass at each selector's fork there."""

from __future__ import annotations

import math
from collections.abc import Sequence

COLUMNS = ("selector", "fork t", "score", "pool", "read tokens", "read ms", "read/rollout")


def chain_title(i: int, response_len: int, rollout_s: float) -> str:
    return f"chain {i}: {response_len} tokens, rollout {1000 * rollout_s:.0f} ms"


def chain_rows(i: int, names: Sequence[str], picks: dict, read_s: dict, rollout_s: float) -> list[list[str]]:
    """Chain ``i``'s row of each selector (``picks``: its fork choices, ``read_s``: their read times, by name). A fork
    marked * is the Midpoint fallback's (or the only candidate's)."""
    rows = []
    for name in names:
        c = picks[name][i]
        if c.fork is None:
            rows.append([name, "unforkable", "", "0", "0", "", ""])
            continue
        j = c.pool.positions.index(c.fork) if c.fork in c.pool.positions else None
        score = c.scores[j] if j is not None and c.scores and not math.isnan(c.scores[j]) else float("nan")
        rows.append(
            [
                name,
                f"{c.fork}*" if c.fallback else str(c.fork),
                "" if math.isnan(score) else f"{score:.4f}",
                str(len(c.pool.positions)),
                str(c.token_forwards),
                f"{1000 * read_s[name][i]:.1f}",
                f"{read_s[name][i] / rollout_s:.3f}",
            ]
        )
    return rows


def boundaries(probe_choice, max_response: int) -> list[int]:
    """Where V* is estimated on a chain: the response start and the Probe-JS pool's boundaries, under the cap."""
    return [t for t in [0] + [t for t in probe_choice.pool.positions if t != 0] if t < max_response]


def case_chain(curves: Sequence[Sequence[float]]) -> int:
    """The chain whose V* moves most (ties: the longer curve, then the earlier chain)."""
    return max(range(len(curves)), key=lambda i: (max(curves[i]) - min(curves[i]), len(curves[i]), -i))


def scores_at(choice, cuts: Sequence[int]) -> list[float]:
    """A selector's score at each of ``cuts`` (0 where its pool has none)."""
    by_position = dict(zip(choice.pool.positions, choice.scores))
    return [by_position.get(t, 0.0) for t in cuts]
