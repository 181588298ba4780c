"""Row ops on the CPU through the C++ extension ``bsb._C`` (csrc/): Probe-JS, top-k, surprisal/entropy, margin.

One pass over each logit row computes the online logsumexp and the top-k together (no (N, V) log-softmax, no
sort); NaN / +inf / fully masked rows are detected in that same pass and raise the reference's errors. The
row loops use AVX-512 or AVX2 when the CPU has them (``bsb._C.isa()``).
``k`` above the extension's limit (64) is served by the reference. Importing this module raises ImportError
when the extension is not built; :mod:`bsb.kernels.dispatch` then falls back to the reference.
"""

from __future__ import annotations

import torch

from bsb import _C
from bsb.kernels import reference as ref
from bsb.kernels.checks import (
    CHAINS_NOT_CONTIGUOUS,
    ROW_OK,
    check_chain_index,
    check_float,
    check_k,
    check_logits,
    check_tokens,
    check_topk_pair,
    status_error,
)

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
    _raise(_C.topk_logprobs(x.data_ptr(), code, rows, v, k, lp.data_ptr(), idx.data_ptr()))
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


def probe_js(logits: torch.Tensor, chain_index: torch.Tensor, k: int = 20, defer_errors: bool = False):
    """Fused Probe-JS scores; same contract as :func:`bsb.kernels.reference.probe_js` (errors are raised at once:
    with ``defer_errors`` the status is None)."""
    check_float("logits", logits, 2, 3, scan=False)
    n, v = logits.shape[0], logits.shape[-1]
    check_k(k, v)
    ci = check_chain_index(chain_index, n, scan=False)  # the kernel checks that chains are contiguous
    if k > MAX_K:
        return ref.probe_js(logits, chain_index, k, defer_errors)
    x, code = _as_native(logits)
    n_pos = 1 if x.ndim == 2 else x.shape[1]
    out = torch.empty(n, dtype=torch.float32)
    status = _C.probe_js(x.data_ptr(), code, n, n_pos, v, k, ci.contiguous().data_ptr(), out.data_ptr())
    if status == CHAINS_NOT_CONTIGUOUS:  # found before the row pass: a logits error comes first in the reference
        check_logits("logits", logits)
    _raise(status)
    return (out, None) if defer_errors else out


def _raise(status: int) -> None:
    """The error of a status code returned by the extension (its ``Status`` enum mirrors :mod:`~bsb.kernels.checks`)."""
    if status != ROW_OK:
        raise status_error("logits", status)


def surprisal_entropy(logits: torch.Tensor, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Single-pass surprisal and entropy; same contract as :func:`bsb.kernels.reference.surprisal_entropy`."""
    check_float("logits", logits, scan=False)
    v = logits.shape[-1]
    check_tokens(tokens, logits.shape[:-1], v)
    x, code = _as_native(logits)
    rows = x.numel() // v
    tok = tokens.reshape(-1).to(torch.int64).contiguous()
    sur, ent = torch.empty(rows, dtype=torch.float32), torch.empty(rows, dtype=torch.float32)
    _raise(_C.surprisal_entropy(x.data_ptr(), code, rows, v, tok.data_ptr(), sur.data_ptr(), ent.data_ptr()))
    return sur.reshape(logits.shape[:-1]), ent.reshape(logits.shape[:-1])


def logit_margin(logits: torch.Tensor) -> torch.Tensor:
    """Single-pass top-1 − top-2 logit; same contract as :func:`bsb.kernels.reference.logit_margin`."""
    check_float("logits", logits, scan=False)
    v = logits.shape[-1]
    if v < 2:
        raise ValueError(f"logits needs a vocabulary of at least 2 for a margin, got V={v}")
    x, code = _as_native(logits)
    rows = x.numel() // v
    out = torch.empty(rows, dtype=torch.float32)
    _raise(_C.logit_margin(x.data_ptr(), code, rows, v, out.data_ptr()))
    return out.reshape(logits.shape[:-1])
