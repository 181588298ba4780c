"""bsb: belief-shift branching for tree-structured RL with verifiable rewards.

Layers (nothing imports upward; docs/ARCHITECTURE.md): ``bsb.registry``, ``bsb.fields``, ``bsb.min_versions``,
``bsb.safe_io``, ``bsb.run_storage``, ``bsb.tasks`` and ``bsb.kernels`` → ``bsb.embedded`` and ``bsb.engine`` →
``bsb.train`` and ``bsb.eval`` → ``bsb.commands`` and ``bsb.integrations`` → ``bsb.cli``.

The public API, importable from ``bsb`` (each loaded on first use, so ``import bsb`` stays light)::

    from bsb import make_selector, SelectorConfig, ChainInput, HFBackend, make_task, TrainConfig, Trainer, kernels
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

_EXPORTS = {
    "make_selector": "bsb.engine.selectors",
    "SelectorConfig": "bsb.engine.selectors",
    "ChainInput": "bsb.engine.selectors",
    "SELECTORS": "bsb.engine.selectors",
    "ProbeConfig": "bsb.engine.probe",
    "HFBackend": "bsb.engine.hf_backend",
    "VLLMBackend": "bsb.engine.vllm_backend",
    "make_task": "bsb.tasks.registry",
    "TrainConfig": "bsb.train.config",
    "Trainer": "bsb.train.trainer",
}
__all__ = [*_EXPORTS, "kernels", "__version__"]


def __getattr__(name: str):
    if name == "kernels":
        return importlib.import_module("bsb.kernels")
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'bsb' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
