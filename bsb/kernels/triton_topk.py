"""Triton Probe-JS: fused top-k log-probs over full-vocabulary rows, then the floored JS of consecutive reads.

``_topk_lse_kernel`` makes one pass over each logit row in BLOCK-wide tiles. For each tile it updates the online
logsumexp (m, s) and merges the tile's top-K into the running top-K. Values and token ids travel together as one
int64 key: an order-preserving int32 image of the fp32 value in the high half and ``0xFFFFFFFF - id`` in the low
half. A descending top-K of the keys is therefore the top-K of the values, with ties going to the lower id (the
reference's rule). Per row it also writes the max and a NaN flag, so input errors cost no extra read.
``_floored_js_kernel`` then applies Eq. 2 and Eq. 1 to the two (K,) rows of each consecutive pair.

Same contracts as :func:`bsb.kernels.reference.topk_logprobs` / :func:`~bsb.kernels.reference.probe_js`.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from bsb.kernels.checks import check_chain_index, check_float, check_k, raise_for_row_stats
from bsb.kernels.triton_rows import block, load_tile, rows

MAX_K = 64
# Below every packed key (the key of a -inf logit is about -9.19e18): marks padding and empty slots.
_NO_KEY = tl.constexpr(-(2**63))


@triton.jit
def _pack(x, cols):
    """fp32 value + column -> int64 key whose signed order is (value desc, column asc)."""
    bits = x.to(tl.int32, bitcast=True)
    ordered = bits ^ ((bits >> 31) & 0x7FFFFFFF)  # monotone signed image of the float
    return (ordered.to(tl.int64) << 32) | (0xFFFFFFFF - cols.to(tl.int64))


@triton.jit
def _topk_lse_kernel(
    x_ptr, lp_ptr, idx_ptr, max_ptr, nan_ptr, V, stride_row,
    K: tl.constexpr, KP: tl.constexpr, BLOCK: tl.constexpr,
):
    row = tl.program_id(0)
    base = x_ptr + row.to(tl.int64) * stride_row
    offs = tl.arange(0, BLOCK)
    m = tl.full((), float("-inf"), tl.float32)
    s = tl.zeros((), tl.float32)
    n_nan = tl.zeros((), tl.int32)
    best = tl.full((KP,), _NO_KEY, tl.int64)
    for start in range(0, V, BLOCK):
        cols = start + offs
        valid = cols < V
        x, tile_nan = load_tile(base, cols, V)
        n_nan += tile_nan
        m_new = tl.maximum(m, tl.max(x, axis=0))
        live = m_new > float("-inf")
        scale = tl.where(live, tl.exp(m - m_new), 0.0)
        e = tl.where(x > float("-inf"), tl.exp(x - m_new), 0.0)  # all -inf while m_new is -inf
        s = s * scale + tl.sum(e, axis=0)
        m = m_new
        keys = tl.where(valid, _pack(x, cols), _NO_KEY)
        # Most tiles of a long row hold nothing above the running K-th key: skip their sort.
        if tl.max(keys, axis=0) > tl.min(best, axis=0):
            tile_top = tl.topk(keys, KP)
            both = tl.reshape(tl.join(best, tile_top), (2 * KP,))
            best = tl.topk(both, KP)
    lse = m + tl.log(s)
    hi = (best >> 32).to(tl.int32)
    val = (hi ^ ((hi >> 31) & 0x7FFFFFFF)).to(tl.float32, bitcast=True)
    col = 0xFFFFFFFF - (best & 0xFFFFFFFF)
    k_offs = tl.arange(0, KP)
    keep = k_offs < K
    tl.store(lp_ptr + row * K + k_offs, val - lse, mask=keep)
    tl.store(idx_ptr + row * K + k_offs, col, mask=keep)
    tl.store(max_ptr + row, m)
    tl.store(nan_ptr + row, (n_nan > 0).to(tl.int8))


@triton.jit
def _floored_js_kernel(lp_ptr, idx_ptr, pair_ptr, out_ptr, L, K: tl.constexpr, KP: tl.constexpr):
    """One program per (row i, read position l): floored JS between row i and row i+1 at position l."""
    i = tl.program_id(0)
    pos = tl.program_id(1)
    if tl.load(pair_ptr + i) == 0:
        return
    k_offs = tl.arange(0, KP)
    inb = k_offs < K
    a_off = (i * L + pos) * K
    b_off = ((i + 1) * L + pos) * K
    la = tl.load(lp_ptr + a_off + k_offs, mask=inb, other=float("-inf"))
    lb = tl.load(lp_ptr + b_off + k_offs, mask=inb, other=float("-inf"))
    ia = tl.load(idx_ptr + a_off + k_offs, mask=inb, other=-1)
    ib = tl.load(idx_ptr + b_off + k_offs, mask=inb, other=-2)
    va = la > float("-inf")
    vb = lb > float("-inf")
    # Renormalisation cancels a common factor per side: exp(l - max) keeps tiny supports from underflowing.
    pa = tl.where(va, tl.exp(la - tl.max(la, axis=0)), 0.0)
    pb = tl.where(vb, tl.exp(lb - tl.max(lb, axis=0)), 0.0)
    fa = 0.5 * tl.min(tl.where(va, pa, float("inf")), axis=0)
    fb = 0.5 * tl.min(tl.where(vb, pb, float("inf")), axis=0)
    same = (ia[:, None] == ib[None, :]) & va[:, None] & vb[None, :]  # (KP, KP)
    a_in_b = tl.max(same.to(tl.int32), axis=1) > 0
    b_in_a = tl.max(same.to(tl.int32), axis=0) > 0
    pb_at_a = tl.sum(tl.where(same, pb[None, :], 0.0), axis=1)
    # Union S: a's support (q_b = its own prob or the floor) + b's tokens missing from a (q_a = the floor).
    qa1 = pa
    qb1 = tl.where(va, tl.where(a_in_b, pb_at_a, fb), 0.0)
    only_b = vb & (b_in_a == 0)
    qa2 = tl.where(only_b, fa, 0.0)
    qb2 = tl.where(only_b, pb, 0.0)
    za = tl.sum(qa1, axis=0) + tl.sum(qa2, axis=0)
    zb = tl.sum(qb1, axis=0) + tl.sum(qb2, axis=0)
    js = _half_kl_pair(qa1 / za, qb1 / zb) + _half_kl_pair(qa2 / za, qb2 / zb)
    js = tl.minimum(tl.maximum(js, 0.0), 0.6931471805599453)
    tl.store(out_ptr + i * L + pos, js)


@triton.jit
def _half_kl_pair(p, q):
    """sum ½ p log(p/m) + ½ q log(q/m), m = (p+q)/2, with 0·log 0 = 0."""
    m = 0.5 * (p + q)
    m_safe = tl.where(m > 0, m, 1.0)
    tp = tl.where(p > 0, p * tl.log(tl.where(p > 0, p, 1.0) / m_safe), 0.0)
    tq = tl.where(q > 0, q * tl.log(tl.where(q > 0, q, 1.0) / m_safe), 0.0)
    return 0.5 * tl.sum(tp + tq, axis=0)


def _topk_rows(x: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(R, V) contiguous -> (R, k) logp, ids; raises the reference's errors from the in-kernel row stats."""
    n_rows, v = x.shape
    lp = torch.empty(n_rows, k, dtype=torch.float32, device=x.device)
    idx = torch.empty(n_rows, k, dtype=torch.int64, device=x.device)
    rmax = torch.empty(n_rows, dtype=torch.float32, device=x.device)
    rnan = torch.empty(n_rows, dtype=torch.int8, device=x.device)
    _topk_lse_kernel[(n_rows,)](x, lp, idx, rmax, rnan, v, x.stride(0), K=k, KP=max(2, triton.next_power_of_2(k)), BLOCK=block(v))
    raise_for_row_stats("logits", rmax, rnan.bool())
    return lp, idx


