"""Belief-read ops with fused fast paths.

Each function has the contract (arguments, shapes, errors, result) of its plain-torch specification in
:mod:`bsb.kernels.reference`; :mod:`bsb.kernels.dispatch` picks the implementation once per device type.
"""

from __future__ import annotations

import torch

from bsb import min_versions
from bsb.kernels import reference
from bsb.kernels.checks import raise_status
from bsb.kernels.dispatch import implementation, table

min_versions.check("torch")  # one clear error on a torch older than the APIs bsb calls, when bsb first loads it

__all__ = [
    "topk_logprobs",
    "floored_js",
    "probe_js",
    "probe_js_topk",
    "probe_js_deferred",
    "raise_status",
    "lens_logprobs",
    "lens_readouts",
    "surprisal_entropy",
    "logit_margin",
    "implementation",
    "reference",
]


def _impl(op: str, x: object):
    device_type = x.device.type if isinstance(x, torch.Tensor) else "cpu"  # bad input: let the op raise its error
    return table(device_type)[op][1]


def topk_logprobs(logits, k=20):
    return _impl("topk_logprobs", logits)(logits, k)


def floored_js(logp_a, idx_a, logp_b, idx_b):
    return _impl("floored_js", logp_a)(logp_a, idx_a, logp_b, idx_b)


def probe_js(logits, chain_index, k=20):
    return _impl("probe_js", logits)(logits, chain_index, k)


def probe_js_deferred(logits, chain_index, k=20):
    """:func:`probe_js` as ``(scores, status)`` (its ``defer_errors``): on the Triton provider the input-error status
    word stays on the device (``status`` a 0-d int tensor) so the caller's one copy of its results brings it along;
    every other provider, and Triton for k above its limit, checks at once (``status`` None). Call
    :func:`raise_status` with the copied word."""
    return _impl("probe_js", logits)(logits, chain_index, k, defer_errors=True)


def probe_js_topk(logp, idx, chain_index):
    # the floored JS through its dispatched provider
    return reference.probe_js_topk(logp, idx, chain_index, js=floored_js)


def lens_logprobs(hidden, norm_weight, unembed, targets, eps=1e-6, norm="rms", norm_bias=None):
    return _impl("lens_logprobs", hidden)(hidden, norm_weight, unembed, targets, eps, norm, norm_bias)


def lens_readouts(profiles, eps=0.1):
    return _impl("lens_readouts", profiles)(profiles, eps)


def surprisal_entropy(logits, tokens):
    return _impl("surprisal_entropy", logits)(logits, tokens)


def logit_margin(logits):
    return _impl("logit_margin", logits)(logits)


_OPS = [name for name in reference.__all__ if name != "linear_token_logprobs"]  # the dispatched ops
for _name in _OPS:
    globals()[_name].__doc__ = getattr(reference, _name).__doc__
