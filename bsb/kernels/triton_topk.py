"""Triton Probe-JS: top-k log-probs over full-vocabulary rows without sorting the vocabulary, then the floored JS of
consecutive reads.

Values and token ids travel together as one int64 key: an order-preserving int32 image of the fp32 value in the high
half and ``0xFFFFFFFF - id`` in the low half, so the largest keys are the top-K values with ties to the lower id (the
reference's rule).

1. ``_split_kernel``, a (rows × SPLITS) grid sized to the device: each program owns one slice of one row's
   vocabulary. Pass 1 keeps the slice's online logsumexp (m, s), its NaN count, and the K largest *tile maxima*; the
   smallest of those, τ, is a lower bound of the slice's K-th largest value (K tiles each hold an element ≥ τ).
   Pass 2 (the slice again, from L2) compacts every key ≥ τ into a CAP-slot candidate buffer with a prefix sum: no
   sort, typically a few dozen candidates per slice.
2. ``_merge_kernel``, one program per row: combines the slices' logsumexp partials, sorts only the candidates
   (SPLITS × CAP keys) for the final top-K, and writes log-probs, ids, the row max and the NaN flag. A slice whose
   candidates overflowed CAP (ties across a whole slice, mostly -inf rows) sends its row down an exact fallback that
   merges every tile's top-K, so the result never depends on the data's shape.
3. ``_floored_js_kernel`` applies Eq. 2 and Eq. 1 to the two (K,) rows of each consecutive pair.

Input errors are found in the same passes and reported through one device status word: one host sync per call.
Same contracts as :func:`bsb.kernels.reference.topk_logprobs` / :func:`~bsb.kernels.reference.probe_js`.
"""

from __future__ import annotations

import math
import os

import torch
import triton
import triton.language as tl

from bsb.kernels.checks import (
    CHAINS_NOT_CONTIGUOUS,
    ROW_ALL_MASKED,
    ROW_NAN,
    ROW_POSINF,
    check_chain_index,
    check_float,
    check_k,
    raise_status,
)
from bsb.kernels.triton_rows import block, load_tile, rows

MAX_K = 64
CAP = 128  # candidate slots per slice
# Below every packed key (the key of a -inf logit is about -9.19e18): marks padding and empty slots.
_NO_KEY = tl.constexpr(-(2**63))
_TOP_KEY = tl.constexpr(2**63 - 1)
INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"


@triton.jit
def _pack(x, cols):
    """fp32 value + column -> int64 key whose signed order is (value desc, column asc)."""
    bits = x.to(tl.int32, bitcast=True)
    ordered = bits ^ ((bits >> 31) & 0x7FFFFFFF)  # monotone signed image of the float
    return (ordered.to(tl.int64) << 32) | (0xFFFFFFFF - cols.to(tl.int64))


@triton.jit
def _split_kernel(
    x_ptr,
    cand_ptr,
    cnt_ptr,
    m_ptr,
    s_ptr,
    nan_ptr,
    V,
    stride_row,
    split_len,
    SPLITS,
    K: tl.constexpr,
    KP: tl.constexpr,
    CAP: tl.constexpr,
    BLOCK: tl.constexpr,
):
    row = tl.program_id(0)
    split = tl.program_id(1)
    base = x_ptr + row.to(tl.int64) * stride_row
    start = split * split_len
    end = tl.minimum(start + split_len, V)
    offs = tl.arange(0, BLOCK)
    k_offs = tl.arange(0, KP)
    m = tl.full((), float("-inf"), tl.float32)
    s = tl.zeros((), tl.float32)
    n_nan = tl.zeros((), tl.int32)
    # the K largest tile maxima (padding slots hold the top key, so the minimum is over the K real slots)
    tmax = tl.where(k_offs < K, tl.full((KP,), _NO_KEY, tl.int64), tl.full((KP,), _TOP_KEY, tl.int64))
    for t0 in range(start, end, BLOCK):
        cols = t0 + offs
        x, tile_nan = load_tile(base, cols, end)
        n_nan += tile_nan
        m_new = tl.maximum(m, tl.max(x, axis=0))
        scale = tl.where(m_new > float("-inf"), tl.exp(m - m_new), 0.0)
        s = s * scale + tl.sum(tl.where(x > float("-inf"), tl.exp(x - m_new), 0.0), axis=0)
        m = m_new
        kmax = tl.max(tl.where(cols < end, _pack(x, cols), _NO_KEY), axis=0)
        lo = tl.min(tmax, axis=0)
        tmax = tl.where((k_offs == tl.argmin(tmax, axis=0)) & (kmax > lo), kmax, tmax)
    tau = tl.min(tmax, axis=0)  # a lower bound of the slice's K-th largest key (no bound with fewer than K tiles)
    slot = row * SPLITS + split
    cbase = cand_ptr + slot.to(tl.int64) * CAP
    count = tl.zeros((), tl.int32)
    for t0 in range(start, end, BLOCK):
        cols = t0 + offs
        x, _ = load_tile(base, cols, end)
        keys = _pack(x, cols)
        take = (cols < end) & (keys >= tau)
        pos = count + tl.cumsum(take.to(tl.int32), axis=0) - 1
        tl.store(cbase + pos, keys, mask=take & (pos < CAP))
        count += tl.sum(take.to(tl.int32), axis=0)
    tl.store(cnt_ptr + slot, count)
    tl.store(m_ptr + slot, m)
    tl.store(s_ptr + slot, s)
    tl.store(nan_ptr + slot, n_nan)


