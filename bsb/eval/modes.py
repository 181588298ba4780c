"""The test-time modes of ``bsb evaluate`` ([TwoStage] §5.5-5.6): Mean@1 (the greedy root), every voting rule of
:mod:`bsb.eval.voting` over k sampled candidates, Pass@k, and each native branching rule of
:mod:`bsb.eval.branching` (the root and its two branches voted by MDL and by CompletedRoot). A question's score under
each, and each mode's accuracy with a question-clustered paired bootstrap interval of its difference to Mean@1."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from bsb.eval.bootstrap import question_clustered
from bsb.eval.branching import RULES as BRANCH_RULES
from bsb.eval.voting import RULES as VOTE_RULES
from bsb.eval.voting import Candidate, vote

BASE = "mean@1"
BRANCH_VOTES = ("mdl_maj", "completed_root_maj")  # how a branching rule's root and two branches are voted
COLUMNS = ("mode", "accuracy", "diff vs mean@1 [95% CI, question-clustered]")
MARKDOWN_COLUMNS = ("mode", "accuracy", "diff vs mean@1 [95% CI]")


def mode_names(k: int) -> list[str]:
    return (
        [BASE]
        + [f"{r}@{k}" for r in VOTE_RULES]
        + [f"pass@{k}"]
        + [f"{b}_fork@3:{r}" for b in BRANCH_RULES for r in BRANCH_VOTES]
    )


def question_scores(
    root: Candidate, sampled: Sequence[Candidate], trios: Mapping[str, Sequence[Candidate]], cap: int, min_len: int
) -> dict[str, float]:
    """One question's score under every mode: ``root`` the greedy response, ``sampled`` the k draws, ``trios`` by
    branching rule the root and its branches; ``cap`` the response cap and ``min_len`` MDL's eligibility."""
    k = len(sampled)
    out = {BASE: float(root.correct)}
    out.update({f"{r}@{k}": vote(sampled, r, cap, min_len).score for r in VOTE_RULES})
    out[f"pass@{k}"] = float(any(c.correct for c in sampled))
    for b, trio in trios.items():
        out.update({f"{b}_fork@3:{r}": vote(trio, r, cap, min_len).score for r in BRANCH_VOTES})
    return out


def summarize(scores: Mapping[str, Sequence[float]], resamples: int, seed: int) -> tuple[dict, list[list[str]]]:
    """Every mode's accuracy and its difference to Mean@1 (``diff``, ``low``, ``high``), and the table's rows."""
    base = np.array(scores[BASE])
    summary, rows = {}, []
    for m, values in scores.items():
        s = np.array(values)
        iv = question_clustered(s, base, resamples, seed) if m != BASE else None
        summary[m] = {"accuracy": float(s.mean()), **({"diff": iv.diff, "low": iv.low, "high": iv.high} if iv else {})}
        rows.append([m, f"{s.mean():.3f}", str(iv) if iv else ""])
    return summary, rows
