"""What a dead sandbox caller left behind (:mod:`bsb.tasks.code.sandbox`): folders and cgroup leaves named by owner
(:mod:`bsb.owners`: a caller killed outright runs no cleanup, and whoever finds a name whose owner is gone removes
it)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from bsb.owners import owner_gone, owner_tag, sweep

__all__ = ["FOLDER", "owner_gone", "owner_tag", "sweep_folders"]

FOLDER = "bsb-sandbox-"


def sweep_folders(where: str | None = None) -> list[Path]:
    """Remove the ``bsb-sandbox-*`` folders of dead owners under ``where`` (the temp directory); returns them."""
    return sweep(where or tempfile.gettempdir(), FOLDER)