@triton.jit
def _merge_kernel(
    x_ptr,
    cand_ptr,
    cnt_ptr,
    m_ptr,
    s_ptr,
    nan_ptr,
    lp_ptr,
    idx_ptr,
    max_ptr,
    rnan_ptr,
    V,
    stride_row,
    SPLITS,
    K: tl.constexpr,
    KP: tl.constexpr,
    CAP: tl.constexpr,
    SP: tl.constexpr,
    BLOCK: tl.constexpr,
):
    row = tl.program_id(0)
    so = tl.arange(0, SP)
    smask = so < SPLITS
    ms = tl.load(m_ptr + row * SPLITS + so, mask=smask, other=float("-inf"))
    ss = tl.load(s_ptr + row * SPLITS + so, mask=smask, other=0.0)
    cnts = tl.load(cnt_ptr + row * SPLITS + so, mask=smask, other=0)
    n_nan = tl.sum(tl.load(nan_ptr + row * SPLITS + so, mask=smask, other=0), axis=0)
    big_m = tl.max(ms, axis=0)
    total = tl.sum(tl.where(ms > float("-inf"), ss * tl.exp(ms - big_m), 0.0), axis=0)
    lse = big_m + tl.log(total)
    if tl.max(cnts, axis=0) > CAP:  # a slice overflowed: the exact path, every tile's top-K merged
        base = x_ptr + row.to(tl.int64) * stride_row
        offs = tl.arange(0, BLOCK)
        best = tl.full((KP,), _NO_KEY, tl.int64)
        for t0 in range(0, V, BLOCK):
            cols = t0 + offs
            x, _ = load_tile(base, cols, V)
            keys = tl.where(cols < V, _pack(x, cols), _NO_KEY)
            if tl.max(keys, axis=0) > tl.min(best, axis=0):
                both = tl.reshape(tl.join(best, tl.topk(keys, KP)), (2 * KP,))
                best = tl.topk(both, KP)
    else:
        cs = tl.arange(0, CAP)
        keep = smask[:, None] & (cs[None, :] < cnts[:, None])
        slots = cand_ptr + (row * SPLITS + so)[:, None].to(tl.int64) * CAP + cs[None, :]
        keys = tl.load(slots, mask=keep, other=_NO_KEY)  # (SP, CAP)
        best = tl.topk(tl.reshape(keys, (SP * CAP,)), KP)
    hi = (best >> 32).to(tl.int32)
    val = (hi ^ ((hi >> 31) & 0x7FFFFFFF)).to(tl.float32, bitcast=True)
    col = 0xFFFFFFFF - (best & 0xFFFFFFFF)
    k_offs = tl.arange(0, KP)
    keep_k = k_offs < K
    tl.store(lp_ptr + row * K + k_offs, val - lse, mask=keep_k)
    tl.store(idx_ptr + row * K + k_offs, col, mask=keep_k)
    tl.store(max_ptr + row, big_m)
    tl.store(rnan_ptr + row, (n_nan > 0).to(tl.int8))


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


