"""Probe-JS ops on the CPU through the C++ extension ``bsb._C`` (csrc/probe.cpp).

One pass over each logit row computes the online logsumexp and the top-k together (no (N, V) log-softmax, no
sort); NaN / +inf / fully masked rows are detected in that same pass and raise the reference's errors.
``k`` above the extension's limit (64) is served by the reference. Importing this module raises ImportError
when the extension is not built; :mod:`bsb.kernels.dispatch` then falls back to the reference.
"""

from __future__ import annotations

import torch

from bsb import _C
from bsb.kernels import reference as ref
from bsb.kernels.checks import check_chain_index, check_float, check_k, check_topk_pair, raise_for_row_stats

MAX_K: int = _C.max_k
_DTYPE_CODE = {torch.float32: 0, torch.bfloat16: 1, torch.float16: 2}


def _as_native(logits: torch.Tensor) -> tuple[torch.Tensor, int]:
    x = logits if logits.dtype in _DTYPE_CODE else logits.float()
    return x.contiguous(), _DTYPE_CODE[x.dtype]


def topk_logprobs(logits: torch.Tensor, k: int = 20) -> tuple[torch.Tensor, torch.Tensor]:
    """Fused top-k log-probs; same contract as :func:`bsb.kernels.reference.topk_logprobs`."""
    check_float("logits", logits, scan=False)
    v = logits.shape[-1]
    check_k(k, v)
    if k > MAX_K:
        return ref.topk_logprobs(logits, k)
    x, code = _as_native(logits)
    rows = x.numel() // v
    lp = torch.empty(rows, k, dtype=torch.float32)
    idx = torch.empty(rows, k, dtype=torch.int64)
    rmax = torch.empty(rows, dtype=torch.float32)
    rnan = torch.empty(rows, dtype=torch.uint8)
    _C.topk_logprobs(x.data_ptr(), code, rows, v, k, lp.data_ptr(), idx.data_ptr(), rmax.data_ptr(), rnan.data_ptr())
    raise_for_row_stats("logits", rmax, rnan.bool())
    lead = logits.shape[:-1]
    return lp.reshape(*lead, k), idx.reshape(*lead, k)


def floored_js(logp_a: torch.Tensor, idx_a: torch.Tensor, logp_b: torch.Tensor, idx_b: torch.Tensor) -> torch.Tensor:
    """Floored JS (Eq. 1-2); same contract as :func:`bsb.kernels.reference.floored_js`."""
    check_topk_pair(logp_a, idx_a, logp_b, idx_b)
    ka, kb = logp_a.shape[-1], logp_b.shape[-1]
    if max(ka, kb) > MAX_K:
        return ref.floored_js(logp_a, idx_a, logp_b, idx_b)
    la = logp_a.float().contiguous()
    lb = logp_b.float().contiguous()
    ia = idx_a.to(torch.int64).contiguous()
    ib = idx_b.to(torch.int64).contiguous()
    rows = la.numel() // ka
    out = torch.empty(logp_a.shape[:-1], dtype=torch.float32)
    _C.floored_js(la.data_ptr(), ia.data_ptr(), ka, lb.data_ptr(), ib.data_ptr(), kb, rows, out.data_ptr())
    return out


def probe_js(logits: torch.Tensor, chain_index: torch.Tensor, k: int = 20) -> torch.Tensor:
    """Fused Probe-JS scores; same contract as :func:`bsb.kernels.reference.probe_js`."""
    check_float("logits", logits, 2, 3, scan=False)
    n, v = logits.shape[0], logits.shape[-1]
    check_k(k, v)
    ci = check_chain_index(chain_index, n)
    if k > MAX_K:
        return ref.probe_js(logits, chain_index, k)
    x, code = _as_native(logits)
    n_pos = 1 if x.ndim == 2 else x.shape[1]
    pairs = torch.zeros(n, dtype=torch.uint8)
    pairs[:-1] = (ci[1:] == ci[:-1]).to(torch.uint8)
    out = torch.empty(n, dtype=torch.float32)
    rmax = torch.empty(n * n_pos, dtype=torch.float32)
    rnan = torch.empty(n * n_pos, dtype=torch.uint8)
    _C.probe_js(x.data_ptr(), code, n, n_pos, v, k, pairs.data_ptr(), out.data_ptr(), rmax.data_ptr(), rnan.data_ptr())
    raise_for_row_stats("logits", rmax, rnan.bool())
    return out
