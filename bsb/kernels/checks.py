"""Input validation shared by every implementation of the kernel ops.

Each check raises one ``ValueError`` that names the argument and says how to fix it, so that a reference,
a Triton and a C++ implementation of an op reject exactly the same inputs with exactly the same message.
"""

from __future__ import annotations

import torch

__all__ = [
    "check_float",
    "check_logits",
    "check_k",
    "check_topk_pair",
    "check_chain_index",
    "check_tokens",
    "check_lens_inputs",
    "raise_if_lens_nonfinite",
    "raise_for_row_stats",
    "status_error",
    "raise_status",
]


def check_float(
    name: str, x: object, min_ndim: int = 1, max_ndim: int | None = None, scan: bool = True
) -> torch.Tensor:
    """Type, rank and emptiness; with ``scan`` also rejects NaN (a full read of ``x``)."""
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise ValueError(f"{name} must be a floating-point tensor, got dtype {x.dtype}")
    if x.ndim < min_ndim or (max_ndim is not None and x.ndim > max_ndim):
        want = (
            f"{min_ndim}"
            if max_ndim == min_ndim
            else f">= {min_ndim}"
            if max_ndim is None
            else f"{min_ndim}..{max_ndim}"
        )
        raise ValueError(f"{name} must have {want} dimensions, got shape {tuple(x.shape)}")
    if x.numel() == 0:
        raise ValueError(f"{name} is empty (shape {tuple(x.shape)}); pass at least one element")
    if scan and torch.isnan(x).any():
        raise ValueError(_nan_message(name))
    return x


def _nan_message(name: str) -> str:
    return f"{name} contains NaN; check the model output (masked tokens must be -inf, not NaN)"


def check_logits(name: str, logits: object, min_ndim: int = 1, max_ndim: int | None = None) -> torch.Tensor:
    """Logits: float, no NaN, no +inf, every row with at least one finite entry (-inf marks a masked token).

    This reads the whole tensor; fused kernels instead call :func:`check_float` with ``scan=False`` and report
    per-row statistics from their single pass to :func:`raise_for_row_stats`.
    """
    x = check_float(name, logits, min_ndim, max_ndim, scan=False)
    raise_for_row_stats(name, x.amax(dim=-1), torch.isnan(x).any(dim=-1))
    return x


# Row status codes shared with the fused kernels (csrc/probe.cpp returns the first that applies).
ROW_OK, ROW_NAN, ROW_POSINF, ROW_ALL_MASKED, CHAINS_NOT_CONTIGUOUS = 0, 1, 2, 3, 4


def status_error(name: str, code: int) -> ValueError:
    """The ValueError for a status code, with the same words as the reference's checks."""
    messages = {
        ROW_NAN: _nan_message(name),
        ROW_POSINF: f"{name} contains +inf; logits must be finite or -inf (masked)",
        ROW_ALL_MASKED: f"{name} has a row where every entry is -inf; at least one token must be unmasked",
        CHAINS_NOT_CONTIGUOUS: _CHAIN_ORDER_MESSAGE,
    }
    return ValueError(messages[code])


def raise_status(word: int) -> None:
    """The ValueError of a status word whose bit ``code`` is set for each error found on the device (the Triton row
    ops); the first in the reference's order is raised. Nothing for 0."""
    for code in (ROW_NAN, ROW_POSINF, ROW_ALL_MASKED, CHAINS_NOT_CONTIGUOUS):
        if word >> code & 1:
            raise status_error("chain_index" if code == CHAINS_NOT_CONTIGUOUS else "logits", code)


def raise_for_row_stats(name: str, row_max: torch.Tensor, row_has_nan: torch.Tensor) -> None:
    """The logits errors, from each row's max (NaN ignored) and NaN flag as a fused kernel computes them."""
    if row_has_nan.any() or torch.isnan(row_max).any():
        raise status_error(name, ROW_NAN)
    if torch.isposinf(row_max).any():
        raise status_error(name, ROW_POSINF)
    if torch.isneginf(row_max).any():
        raise status_error(name, ROW_ALL_MASKED)


def check_k(k: object, vocab: int, name: str = "k") -> int:
    if isinstance(k, bool) or not isinstance(k, int):
        raise ValueError(f"{name} must be an int, got {type(k).__name__}")
    if k < 1:
        raise ValueError(f"{name} must be >= 1, got {k}")
    if k > vocab:
        raise ValueError(f"{name}={k} exceeds the vocabulary size {vocab}; use {name} <= {vocab}")
    return k


def _check_topk_side(side: str, logp: object, idx: object) -> None:
    lp = check_float(f"logp_{side}", logp)
    if not isinstance(idx, torch.Tensor) or idx.is_floating_point() or idx.is_complex() or idx.dtype == torch.bool:
        raise ValueError(f"idx_{side} must be an integer tensor of token ids")
    if idx.shape != lp.shape:
        raise ValueError(
            f"idx_{side} has shape {tuple(idx.shape)} but logp_{side} has {tuple(lp.shape)}; they must match"
        )
    if torch.isposinf(lp).any() or (lp > 1e-4).any():
        raise ValueError(f"logp_{side} must hold log-probabilities (<= 0, or -inf for a token outside the support)")
    if (lp == float("-inf")).all(dim=-1).any():
        raise ValueError(f"logp_{side} has a row whose support is empty (every entry -inf)")
    if lp.shape[-1] > 1:
        # Only tokens with probability > 0 are in the support, but a repeated id is a malformed top-k row either way.
        srt = idx.sort(dim=-1).values
        if (srt[..., 1:] == srt[..., :-1]).any():
            raise ValueError(f"idx_{side} repeats a token id within a row; a top-k row must list distinct tokens")