def topk_logprobs(logits: torch.Tensor, k: int = 20) -> tuple[torch.Tensor, torch.Tensor]:
    check_float("logits", logits, scan=False)
    check_k(k, logits.shape[-1])
    if k > MAX_K:
        from bsb.kernels import reference

        return reference.topk_logprobs(logits, k)
    lp, idx = _topk_rows(rows(logits), k)
    lead = logits.shape[:-1]
    return lp.reshape(*lead, k), idx.reshape(*lead, k)


def probe_js(logits: torch.Tensor, chain_index: torch.Tensor, k: int = 20) -> torch.Tensor:
    check_float("logits", logits, 2, 3, scan=False)
    n, v = logits.shape[0], logits.shape[-1]
    check_k(k, v)
    ci = check_chain_index(chain_index, n)
    if k > MAX_K:
        from bsb.kernels import reference

        return reference.probe_js(logits, chain_index, k)
    n_pos = 1 if logits.ndim == 2 else logits.shape[1]
    lp, idx = _topk_rows(rows(logits), k)  # (N * L, k)
    pairs = torch.zeros(n, dtype=torch.int8)
    pairs[:-1] = (ci[1:] == ci[:-1]).to(torch.int8)
    pairs = pairs.to(logits.device)
    js = torch.full((n, n_pos), math.nan, dtype=torch.float32, device=logits.device)
    if n > 1:
        _floored_js_kernel[(n - 1, n_pos)](lp, idx, pairs, js, n_pos, K=k, KP=max(2, triton.next_power_of_2(k)))
    return js.mean(-1)
