"""A run folder's integrity: one trainer process at a time, and checkpoint files that are what was written.

* :class:`RunLock`: an exclusive ``flock`` on ``out_dir/.lock`` (holding the owner's pid), taken before anything in the
  folder is read or written. A second ``bsb train`` on the same folder is one error naming the holder's pid, instead of
  two runs appending to one ``metrics.jsonl``. The lock goes with the process (the kernel drops it on exit, kill -9
  included), so a crashed run never leaves a stale lock. Within one process the lock is shared (several trainers built
  one after another on one folder, as the tests do, are one owner).
* :func:`file_checksums` / :func:`verify_checksums`: a CRC-32 of every file of a checkpoint, recorded in its
  ``state.json`` and checked before it is loaded; a flipped byte is an error naming the file, not weights silently
  trained on.
"""

from __future__ import annotations

import fcntl
import os
import zlib
from pathlib import Path

_HELD: dict[str, tuple[int, int]] = {}  # folder -> (fd, holders in this process)


class RunLock:
    def __init__(self, folder: Path):
        self.key = str(Path(folder).resolve())
        self.held = False
        if self.key in _HELD:
            fd, n = _HELD[self.key]
            _HELD[self.key] = (fd, n + 1)
            self.held = True
            return
        path = Path(self.key) / ".lock"
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise ValueError(
                f"{folder} is in use by another bsb train (pid {holder}); wait for it, or use another out_dir"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        _HELD[self.key] = (fd, 1)
        self.held = True

    def release(self) -> None:
        if not self.held:
            return
        self.held = False
        fd, n = _HELD[self.key]
        if n > 1:
            _HELD[self.key] = (fd, n - 1)
            return
        del _HELD[self.key]
        os.close(fd)  # closing the descriptor releases the flock


def _crc(path: Path) -> str:
    crc = 0
    with path.open("rb") as f:
        while block := f.read(1 << 22):
            crc = zlib.crc32(block, crc)
    return f"{crc:08x}"


def checkpoint_files(root: Path) -> list[str]:
    """Every file under ``root`` except ``state.json`` (which records the others), as sorted relative paths."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and p.name != "state.json")


def file_checksums(root: Path, files: list[str]) -> dict[str, str]:
    return {name: _crc(root / name) for name in files}


def verify_checksums(root: Path, expected: dict, files: list[str] | None = None) -> None:
    """Each of ``files`` (default: all of ``expected``) exists and matches its recorded checksum; else one error naming
    the first that does not."""
    for name in expected if files is None else files:
        path = root / name
        if not path.is_file():
            raise ValueError(f"{path}: missing from the checkpoint (state.json lists it); the checkpoint is damaged")
        if _crc(path) != expected[name]:
            raise ValueError(
                f"{path}: does not match its checksum in state.json (the file is damaged); move the checkpoint away "
                "to start over, or restore it"
            )
