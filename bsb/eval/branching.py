"""Native branching at test time ([TwoStage] §5.6, Table 5B): MinMargin-Fork@3 and FirstGap05-Fork@3.

From a greedy root response, read the teacher-forced top-1 − top-2 logit margin Δz_t at every zero-based
response position ``t`` in a window (default ``[4, 64)``), pick two positions, and at each one replace the
root's token by the model's top-2 token (:func:`branch_prefixes`); the caller continues them greedily. The root
and the two branches are the k = 3 candidates of a voting rule (:mod:`bsb.eval.voting`).

* ``min_margin``: ``t1`` = the smallest margin in the window; ``t2`` = the smallest margin with ``|t2 − t1| >= 2``.
* ``first_gap``: the chronologically first and second window positions with ``Δz_t <= 0.5`` and
  ``|t2 − t1| >= 2``; slots left empty (fewer than two such positions) fall back to the min-margin picks.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from bsb.engine.probe import MARGIN_WINDOW

RULES = ("min_margin", "first_gap")


def fork_positions(
    margins: Sequence[float],
    rule: str,
    window: tuple[int, int] = MARGIN_WINDOW,
    threshold: float = 0.5,
    separation: int = 2,
) -> tuple[list[int], int]:
    """Two fork positions and how many slots fell back to the minimum-margin rule (``first_gap`` only)."""
    if rule not in RULES:
        raise ValueError(f"unknown branching rule {rule!r}; choose one of {', '.join(RULES)}")
    lo, hi = window
    idx = [t for t in range(lo, min(hi, len(margins)))]
    if not idx:
        return [], 0
    by_margin = sorted(idx, key=lambda t: (margins[t], t))
    mins = [by_margin[0]] + [t for t in by_margin[1:] if abs(t - by_margin[0]) >= separation][:1]
    if rule == "min_margin":
        return mins, 0
    gaps: list[int] = []
    for t in idx:
        if margins[t] <= threshold and all(abs(t - g) >= separation for g in gaps):
            gaps.append(t)
        if len(gaps) == 2:
            return gaps, 0
    picks, fallback = list(gaps), 0
    for t in mins + by_margin:
        if len(picks) == 2:
            break
        if all(abs(t - p) >= separation for p in picks):
            picks.append(t)
            fallback += 1
    return picks, fallback


@torch.no_grad()
def margins_and_top2(model, prompt: Sequence[int], response: Sequence[int]) -> tuple[list[float], list[int]]:
    """Teacher-forced Δz_t and the top-2 token id before each response token (one forward of the HF model)."""
    device = next(model.parameters()).device
    ids = torch.tensor([list(prompt) + list(response)], device=device)
    logits = model(input_ids=ids).logits[0, len(prompt) - 1 : len(prompt) - 1 + len(response)].float()  # (T, V)
    top = logits.topk(2, dim=-1)
    return (top.values[:, 0] - top.values[:, 1]).tolist(), top.indices[:, 1].tolist()


def branch_prefixes(
    model, prompt: list[int], root: list[int], rule: str, window: tuple[int, int] = MARGIN_WINDOW
) -> tuple[list[list[int]], list[int], int]:
    """The two branch prefixes (the root up to a fork position, then the model's top-2 token there), their
    positions, and the fallback count. A root too short for the window yields none. Continue each prefix
    greedily (batched across questions by the caller) to get the branches."""
    margins, top2 = margins_and_top2(model, prompt, root)
    picks, fallback = fork_positions(margins, rule, window)
    return [root[:t] + [top2[t]] for t in picks], picks, fallback


def eff_caps(
    sort_keys: Sequence[int], prefix_lens: Sequence[int], cap: int, batch_size: int = 64, min_gen: int = 64
) -> list[int]:
    """[TwoStage]'s per-row total budget of batched branch continuations (§5.6, ``run_batched_prefixes``): rows are
    sorted by ``sort_keys`` (prompt + prefix length) into batches of ``batch_size``; each batch runs
    ``max_gen = max(min_gen, cap − max_j K_j)`` continuation steps, so row i with prefix length ``K_i`` may reach
    ``eff_cap_i = K_i + max_gen`` tokens (``= cap − max_j K_j + K_i <= cap`` unless the floor applies). Returned in
    the input order."""
    if len(sort_keys) != len(prefix_lens):
        raise ValueError("sort_keys and prefix_lens must have one entry per row")
    order = sorted(range(len(prefix_lens)), key=lambda i: (sort_keys[i], i))
    out = [0] * len(prefix_lens)
    for b in range(0, len(order), batch_size):
        rows = order[b : b + batch_size]
        max_gen = max(min_gen, cap - max(prefix_lens[i] for i in rows))
        for i in rows:
            out[i] = prefix_lens[i] + max_gen
    return out
