"""Triton logit lens: log P^(l)(target) per layer and position without materialising the logits (Eq. 3).

Grid: (row blocks of BM rows) × (SPLITS slices of the vocabulary). Each program applies the model's final norm
to its rows in-kernel (RMSNorm or LayerNorm, statistics in fp32), streams its slice of the V×d unembedding in
BN-wide tiles through ``tl.dot`` (fp32 accumulation), and keeps an online logsumexp (m, s) plus the target's
logit. Only (rows × SPLITS) partials reach memory; a tiny combine gives ``target − (M + log S)``.

Same contract as :func:`bsb.kernels.reference.lens_logprobs`.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from bsb.kernels.checks import check_lens_inputs, raise_if_lens_nonfinite


@triton.jit
def _lens_kernel(
    x_ptr, w_ptr, b_ptr, u_ptr, tgt_ptr, m_ptr, s_ptr, t_ptr,
    R, V, D, v_per_split, eps, SPLITS,
    RMS: tl.constexpr, HAS_BIAS: tl.constexpr, IEEE: tl.constexpr,
    BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
):
    pid_m = tl.program_id(0)
    split = tl.program_id(1)
    rows = pid_m * BM + tl.arange(0, BM)
    rmask = rows < R
    ks = tl.arange(0, BK)
    # Norm statistics over d, in fp32.
    acc1 = tl.zeros((BM,), tl.float32)
    for k0 in range(0, D, BK):
        xk = tl.load(x_ptr + rows[:, None] * D + (k0 + ks)[None, :], mask=rmask[:, None] & ((k0 + ks) < D)[None, :], other=0.0).to(tl.float32)
        if RMS:
            acc1 += tl.sum(xk * xk, axis=1)
        else:
            acc1 += tl.sum(xk, axis=1)
    if RMS:
        mean = tl.zeros((BM,), tl.float32)
        rstd = 1.0 / tl.sqrt(acc1 / D + eps)
    else:
        mean = acc1 / D
        acc2 = tl.zeros((BM,), tl.float32)
        for k0 in range(0, D, BK):
            kmask = (k0 + ks) < D
            xk = tl.load(x_ptr + rows[:, None] * D + (k0 + ks)[None, :], mask=rmask[:, None] & kmask[None, :], other=0.0).to(tl.float32)
            dev = tl.where(kmask[None, :], xk - mean[:, None], 0.0)
            acc2 += tl.sum(dev * dev, axis=1)
        rstd = 1.0 / tl.sqrt(acc2 / D + eps)

    tgt = tl.load(tgt_ptr + rows, mask=rmask, other=-1)
    m = tl.full((BM,), float("-inf"), tl.float32)
    s = tl.zeros((BM,), tl.float32)
    t = tl.zeros((BM,), tl.float32)
    v_start = split * v_per_split
    v_end = tl.minimum(v_start + v_per_split, V)
    ns = tl.arange(0, BN)
    for n0 in range(v_start, v_end, BN):
        cols = n0 + ns
        cmask = cols < v_end
        acc = tl.zeros((BM, BN), tl.float32)
        for k0 in range(0, D, BK):
            kmask = (k0 + ks) < D
            xk = tl.load(x_ptr + rows[:, None] * D + (k0 + ks)[None, :], mask=rmask[:, None] & kmask[None, :], other=0.0).to(tl.float32)
            wk = tl.load(w_ptr + k0 + ks, mask=kmask, other=0.0).to(tl.float32)
            xn = (xk - mean[:, None]) * rstd[:, None] * wk[None, :]
            if HAS_BIAS:
                xn += tl.load(b_ptr + k0 + ks, mask=kmask, other=0.0).to(tl.float32)[None, :]
            uk = tl.load(u_ptr + cols[None, :] * D + (k0 + ks)[:, None], mask=cmask[None, :] & kmask[:, None], other=0.0)  # (BK, BN)
            if IEEE:
                acc += tl.dot(xn, uk.to(tl.float32), input_precision="ieee")
            else:
                acc += tl.dot(xn.to(uk.dtype), uk)
        z = tl.where(cmask[None, :], acc, float("-inf"))
        m_new = tl.maximum(m, tl.max(z, axis=1))
        s = s * tl.exp(m - m_new) + tl.sum(tl.exp(z - m_new[:, None]), axis=1)
        m = m_new
        t += tl.sum(tl.where(cols[None, :] == tgt[:, None], acc, 0.0), axis=1)
    out = rows * SPLITS + split
    tl.store(m_ptr + out, m, mask=rmask)
    tl.store(s_ptr + out, s, mask=rmask)
    tl.store(t_ptr + out, t, mask=rmask)


def _fp32_dot(dtype: torch.dtype) -> bool:
    # Triton 3.8's interpreter computes bf16 tl.dot wrongly (numpy has no bf16; errors ~1e10), so under the
    # interpreter bf16 operands are upcast. On a GPU, bf16/fp16 go through the tensor cores.
    return dtype == torch.float32 or (dtype == torch.bfloat16 and os.environ.get("TRITON_INTERPRET") == "1")


def _config(rows: int, v: int, device: torch.device) -> tuple[int, int, int, int]:
    """(BM, BN, BK, SPLITS): enough programs to fill the device; small tiles under the interpreter."""
    if os.environ.get("TRITON_INTERPRET") == "1":
        bm, bn, bk, programs = 16, 64, 32, 4
    else:
        bm, bn, bk = 64, 128, 64
        programs = 2 * torch.cuda.get_device_properties(device).multi_processor_count
    row_blocks = triton.cdiv(rows, bm)
    splits = max(1, min(triton.cdiv(v, bn), triton.cdiv(programs, row_blocks)))
    return bm, bn, bk, splits


def lens_logprobs(
    hidden: torch.Tensor,
    norm_weight: torch.Tensor,
    unembed: torch.Tensor,
    targets: torch.Tensor,
    eps: float = 1e-6,
    norm: str = "rms",
    norm_bias: torch.Tensor | None = None,
) -> torch.Tensor:
    check_lens_inputs(hidden, norm_weight, unembed, targets, eps, norm, norm_bias)
    n_layers, p, d = hidden.shape
    v = unembed.shape[0]
    x = hidden.reshape(-1, d).contiguous()  # (R, d)
    u = unembed.contiguous()
    rows = x.shape[0]
    tgt = targets.to(torch.int64).repeat(n_layers).to(x.device)  # (R,)
    bm, bn, bk, splits = _config(rows, v, x.device)
    v_per_split = triton.cdiv(triton.cdiv(v, splits), bn) * bn
    splits = triton.cdiv(v, v_per_split)
    m = torch.empty(rows, splits, dtype=torch.float32, device=x.device)
    s, t = torch.empty_like(m), torch.empty_like(m)
    bias = norm_bias if norm_bias is not None else norm_weight  # unused when HAS_BIAS is False
    _lens_kernel[(triton.cdiv(rows, bm), splits)](
        x, norm_weight, bias, u, tgt, m, s, t, rows, v, d, v_per_split, float(eps), splits,
        RMS=norm == "rms", HAS_BIAS=norm_bias is not None, IEEE=_fp32_dot(u.dtype), BM=bm, BN=bn, BK=bk,
    )
    big_m = m.amax(1)  # (R,)
    lse = big_m + (s * torch.exp(m - big_m[:, None])).sum(1).log()
    out = (t.sum(1) - lse).reshape(n_layers, p)
    return raise_if_lens_nonfinite(out, hidden, norm_weight, unembed, norm_bias)
