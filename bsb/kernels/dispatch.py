"""Which implementation serves each op, chosen once per device type (not per call).

``BSB_KERNELS`` (read at first use) forces a provider:

* ``auto`` (default): CUDA tensors → Triton; CPU tensors → the C++ extension for the row ops and the
  chunked torch lens; ``lens_readouts`` (a few hundred numbers) → the reference everywhere.
* ``reference``: the plain-torch specification everywhere.
* ``triton``: the Triton kernels, also for CPU tensors when ``TRITON_INTERPRET=1`` (how CI tests them).
* ``cpp``: the C++ / chunked CPU paths for CPU tensors (CUDA tensors use the reference).

A provider that cannot be loaded (extension not built, Triton not installed) falls back to the reference with
one warning per provider.
"""

from __future__ import annotations

import importlib
import os
import warnings
from collections.abc import Callable

from bsb.kernels import reference

CHOICES = ("auto", "reference", "triton", "cpp")
OPS = ("topk_logprobs", "floored_js", "probe_js", "lens_logprobs", "lens_readouts", "surprisal_entropy", "logit_margin")

# op -> module providing it, per provider. Ops a provider lacks are served by the reference.
PROVIDERS: dict[str, dict[str, str]] = {
    "cpp": {
        "topk_logprobs": "bsb.kernels.cpu_probe",
        "floored_js": "bsb.kernels.cpu_probe",
        "probe_js": "bsb.kernels.cpu_probe",
        "lens_logprobs": "bsb.kernels.cpu_lens",
        "surprisal_entropy": "bsb.kernels.cpu_probe",
        "logit_margin": "bsb.kernels.cpu_probe",
    },
    "triton": {
        "topk_logprobs": "bsb.kernels.triton_topk",
        "probe_js": "bsb.kernels.triton_topk",
        "lens_logprobs": "bsb.kernels.triton_lens",
        "surprisal_entropy": "bsb.kernels.triton_surprisal",
        "logit_margin": "bsb.kernels.triton_margin",
    },
}

_tables: dict[str, dict[str, tuple[str, Callable]]] = {}
_warned: set[str] = set()


def requested() -> str:
    choice = os.environ.get("BSB_KERNELS", "auto").strip().lower() or "auto"
    if choice not in CHOICES:
        raise ValueError(f"BSB_KERNELS={choice!r} is not one of {', '.join(CHOICES)}")
    return choice


def _provider_for(device_type: str, choice: str) -> str:
    if choice == "reference":
        return "reference"
    if device_type == "cuda":
        return "triton" if choice in ("auto", "triton") else "reference"
    if choice == "triton" and os.environ.get("TRITON_INTERPRET") != "1":
        _warn_once("triton-cpu", "BSB_KERNELS=triton on CPU tensors needs TRITON_INTERPRET=1; using the CPU kernels")
        return "cpp"
    return "triton" if choice == "triton" else "cpp"


def _warn_once(key: str, message: str) -> None:
    if key not in _warned:
        _warned.add(key)
        warnings.warn(message, RuntimeWarning, stacklevel=3)


def _build(device_type: str) -> dict[str, tuple[str, Callable]]:
    provider = _provider_for(device_type, requested())
    table = {op: ("reference", getattr(reference, op)) for op in OPS}
    for op, module_name in PROVIDERS.get(provider, {}).items():
        try:
            module = importlib.import_module(module_name)
        except ImportError as err:
            _warn_once(module_name, f"bsb: {module_name} is unavailable ({err}); falling back to the reference ops")
            continue
        table[op] = (provider, getattr(module, op))
    return table


def table(device_type: str) -> dict[str, tuple[str, Callable]]:
    """op -> (provider name, function) for tensors on ``device_type`` ("cpu", "cuda", ...)."""
    key = "cuda" if device_type == "cuda" else "cpu"
    if key not in _tables:
        _tables[key] = _build(key)
    return _tables[key]


def implementation(op: str, device_type: str = "cpu") -> str:
    """The provider ("reference", "cpp", "triton") that serves ``op`` on ``device_type``."""
    if op not in OPS:
        raise ValueError(f"unknown op {op!r}; ops are {', '.join(OPS)}")
    return table(device_type)[op][0]


def reset() -> None:
    """Forget the choices (tests change BSB_KERNELS between cases)."""
    _tables.clear()
