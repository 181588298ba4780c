"""Triton top-1 − top-2 logit margin (Δz_t, [TwoStage] §5.6): one pass per row.

Each BLOCK tile contributes its largest value and the largest value left after removing one occurrence of it
(so a tie for first place gives a margin of 0); the running pair merges as
``(max(a1, c1), max(min(a1, c1), a2, c2))``. Same contract as :func:`bsb.kernels.reference.logit_margin`.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from bsb.kernels.checks import check_float, raise_for_row_stats
from bsb.kernels.triton_rows import block, load_tile, rows


@triton.jit
def _margin_kernel(x_ptr, out_ptr, max_ptr, nan_ptr, V, stride_row, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    base = x_ptr + row.to(tl.int64) * stride_row
    offs = tl.arange(0, BLOCK)
    a1 = tl.full((), float("-inf"), tl.float32)
    a2 = tl.full((), float("-inf"), tl.float32)
    n_nan = tl.zeros((), tl.int32)
    for start in range(0, V, BLOCK):
        cols = start + offs
        x, tile_nan = load_tile(base, cols, V)
        n_nan += tile_nan
        c1 = tl.max(x, axis=0)
        first = tl.argmax(x, axis=0)
        c2 = tl.max(tl.where(offs == first, float("-inf"), x), axis=0)
        a2 = tl.maximum(tl.minimum(a1, c1), tl.maximum(a2, c2))
        a1 = tl.maximum(a1, c1)
    tl.store(out_ptr + row, a1 - a2)
    tl.store(max_ptr + row, a1)
    tl.store(nan_ptr + row, (n_nan > 0).to(tl.int8))


def logit_margin(logits: torch.Tensor) -> torch.Tensor:
    check_float("logits", logits, scan=False)
    v = logits.shape[-1]
    if v < 2:
        raise ValueError(f"logits needs a vocabulary of at least 2 for a margin, got V={v}")
    x = rows(logits)
    n_rows = x.shape[0]
    out, rmax = (torch.empty(n_rows, dtype=torch.float32, device=x.device) for _ in range(2))
    rnan = torch.empty(n_rows, dtype=torch.int8, device=x.device)
    with torch.cuda.device_of(x):  # Triton launches on the current device: make it the logits' own
        _margin_kernel[(n_rows,)](x, out, rmax, rnan, v, x.stride(0), BLOCK=block(v))
    raise_for_row_stats("logits", rmax, rnan.bool())
    return out.reshape(logits.shape[:-1])
