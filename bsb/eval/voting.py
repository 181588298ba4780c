"""Test-time voting over k candidate responses ([TwoStage] §5.5, stated there for k = 3).

Each candidate is ``(correct, length, answer)``: whether it is right, its length in tokens, and its extracted
final answer (normalised; ``""`` when it has none, e.g. a response cut at the cap before a closed ``\\boxed``).

1. Majority: empty answers never form a majority. The answer held by the most candidates, if at least two
   hold it, wins, and the rule picks the lowest-index candidate holding it (for k = 3 this is the paper's
   "e0 non-empty and (e0 = e1 or e0 = e2) → 0; else e1 non-empty and e1 = e2 → 1"; a tie between two
   majorities, possible only for k >= 4, goes to the answer that appears first).
2. Without a majority:

   * ``rand_maj``: the exact expectation of a uniform pick, ``mean(c_i)``.
   * ``maxlen_maj``: the longest candidate with a non-empty answer (the longest overall if all are empty),
     lowest index on ties: ``max(range(k), key=lambda i: (1 if e_i else 0, L_i))``.
   * ``mdl_maj``: the shortest *eligible* candidate (non-empty answer and ``min_len <= L_i < cap``), falling
     back to the shortest overall, lowest index on ties:
     ``min(range(k), key=lambda i: (0 if eligible_i else 1, L_i))``.
   * ``completed_root_maj``: keep candidate 0 (the root of a test-time branching) when it completed (a
     non-empty answer and ``L_0 < cap``), else the ``mdl_maj`` choice.

Each rule returns a score in [0, 1] for the question (``rand_maj`` may be fractional) and which candidate it
picked (None for ``rand_maj``'s expectation), and whether MDL fell back.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

RULES = ("rand_maj", "maxlen_maj", "mdl_maj", "completed_root_maj")


@dataclass(frozen=True)
class Candidate:
    correct: bool
    length: int
    answer: str  # normalised extracted answer; "" when none


@dataclass(frozen=True)
class Vote:
    score: float
    pick: int | None
    majority: bool
    fallback: bool = False  # mdl_maj found no eligible candidate


def majority(cands: Sequence[Candidate]) -> int | None:
    """The lowest index holding the most common non-empty answer when at least two candidates hold it."""
    counts = Counter(c.answer for c in cands if c.answer)
    if not counts:
        return None
    top = max(counts.values())
    if top < 2:
        return None
    for i, c in enumerate(cands):  # the first answer to reach the top count, in index order
        if c.answer and counts[c.answer] == top:
            return i
    return None


def _mdl(cands: Sequence[Candidate], min_len: int, cap: int) -> tuple[int, bool]:
    eligible = [bool(c.answer) and min_len <= c.length < cap for c in cands]
    pick = min(range(len(cands)), key=lambda i: (0 if eligible[i] else 1, cands[i].length))
    return pick, not any(eligible)


def vote(cands: Sequence[Candidate], rule: str, cap: int, min_len: int = 15) -> Vote:
    if rule not in RULES:
        raise ValueError(f"unknown voting rule {rule!r}; choose one of {', '.join(RULES)}")
    if not cands:
        raise ValueError("voting needs at least one candidate")
    m = majority(cands)
    if m is not None:
        return Vote(float(cands[m].correct), m, True)
    if rule == "rand_maj":
        return Vote(sum(c.correct for c in cands) / len(cands), None, False)
    if rule == "maxlen_maj":
        pick = max(range(len(cands)), key=lambda i: (1 if cands[i].answer else 0, cands[i].length))
        return Vote(float(cands[pick].correct), pick, False)
    if rule == "completed_root_maj" and cands[0].answer and cands[0].length < cap:
        return Vote(float(cands[0].correct), 0, False)
    pick, fell_back = _mdl(cands, min_len, cap)
    return Vote(float(cands[pick].correct), pick, False, fell_back)
