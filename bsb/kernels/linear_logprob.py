"""Training log-probs of the sampled tokens without materialising the (N, V) logits: a chunked linear + logsumexp.

``linear_token_logprobs(hidden, weight, targets)`` = ``log_softmax(hidden @ weight.T)[n, targets[n]]`` (the
reference: :func:`bsb.kernels.reference.linear_token_logprobs`). The forward streams the vocabulary in chunks of
``vocab_chunk`` columns (and the rows in chunks of ``row_chunk``) with an online logsumexp in fp32, keeping only the
(N,) logsumexp and target logits; the backward recomputes each chunk's logits and accumulates
``∂/∂z = g·(onehot − softmax)`` into the hidden and weight gradients. Peak extra memory is one
``row_chunk × vocab_chunk`` fp32 block instead of N × V: at micro-batch 16 × 4,096 tokens and V = 151,936 that is
64 MB instead of 40 GB.

Under autocast the chunk matmuls run in the autocast dtype in the forward and, recomputed, in the backward (the same
function is differentiated); accumulation is fp32 throughout. Plain torch: a GPU runs it with cuBLAS matmuls. The
chunk loops make no host sync (each chunk's target logits are gathered under a mask, not indexed by ``nonzero``),
so the GPU never waits for the host between chunks; the input check makes one sync per call.
"""

from __future__ import annotations

import contextlib

import torch

from bsb.kernels.checks import check_float

ROW_CHUNK = 4096
VOCAB_CHUNK = 4096


def _in_chunk(t: torch.Tensor, c0: int, width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(rows whose target falls in columns [c0, c0 + width), each row's target column clamped into the chunk): a
    masked gather / scatter in place of ``nonzero`` indexing, which would wait for the device every chunk."""
    local = t - c0
    return (local >= 0) & (local < width), local.clamp(0, width - 1)[:, None]  # (Nr,), (Nr, 1)


def _autocast_state(device_type: str):
    enabled = torch.is_autocast_enabled(device_type)
    return enabled, torch.get_autocast_dtype(device_type) if enabled else None


class _LinearTokenLogprob(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, targets, row_chunk, vocab_chunk):
        n, v = hidden.shape[0], weight.shape[0]
        lse = torch.full((n,), float("-inf"), dtype=torch.float32, device=hidden.device)
        tgt = torch.zeros(n, dtype=torch.float32, device=hidden.device)
        for r0 in range(0, n, row_chunk):
            h = hidden[r0 : r0 + row_chunk]  # (Nr, d)
            t = targets[r0 : r0 + row_chunk]
            for c0 in range(0, v, vocab_chunk):
                z = (h @ weight[c0 : c0 + vocab_chunk].T).float()  # (Nr, Vc)
                lse[r0 : r0 + row_chunk] = torch.logaddexp(lse[r0 : r0 + row_chunk], torch.logsumexp(z, -1))
                inside, col = _in_chunk(t, c0, z.shape[1])
                here = tgt[r0 : r0 + row_chunk]
                here.copy_(torch.where(inside, z.gather(1, col).squeeze(1), here))
        ctx.save_for_backward(hidden, weight, targets, lse)
        ctx.chunks = (row_chunk, vocab_chunk)
        ctx.autocast = _autocast_state(hidden.device.type)
        return tgt - lse

    @staticmethod
    def backward(ctx, grad):
        hidden, weight, targets, lse = ctx.saved_tensors
        row_chunk, vocab_chunk = ctx.chunks
        enabled, dtype = ctx.autocast
        n, v = hidden.shape[0], weight.shape[0]
        grad = grad.float()
        g_hidden = (
            torch.zeros(hidden.shape, dtype=torch.float32, device=hidden.device) if ctx.needs_input_grad[0] else None
        )
        g_weight = (
            torch.zeros(weight.shape, dtype=torch.float32, device=weight.device) if ctx.needs_input_grad[1] else None
        )
        same = torch.autocast(device_type=hidden.device.type, dtype=dtype) if enabled else contextlib.nullcontext()
        with same:  # recompute the logits exactly as the forward did
            for r0 in range(0, n, row_chunk):
                h = hidden[r0 : r0 + row_chunk]
                t = targets[r0 : r0 + row_chunk]
                g = grad[r0 : r0 + row_chunk]
                for c0 in range(0, v, vocab_chunk):
                    w = weight[c0 : c0 + vocab_chunk]
                    z = (h @ w.T).float()  # (Nr, Vc), recomputed as in the forward
                    d = -torch.exp(z - lse[r0 : r0 + row_chunk, None]) * g[:, None]  # ∂L/∂z = g·(onehot − softmax)
                    inside, col = _in_chunk(t, c0, z.shape[1])
                    d.scatter_add_(1, col, torch.where(inside, g, 0.0)[:, None])
                    if g_hidden is not None:
                        g_hidden[r0 : r0 + row_chunk] += d @ w.float()
                    if g_weight is not None:
                        g_weight[c0 : c0 + vocab_chunk] += d.T @ h.float()
        return (
            g_hidden.to(hidden.dtype) if g_hidden is not None else None,
            g_weight.to(weight.dtype) if g_weight is not None else None,
            None,
            None,
            None,
        )


def linear_token_logprobs(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    row_chunk: int = ROW_CHUNK,
    vocab_chunk: int = VOCAB_CHUNK,
) -> torch.Tensor:
    """log softmax(hidden @ weight.T) at ``targets``, differentiable in ``hidden`` and ``weight``.

    Args:
        hidden: (N, d) float, the final hidden states (final norm applied) that predict the targets.
        weight: (V, d) float, the unembedding (LM head) weight.
        targets: (N,) int64 token ids in [0, V).
    Returns:
        (N,) float32 log-probabilities.
    """
    check_float("hidden", hidden, 2, 2, scan=False)
    check_float("weight", weight, 2, 2, scan=False)
    if hidden.shape[1] != weight.shape[1]:
        raise ValueError(f"hidden (N, d={hidden.shape[1]}) and weight (V, d={weight.shape[1]}) disagree on d")
    if targets.shape != hidden.shape[:1] or targets.dtype not in (torch.int32, torch.int64):
        raise ValueError(
            f"targets must be (N,) = ({hidden.shape[0]},) integer token ids, got {tuple(targets.shape)} {targets.dtype}"
        )
    if targets.numel():
        lo, hi = torch.stack([targets.min(), targets.max()]).tolist()  # the call's one host sync
        if lo < 0 or hi >= weight.shape[0]:
            raise ValueError(f"targets must lie in [0, V={weight.shape[0]})")
    if row_chunk < 1 or vocab_chunk < 1:
        raise ValueError("row_chunk and vocab_chunk must be >= 1")
    return _LinearTokenLogprob.apply(hidden, weight, targets.long(), row_chunk, vocab_chunk)