def _layout(n_rows: int, v: int, k: int, device: torch.device) -> tuple[int, int, int]:
    """(SPLITS, split length, BLOCK): about four waves of the device's SMs, each slice at least 2K tiles long so that
    the tile-maxima bound τ is tight."""
    blk = 128 if INTERPRET else 512
    blk = min(blk, triton.next_power_of_2(v))
    programs = 8 if INTERPRET else 4 * torch.cuda.get_device_properties(device).multi_processor_count
    splits = max(1, min(triton.cdiv(programs, n_rows), v // (2 * k * blk), 64))
    split_len = triton.cdiv(triton.cdiv(v, splits), blk) * blk
    return triton.cdiv(v, split_len), split_len, blk


def _topk_rows(x: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(R, V) contiguous -> (R, k) logp, ids, and the device status word of the input errors (no host sync)."""
    n_rows, v = x.shape
    kp = max(2, triton.next_power_of_2(k))
    splits, split_len, blk = _layout(n_rows, v, k, x.device)
    dev = x.device
    cand = torch.empty(n_rows * splits * CAP, dtype=torch.int64, device=dev)
    cnt = torch.empty(n_rows * splits, dtype=torch.int32, device=dev)
    m = torch.empty(n_rows * splits, dtype=torch.float32, device=dev)
    s = torch.empty_like(m)
    nan = torch.empty(n_rows * splits, dtype=torch.int32, device=dev)
    lp = torch.empty(n_rows, k, dtype=torch.float32, device=dev)
    idx = torch.empty(n_rows, k, dtype=torch.int64, device=dev)
    rmax = torch.empty(n_rows, dtype=torch.float32, device=dev)
    rnan = torch.empty(n_rows, dtype=torch.int8, device=dev)
    # Triton launches on the current CUDA device, which a cuda:N run never sets: make it the logits' own.
    with torch.cuda.device_of(x):
        _split_kernel[(n_rows, splits)](
            x, cand, cnt, m, s, nan, v, x.stride(0), split_len, splits, K=k, KP=kp, CAP=CAP, BLOCK=blk
        )
        _merge_kernel[(n_rows,)](
            x,
            cand,
            cnt,
            m,
            s,
            nan,
            lp,
            idx,
            rmax,
            rnan,
            v,
            x.stride(0),
            splits,
            K=k,
            KP=kp,
            CAP=CAP,
            SP=max(2, triton.next_power_of_2(splits)),
            BLOCK=block(v),
        )
    return lp, idx, _row_status(rmax, rnan)


def _row_status(rmax: torch.Tensor, rnan: torch.Tensor) -> torch.Tensor:
    """One int32 on the device: a bit per kind of input error (NaN, +inf, an all-masked row)."""
    bad_nan = (rnan != 0).any() | torch.isnan(rmax).any()
    posinf, all_masked = torch.isposinf(rmax).any().int(), torch.isneginf(rmax).any().int()
    return (bad_nan.int() << ROW_NAN) | (posinf << ROW_POSINF) | (all_masked << ROW_ALL_MASKED)


def _raise(status: torch.Tensor) -> None:
    """The single host sync of a call: raise the first error the device status word holds."""
    raise_status(int(status))


def topk_logprobs(logits: torch.Tensor, k: int = 20) -> tuple[torch.Tensor, torch.Tensor]:
    check_float("logits", logits, scan=False)
    check_k(k, logits.shape[-1])
    if k > MAX_K:
        from bsb.kernels import reference

        return reference.topk_logprobs(logits, k)
    lp, idx, status = _topk_rows(rows(logits), k)
    _raise(status)
    lead = logits.shape[:-1]
    return lp.reshape(*lead, k), idx.reshape(*lead, k)


def _chain_pairs_on_device(
    chain_index: torch.Tensor, n: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """(N,) int8 'row i and i+1 share a chain' and the contiguity status bit, computed where the logits are."""
    ci = chain_index.to(device=device, dtype=torch.int64)
    pairs = torch.zeros(n, dtype=torch.int8, device=device)
    pairs[:-1] = (ci[1:] == ci[:-1]).to(torch.int8)
    srt, order = torch.sort(ci, stable=True)  # a chain is contiguous iff its rows are consecutive once sorted by id
    broken = ((srt[1:] == srt[:-1]) & (order[1:] - order[:-1] != 1)).any()
    return pairs, broken.int() << CHAINS_NOT_CONTIGUOUS


def probe_js(logits: torch.Tensor, chain_index: torch.Tensor, k: int = 20, defer_errors: bool = False):
    """With ``defer_errors`` returns ``(scores, status)`` without the host sync: the caller copies the status word with
    its results and calls :func:`raise_status` (one sync for both). ``k`` above :data:`MAX_K` is served by the
    reference, which checks eagerly: then ``status`` is None."""
    check_float("logits", logits, 2, 3, scan=False)
    n, v = logits.shape[0], logits.shape[-1]
    check_k(k, v)
    check_chain_index(chain_index, n, scan=False, device_ok=True)
    if k > MAX_K:
        from bsb.kernels import reference

        return reference.probe_js(logits, chain_index, k, defer_errors)  # checks at once: status None
    n_pos = 1 if logits.ndim == 2 else logits.shape[1]
    lp, idx, status = _topk_rows(rows(logits), k)  # (N * L, k)
    pairs, chain_status = _chain_pairs_on_device(chain_index, n, logits.device)
    js = torch.full((n, n_pos), math.nan, dtype=torch.float32, device=logits.device)
    if n > 1:
        with torch.cuda.device_of(lp):
            _floored_js_kernel[(n - 1, n_pos)](lp, idx, pairs, js, n_pos, K=k, KP=max(2, triton.next_power_of_2(k)))
    if defer_errors:
        return js.mean(-1), status | chain_status
    _raise(status | chain_status)
    return js.mean(-1)
