"""The exact value of a kernel op: the plain-torch reference run on float64 copies of its floating-point inputs.

A float32 sum over a wide row is not one number: torch's own float32 log-softmax entropy over 262,144 tokens moves by
2.5e-4 nats between its AVX2 and AVX-512 kernels. Fast paths are held to this value, so a test's verdict does not
depend on which CPU runs it.
"""

import torch

from bsb.kernels import reference


def _wide(x):
    return x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x


def exact(op: str, *args, **kwargs):
    """``reference.<op>`` on float64 copies of the float tensors among ``args`` / ``kwargs`` (float32 results)."""
    return getattr(reference, op)(*map(_wide, args), **{k: _wide(v) for k, v in kwargs.items()})
