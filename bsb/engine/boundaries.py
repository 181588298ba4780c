"""Candidate step boundaries of a chain (§3.1, App. A).

A boundary is a position ``t`` in the chain's token ids: the prefix ``chain[:t]`` ends just after a token whose
text contains a line break. Tokenizers merge newlines with other characters ('.\\n', '\\n\\n', ')\\n    '), so
the test is on each token's decoded text, computed once per tokenizer (:func:`newline_token_mask`).

Rules, as the paper states them and where it is silent:

* A fork at ``t`` re-rolls ``chain[t:]``; it needs at least ``min_tail`` (2) tokens past the cut and a
  non-empty prefix, so valid positions are ``1 <= t <= T - min_tail``.
* Range cap ρ: only positions ``t <= ρ·T`` are scored (ρ = 0.5 on base models, 1 on SFT models).
* At most C (16) candidates, evenly spaced over the newline boundaries in range.
* A span with no newline boundary is cut at its midpoint (one candidate, ``kind="midpoint"``).
* A chain with no valid position, or no response budget left for a continuation, cannot fork: it is
  returned with ``kind="unforkable"`` and a reason, never silently dropped (the trainer refills it).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

MIN_TAIL = 2  # the default ``min_tail``: tokens a sibling re-rolls past the cut, at least
MIN_FORK_TOKENS = 1 + MIN_TAIL  # the shortest response that can fork: a non-empty prefix and the tail


@dataclass(frozen=True)
class CandidatePool:
    """The candidate fork positions of one chain, in increasing order."""

    positions: list[int]
    kind: str  # "newline" | "midpoint" | "unforkable"
    chain_len: int
    reason: str = ""  # why a chain is unforkable
    newline_total: int = field(default=0)  # newline boundaries in range before subsampling

    @property
    def forkable(self) -> bool:
        return self.kind != "unforkable"


def newline_token_mask(tokenizer, vocab_size: int | None = None) -> torch.Tensor:
    """(V,) bool: whether token id v's decoded text contains a line break. Compute once per tokenizer."""
    v = vocab_size if vocab_size is not None else len(tokenizer)
    texts = tokenizer.batch_decode(
        [[i] for i in range(v)], skip_special_tokens=False, clean_up_tokenization_spaces=False
    )
    return torch.tensor(["\n" in t for t in texts], dtype=torch.bool)


def candidate_pool(
    chain: torch.Tensor | list[int],
    newline_mask: torch.Tensor,
    max_candidates: int = 16,
    range_cap: float = 1.0,
    min_tail: int = MIN_TAIL,
    budget_left: int | None = None,
) -> CandidatePool:
    """The candidate boundaries of one chain.

    Args:
        chain: (T,) response token ids (the prompt excluded).
        newline_mask: (V,) bool from :func:`newline_token_mask`.
        max_candidates: C, the cap on scored candidates.
        range_cap: ρ in (0, 1]: score only positions t <= ρ·T.
        min_tail: tokens a sibling must re-roll past the cut.
        budget_left: response tokens still allowed for a continuation (None: unlimited); 0 means no fork.
    """
    if max_candidates < 1:
        raise ValueError(f"max_candidates must be >= 1, got {max_candidates}")
    if not 0.0 < range_cap <= 1.0:
        raise ValueError(f"range_cap must be in (0, 1], got {range_cap}")
    if min_tail < 1:
        raise ValueError(f"min_tail must be >= 1, got {min_tail}")
    ids = torch.as_tensor(chain, dtype=torch.long).reshape(-1)
    n_tokens = ids.numel()
    if ids.numel() and (ids.min() < 0 or ids.max() >= newline_mask.numel()):
        raise ValueError(
            f"chain holds token ids outside [0, {newline_mask.numel()}); is newline_mask for this tokenizer?"
        )
    if budget_left is not None and budget_left <= 0:
        return CandidatePool([], "unforkable", n_tokens, reason="no response budget left for a continuation")
    last = min(n_tokens - min_tail, int(range_cap * n_tokens))
    if last < 1:
        return CandidatePool(
            [], "unforkable", n_tokens, reason=f"chain of {n_tokens} tokens has no cut with {min_tail} tokens after it"
        )
    after_newline = torch.nonzero(newline_mask[ids]).reshape(-1) + 1  # t just after each newline token
    in_range = after_newline[(after_newline >= 1) & (after_newline <= last)].tolist()
    if not in_range:
        mid = min(max(1, n_tokens // 2), last)
        return CandidatePool([mid], "midpoint", n_tokens)
    return CandidatePool(evenly_spaced(in_range, max_candidates), "newline", n_tokens, newline_total=len(in_range))


def evenly_spaced(positions: list[int], k: int) -> list[int]:
    """At most ``k`` of ``positions`` (sorted), evenly spaced by index, first and last included."""
    n = len(positions)
    if n <= k:
        return list(positions)
    picks = sorted({round(i * (n - 1) / (k - 1)) for i in range(k)}) if k > 1 else [(n - 1) // 2]
    return [positions[i] for i in picks]
