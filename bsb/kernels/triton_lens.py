"""Triton logit lens: log P^(l)(target) per layer and position without materialising the logits (Eq. 3).

The final norm is applied once, in fp32, to the (R, d) rows (R = layers × positions); the target's logit is an
indexed dot, ``xn · U[target]``. The kernel is then a GEMM ``xn @ Uᵀ`` with an online-logsumexp epilogue: each
program owns a block of BM rows and one of SPLITS slices of the vocabulary, streams its slice in BN-wide tiles
through ``tl.dot`` (fp32 accumulation; bf16 operands on the tensor cores, fp32 unembeddings through 3xTF32), and keeps
only ``(m, s)``; a tiny combine gives ``target − (M + log S)``. Programs are ordered in groups of GROUP row blocks
per vocabulary slice, so consecutive programs read the same slice of U from L2. The grid is sized to the device
(SPLITS fills about two waves of its SMs), and tiles, warps and stages are autotuned per (R bucket, d, V, dtype):
R (layers × cuts × answer tokens) changes nearly every call, so the tuning keys on its next power of two.

Same contract as :func:`bsb.kernels.reference.lens_logprobs`.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from bsb import min_versions
from bsb.kernels import reference as ref
from bsb.kernels.checks import check_lens_inputs, raise_if_lens_nonfinite

min_versions.check("triton")  # an old Triton is one clear error (dispatch falls back to the reference on it)

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"


def _configs(dtype: str) -> list[triton.Config]:
    """Tile configs that compile for sm_90a without spills and within its 228 KB of shared memory (bench/sm90.py):
    bf16 operands take wider tiles; fp32 (3xTF32: three dots per tile) narrower ones."""
    if INTERPRET:  # the interpreter executes tiles as numpy arrays: small tiles, one config
        return [triton.Config({"BM": 16, "BN": 64, "BK": 32, "GROUP": 2}, num_warps=4)]
    shapes = (
        ((64, 128, 64, 4, 4), (64, 256, 64, 8, 3), (128, 128, 64, 8, 3))
        if dtype == "bf16"
        else ((64, 64, 32, 4, 3), (64, 128, 32, 8, 3), (128, 64, 32, 8, 3))
    )
    return [
        triton.Config({"BM": bm, "BN": bn, "BK": bk, "GROUP": 4}, num_warps=w, num_stages=st)
        for bm, bn, bk, w, st in shapes
    ]


@triton.jit
def _lens_lse_kernel(
    x_ptr,
    u_ptr,
    m_ptr,
    s_ptr,
    R,
    V,
    D,
    SPLITS,
    PRECISION: tl.constexpr,
    UPCAST: tl.constexpr,
    BM: tl.constexpr,
    BN: tl.constexpr,
    BK: tl.constexpr,
    GROUP: tl.constexpr,
):
    pid = tl.program_id(0)
    n_rb = tl.cdiv(R, BM)
    # Grouped ordering: GROUP row blocks sweep one vocabulary slice before the next slice starts.
    per_group = GROUP * SPLITS
    first_rb = (pid // per_group) * GROUP
    group_rows = tl.minimum(n_rb - first_rb, GROUP)
    rb = first_rb + (pid % per_group) % group_rows
    split = (pid % per_group) // group_rows
    v_per_split = tl.cdiv(tl.cdiv(V, SPLITS), BN) * BN
    v_start = split * v_per_split
    v_end = tl.minimum(v_start + v_per_split, V)

    rows = rb * BM + tl.arange(0, BM)
    rmask = rows < R
    ks = tl.arange(0, BK)
    ns = tl.arange(0, BN)
    m = tl.full((BM,), float("-inf"), tl.float32)
    s = tl.zeros((BM,), tl.float32)
    for n0 in range(v_start, v_end, BN):
        cols = n0 + ns
        cmask = cols < v_end
        acc = tl.zeros((BM, BN), tl.float32)
        for k0 in range(0, D, BK):
            kmask = (k0 + ks) < D
            a = tl.load(
                x_ptr + rows[:, None].to(tl.int64) * D + (k0 + ks)[None, :],
                mask=rmask[:, None] & kmask[None, :],
                other=0.0,
            )
            b = tl.load(
                u_ptr + cols[None, :].to(tl.int64) * D + (k0 + ks)[:, None],
                mask=cmask[None, :] & kmask[:, None],
                other=0.0,
            )
            if UPCAST:  # the interpreter computes bf16 dots wrongly: fp32 operands there
                a = a.to(tl.float32)
                b = b.to(tl.float32)
            acc = tl.dot(a, b, acc, input_precision=PRECISION)
        z = tl.where(cmask[None, :], acc, float("-inf"))
        m_new = tl.maximum(m, tl.max(z, axis=1))
        s = s * tl.exp(m - m_new) + tl.sum(tl.exp(z - m_new[:, None]), axis=1)
        m = m_new
    out = rows * SPLITS + split
    tl.store(m_ptr + out, m, mask=rmask)
    tl.store(s_ptr + out, s, mask=rmask)


def rows_bucket(rows: int) -> int:
    """The row count the autotuning keys on: R's next power of two. Keyed on R itself, nearly every call (another
    cuts × answer-tokens product) would benchmark every config again."""
    return triton.next_power_of_2(max(1, rows))


# Autotuned launchers over the same kernel, one per (operand width, row bucket); each keys its tuning on the rest.
_TUNERS: dict = {}
TUNE_KEY = ["D", "V", "PRECISION"]


def _launcher(width: str, rows: int):
    key = (width, rows_bucket(rows))
    if key not in _TUNERS:
        _TUNERS[key] = triton.autotune(configs=_configs(width), key=TUNE_KEY)(_lens_lse_kernel)
    return _TUNERS[key]


def _splits(rows: int, v: int, device: torch.device) -> int:
    """Vocabulary slices: about two waves of the device's SMs over the row blocks (4 under the interpreter)."""
    programs = 4 if INTERPRET else 2 * torch.cuda.get_device_properties(device).multi_processor_count
    return max(1, min(triton.cdiv(v, 256), triton.cdiv(programs, triton.cdiv(rows, 64))))


