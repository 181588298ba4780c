"""Pieces shared by the Triton row kernels (top-k, surprisal/entropy, margin): tile loads and launch sizes."""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from bsb import min_versions

min_versions.check("triton")  # before any kernel: an old Triton is one clear error (dispatch falls back on it)


@triton.jit
def load_tile(base, cols, V):
    """One tile of a logit row in fp32: NaN entries become -inf (they are reported separately), past-the-end
    columns are -inf. Returns the tile and its NaN count."""
    x = tl.load(base + cols, mask=cols < V, other=float("-inf")).to(tl.float32)
    is_nan = x != x
    return tl.where(is_nan, float("-inf"), x), tl.sum(is_nan.to(tl.int32), axis=0)


def block(v: int) -> int:
    """Tile width: 4096 on a GPU; 1024 under the interpreter, which executes tiles as numpy arrays."""
    cap = 1024 if os.environ.get("TRITON_INTERPRET") == "1" else 4096
    return min(cap, triton.next_power_of_2(v))


def rows(logits: torch.Tensor) -> torch.Tensor:
    """(..., V) → contiguous (R, V) in fp32 / bf16 / fp16 (other float dtypes are upcast)."""
    x = logits if logits.dtype in (torch.float32, torch.float16, torch.bfloat16) else logits.float()
    return x.reshape(-1, x.shape[-1]).contiguous()
