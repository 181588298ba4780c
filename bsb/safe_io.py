"""Reading and writing a folder that is not trusted (a run folder, perhaps copied from a cluster): only regular files
this process created are written, only regular files inside the folder are copied, and every number read from its
JSON is checked. Standard library only, so every layer may use it.

* :func:`new_file` / :func:`write_text`: a file written beside its name (created with ``O_CREAT | O_EXCL |
  O_NOFOLLOW``, so never an existing file or a link) and renamed onto it: a link at the name is replaced, never
  written through.
* :func:`copy_tree`: a folder's regular files and folders; a link or special file (FIFO, socket, device) in it, or a
  link on the way to it, is one error naming them, and nothing is copied.
* :func:`number` / :func:`step_number`: a number from JSON, checked (a boolean is none, NaN only where asked, in
  range); else one error naming where it came from.
"""

from __future__ import annotations

import contextlib
import math
import os
import secrets
import shutil
import stat
from pathlib import Path

NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
MAX_STEP = 1_000_000_000  # a run's steps are at most this (TrainConfig.steps)
LIMIT = 10**15  # the default bound of a number read: a 400-digit integer or 1e400 (inf) is out of it


@contextlib.contextmanager
def new_file(path: str | Path, mode: str = "w"):
    """An open file that becomes ``path`` when the block ends: written beside it, then renamed onto the name
    (``os.replace`` replaces a link itself, never what it points to). A failed write leaves what was there."""
    path = Path(path)
    part = path.with_name(f"{path.name}.{secrets.token_hex(4)}.part")
    fd = os.open(part, NEW, 0o666)
    try:
        with os.fdopen(fd, mode) as f:
            yield f
        os.replace(part, path)
    except BaseException:
        part.unlink(missing_ok=True)
        raise


def write_text(path: str | Path, text: str) -> None:
    with new_file(path) as f:
        f.write(text)


def copy_tree(src: Path, dst: Path, inside: Path) -> None:
    """The folder ``src`` (inside ``inside``) copied to the new folder ``dst``: regular files and folders only."""
    folders, files = regular_tree(src, inside)
    dst.mkdir()
    for rel in folders:
        (dst / rel).mkdir()
    for rel in files:
        copy_file(src / rel, dst / rel)


def regular_tree(src: Path, inside: Path) -> tuple[list[Path], list[Path]]:
    """``src``'s folders (each before what it holds) and regular files, relative to it, walked without following a
    link; one error naming every link and special file in it, or the link on the way from ``inside`` to it."""
    for part in [src, *src.parents][: len(src.relative_to(inside).parts)]:
        if part.is_symlink():
            raise ValueError(f"{part}: a link, not copied (only what is inside {inside} is)")
    folders, files, refused, todo = [], [], [], [src]
    while todo:
        with os.scandir(todo.pop()) as entries:
            for entry in entries:
                rel = Path(entry.path).relative_to(src)
                if entry.is_dir(follow_symlinks=False):
                    folders.append(rel)
                    todo.append(Path(entry.path))
                elif entry.is_file(follow_symlinks=False):
                    files.append(rel)
                else:
                    refused.append(str(rel))
    if refused:
        names = ", ".join(sorted(refused)[:10]) + (f" and {len(refused) - 10} more" if len(refused) > 10 else "")
        raise ValueError(f"{src}: holds links or special files, not copied: {names}")
    return folders, files


def copy_file(src: Path, dst: Path) -> None:
    """A regular file copied to a new file: ``src`` opened without following a link (nor blocking on a FIFO)."""
    fd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise ValueError(f"{src}: not a regular file, not copied")
        with os.fdopen(os.open(dst, NEW, 0o666), "wb") as out:
            shutil.copyfileobj(f, out, 1 << 20)


def number(value, where: str, lo: float = -LIMIT, hi: float = LIMIT, integer: bool = False, nan: bool = False):
    """``value`` if it is a number (an int with ``integer``) in ``[lo, hi]``, or NaN where ``nan`` allows it; else one
    error: ``{where} must be a number in [lo, hi], got ...``."""
    kinds = int if integer else (int, float)
    if isinstance(value, kinds) and not isinstance(value, bool):
        if nan and isinstance(value, float) and math.isnan(value):
            return value
        if lo <= value <= hi:
            return value
    kind = "an integer" if integer else "a number"
    raise ValueError(f"{where} must be {kind} in [{_text(lo)}, {_text(hi)}], got {_text(value)}")


def step_number(value, where: str) -> int:
    """A training step: an integer in [0, :data:`MAX_STEP`]."""
    return number(value, where, 0, MAX_STEP, integer=True)


def _text(value) -> str:
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return f"an integer of about {len(str(value))} digits"  # JSON holds none past Python's 4300-digit limit
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