def _precision(dtype: torch.dtype) -> str:
    # fp32 unembeddings through 3xTF32 on the tensor cores (fp32-level accuracy); bf16/fp16 natively
    return "ieee" if INTERPRET else ("tf32x3" if dtype == torch.float32 else "tf32")


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
    xn = ref.apply_final_norm(
        hidden.reshape(-1, d).float(), norm_weight.float(), eps, norm, None if norm_bias is None else norm_bias.float()
    )  # (R, d) fp32, normalised once
    u = unembed.contiguous()
    tgt = targets.to(torch.int64).repeat(n_layers).to(xn.device)  # (R,)
    target_logit = (xn * u[tgt].float()).sum(-1)  # (R,): the indexed dot
    x = xn.to(u.dtype).contiguous()  # the dot's operand in the unembedding's dtype (bf16 rounding on bf16 models)
    rows = x.shape[0]
    splits = _splits(rows, v, x.device)
    m = torch.empty(rows, splits, dtype=torch.float32, device=x.device)
    s = torch.empty_like(m)
    upcast = INTERPRET and u.dtype != torch.float32
    launch = _launcher("fp32" if u.dtype == torch.float32 else "bf16", rows)
    with torch.cuda.device_of(x):  # Triton launches (and autotunes) on the current device: make it x's
        launch[lambda meta: (triton.cdiv(rows, meta["BM"]) * splits,)](
            x, u, m, s, rows, v, d, splits, PRECISION=_precision(u.dtype), UPCAST=upcast
        )
    big_m = m.amax(1)  # (R,)
    lse = big_m + (s * torch.exp(m - big_m[:, None])).sum(1).log()
    out = (target_logit - lse).reshape(n_layers, p)
    return raise_if_lens_nonfinite(out, hidden, norm_weight, unembed, norm_bias)


def compile_variants() -> list:
    """The lens kernel at the GPU's shapes for ``bench/sm90.py``: bf16 and fp32 unembeddings, each tile config."""
    out = []
    for dt, prec in (("bf16", "tf32"), ("fp32", "tf32x3")):
        for cfg in _configs(dt):
            meta = dict(cfg.kwargs)
            out.append(
                (
                    _lens_lse_kernel,
                    {
                        "x_ptr": f"*{dt}",
                        "u_ptr": f"*{dt}",
                        "m_ptr": "*fp32",
                        "s_ptr": "*fp32",
                        "R": "i32",
                        "V": "i32",
                        "D": "i32",
                        "SPLITS": "i32",
                    },
                    {"PRECISION": prec, "UPCAST": False, **meta},
                    ["x_ptr", "u_ptr", "m_ptr", "s_ptr", "D"],
                    {"num_warps": cfg.num_warps, "num_stages": cfg.num_stages},
                    f"{dt} BM={meta['BM']} BN={meta['BN']} BK={meta['BK']} w={cfg.num_warps} st={cfg.num_stages}",
                )
            )
    return out
