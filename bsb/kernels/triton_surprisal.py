"""Triton surprisal and entropy: one pass per logit row.

Per row and BLOCK tile, an online logsumexp (m, s) and the running ``Σ e^{x-m}·x`` give
``entropy = lse − Σ p·x`` and ``surprisal = lse − x[token]`` without a (rows × V) log-softmax.
Same contract as :func:`bsb.kernels.reference.surprisal_entropy`.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from bsb.kernels.checks import check_float, check_tokens, raise_for_row_stats
from bsb.kernels.triton_rows import block, load_tile, rows


@triton.jit
def _surprisal_entropy_kernel(x_ptr, tok_ptr, sur_ptr, ent_ptr, max_ptr, nan_ptr, V, stride_row, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    base = x_ptr + row.to(tl.int64) * stride_row
    tok = tl.load(tok_ptr + row)
    offs = tl.arange(0, BLOCK)
    m = tl.full((), float("-inf"), tl.float32)
    s = tl.zeros((), tl.float32)
    sx = tl.zeros((), tl.float32)  # Σ e^{x-m} x over unmasked tokens
    x_tok = tl.full((), float("-inf"), tl.float32)
    n_nan = tl.zeros((), tl.int32)
    for start in range(0, V, BLOCK):
        cols = start + offs
        x, tile_nan = load_tile(base, cols, V)
        n_nan += tile_nan
        m_new = tl.maximum(m, tl.max(x, axis=0))
        scale = tl.where(m_new > float("-inf"), tl.exp(m - m_new), 0.0)
        unmasked = x > float("-inf")
        e = tl.where(unmasked, tl.exp(x - m_new), 0.0)
        s = s * scale + tl.sum(e, axis=0)
        sx = sx * scale + tl.sum(e * tl.where(unmasked, x, 0.0), axis=0)
        m = m_new
        x_tok = tl.maximum(x_tok, tl.max(tl.where(cols == tok, x, float("-inf")), axis=0))
    lse = m + tl.log(s)
    tl.store(sur_ptr + row, lse - x_tok)
    tl.store(ent_ptr + row, tl.maximum(lse - sx / s, 0.0))
    tl.store(max_ptr + row, m)
    tl.store(nan_ptr + row, (n_nan > 0).to(tl.int8))


def surprisal_entropy(logits: torch.Tensor, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    check_float("logits", logits, scan=False)
    v = logits.shape[-1]
    check_tokens(tokens, logits.shape[:-1], v)
    x = rows(logits)
    n_rows = x.shape[0]
    tok = tokens.reshape(-1).to(device=x.device, dtype=torch.int64)
    sur, ent, rmax = (torch.empty(n_rows, dtype=torch.float32, device=x.device) for _ in range(3))
    rnan = torch.empty(n_rows, dtype=torch.int8, device=x.device)
    with torch.cuda.device_of(x):  # Triton launches on the current device: make it the logits' own
        _surprisal_entropy_kernel[(n_rows,)](x, tok, sur, ent, rmax, rnan, v, x.stride(0), BLOCK=block(v))
    raise_for_row_stats("logits", rmax, rnan.bool())
    lead = logits.shape[:-1]
    return sur.reshape(lead), ent.reshape(lead)
