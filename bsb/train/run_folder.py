"""A run folder's integrity: one trainer process at a time, and checkpoint files that are what was written.

* :class:`RunLock`: an exclusive ``flock`` on ``out_dir/.lock`` (holding the owner's pid), taken before anything in the
  folder is read or written. A second ``bsb train`` on the same folder is one error naming the holder's pid, instead of
  two runs appending to one ``metrics.jsonl``. The lock goes with the process (the kernel drops it on exit, kill -9
  included), so a crashed run never leaves a stale lock. Within one process the lock is shared (several trainers built
  one after another on one folder, as the tests do, are one owner).
* :func:`file_checksums` / :func:`verify_checksums`: a CRC-32 of every file of a checkpoint, recorded in its
  ``state.json`` and checked before it is loaded; a flipped byte is an error naming the file, not weights silently
  trained on.
* Kept weights (``keep_last``, ``keep_best``): ``weights/step-S/`` and ``best/`` (with ``bsb_best.json``), each a
  Hugging Face folder; :func:`weight_steps`, :func:`best_weights` and :func:`weights_folder` find them.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
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


BEST_NOTE = "bsb_best.json"  # in best/: the step and held-out accuracy the weights are from


def weight_steps(run: Path) -> list[int]:
    """The steps whose weights ``run/weights/step-S`` holds (complete folders only), ascending."""
    folder = Path(run) / "weights"
    found = (re.fullmatch(r"step-(\d+)", p.name) for p in folder.iterdir()) if folder.is_dir() else ()
    return sorted(int(m.group(1)) for m in found if m and (folder / m.group(0) / "config.json").exists())


def drop_weights_after(run: Path, step: int) -> None:
    """On resume from ``step``: the kept weights of later steps belong to the run that is discarded; a ``best``
    interrupted mid-swap (only ``best.old`` left) is put back first."""
    run = Path(run)
    if not (run / "best").exists() and (run / "best.old" / BEST_NOTE).exists():
        os.replace(run / "best.old", run / "best")
    for s in weight_steps(run):
        if s > step:
            shutil.rmtree(run / "weights" / f"step-{s}", ignore_errors=True)
    best = best_weights(run)
    if best is not None and best["step"] > step:
        shutil.rmtree(run / "best", ignore_errors=True)


def best_weights(run: Path) -> dict | None:
    """``{"step", "val_accuracy"}`` of ``run/best`` (None when there is none)."""
    note = Path(run) / "best" / BEST_NOTE
    if not note.exists():
        return None
    try:
        best = json.loads(note.read_text())
        return {"step": int(best["step"]), "val_accuracy": float(best["val_accuracy"])}
    except (ValueError, KeyError, TypeError) as err:
        raise ValueError(f"{note}: not a bsb best-weights note ({err!r})") from None


def weights_folder(run: Path, step: int | None = None, best: bool = False) -> Path:
    """The Hugging Face folder of a run's weights: ``best/``, ``weights/step-S``, else ``final/``, else the latest
    checkpoint's model; an error naming what the run holds when the one asked for is not there."""
    run = Path(run)
    if best:
        if best_weights(run) is None:
            raise FileNotFoundError(f"{run} kept no best weights (train with keep_best: true)")
        return run / "best"
    if step is not None:
        if step not in weight_steps(run):
            kept = ", ".join(map(str, weight_steps(run))) or "none"
            raise FileNotFoundError(f"{run} holds no weights of step {step} (kept: {kept}; keep_last chooses)")
        return run / "weights" / f"step-{step}"
    for folder in (run / "final", run / "checkpoint" / "model"):
        if (folder / "config.json").exists():
            return folder
    raise FileNotFoundError(f"{run} holds no weights: no final/ and no non-sharded checkpoint/model")