def check_topk_pair(logp_a: object, idx_a: object, logp_b: object, idx_b: object) -> None:
    _check_topk_side("a", logp_a, idx_a)
    _check_topk_side("b", logp_b, idx_b)
    if logp_a.shape[:-1] != logp_b.shape[:-1]:  # type: ignore[union-attr]
        raise ValueError(
            "logp_a and logp_b must share their leading dimensions, got "
            f"{tuple(logp_a.shape)} and {tuple(logp_b.shape)}"  # type: ignore[union-attr]
        )


_CHAIN_ORDER_MESSAGE = (
    "chain_index: the rows of each chain must be contiguous and in chain order (a chain id reappears)"
)


def check_chain_index(chain_index: object, n: int, scan: bool = True, device_ok: bool = False) -> torch.Tensor:
    """(N,) integer chain ids as int64 on the CPU; with ``scan``, also that each chain is one contiguous run. With
    ``device_ok`` the type and shape are checked where the ids are (no copy; the caller checks contiguity there)."""
    if not isinstance(chain_index, torch.Tensor) or chain_index.is_floating_point() or chain_index.dtype == torch.bool:
        raise ValueError("chain_index must be an integer tensor with one chain id per row")
    if chain_index.shape != (n,):
        raise ValueError(f"chain_index must have shape ({n},) (one id per logits row), got {tuple(chain_index.shape)}")
    if device_ok:
        return chain_index
    ci = chain_index.to("cpu", torch.int64)
    if scan:
        starts = torch.ones(n, dtype=torch.bool)
        starts[1:] = ci[1:] != ci[:-1]
        run_ids = ci[starts]
        if run_ids.unique().numel() != run_ids.numel():
            raise ValueError(_CHAIN_ORDER_MESSAGE)
    return ci


def check_tokens(tokens: object, lead_shape: torch.Size, vocab: int, name: str = "tokens") -> torch.Tensor:
    if not isinstance(tokens, torch.Tensor) or tokens.is_floating_point() or tokens.dtype == torch.bool:
        raise ValueError(f"{name} must be an integer tensor of token ids")
    if tokens.shape != lead_shape:
        raise ValueError(
            f"{name} must have shape {tuple(lead_shape)} (the logits without their last dim), got {tuple(tokens.shape)}"
        )
    if tokens.numel() and (tokens.min() < 0 or tokens.max() >= vocab):
        raise ValueError(f"{name} holds ids outside [0, {vocab}); check the tokenizer and the vocabulary size")
    return tokens


def check_lens_inputs(hidden, norm_weight, unembed, targets, eps, norm, norm_bias) -> None:
    """The arguments of ``lens_logprobs`` (see its docstring for the shapes). Values are not scanned here: a
    V×d NaN scan would cost a full read of the unembedding and a V×d temporary on every call; instead
    :func:`raise_if_lens_nonfinite` inspects the (layers, P) result, where any NaN or inf input shows up."""
    check_float("hidden", hidden, 3, 3, scan=False)
    d = hidden.shape[-1]
    check_float("norm_weight", norm_weight, 1, 1, scan=False)
    check_float("unembed", unembed, 2, 2, scan=False)
    if norm_weight.shape != (d,):
        raise ValueError(
            f"norm_weight must have shape ({d},) to match hidden's last dim, got {tuple(norm_weight.shape)}"
        )
    if unembed.shape[1] != d:
        raise ValueError(f"unembed must have shape (V, {d}) (the lm_head weight), got {tuple(unembed.shape)}")
    if norm not in ("rms", "layer"):
        raise ValueError(f"norm must be 'rms' or 'layer', got {norm!r}")
    if norm_bias is not None:
        if norm != "layer":
            raise ValueError("norm_bias is only used with norm='layer'")
        check_float("norm_bias", norm_bias, 1, 1, scan=False)
        if norm_bias.shape != (d,):
            raise ValueError(f"norm_bias must have shape ({d},), got {tuple(norm_bias.shape)}")
    if not (isinstance(eps, (int, float)) and eps >= 0):
        raise ValueError(f"eps must be a non-negative float, got {eps!r}")
    check_tokens(targets, hidden.shape[1:2], unembed.shape[0], "targets")


def raise_if_lens_nonfinite(result: torch.Tensor, hidden, norm_weight, unembed, norm_bias=None) -> torch.Tensor:
    """Returns ``result`` if it is finite; else raises naming the input that holds NaN or inf.

    A NaN / inf anywhere in the inputs reaches the result (through the norm or the logsumexp), so checking the
    small result first keeps the happy path free of V×d scans. Finite inputs whose logits overflow give
    -inf or NaN too: that is reported as such.
    """
    if torch.isfinite(result).all():
        return result
    for name, t in (("hidden", hidden), ("norm_weight", norm_weight), ("norm_bias", norm_bias), ("unembed", unembed)):
        if t is not None and not bool(torch.isfinite(t).all()):
            raise ValueError(f"{name} contains NaN or inf; check the model's hidden states and weights")
    raise ValueError("lens_logprobs overflowed: the inputs are finite but the logits are not representable in fp32")
