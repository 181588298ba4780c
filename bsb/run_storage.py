"""A run folder's files, read and written without torch or the training config (``bsb report``, ``export``,
``sweep`` and ``cost`` read them too): every file or folder replaced is written beside its place and swapped in
(:func:`swap_in`, :func:`write_whole`), so it is whole or absent after any crash; what a crash inside a save left is
put back or removed when the folder opens (:func:`recover_checkpoint`, :func:`drop_leftovers`); a checkpoint's files
carry CRC-32 checksums (:func:`file_checksums`, :func:`verify_checksums`); the metrics rows (:func:`metric_rows`);
the kept weights (:func:`weight_steps`, :func:`best_weights`, :func:`weights_folder`); an append-only log's torn last
line (:func:`appended_lines`). The trainer's side, which writes them, is :class:`bsb.train.run_folder.RunFolder`."""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import zlib
from pathlib import Path

from bsb.safe_io import number, step_number

log = logging.getLogger(__name__)


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
    """On resume from ``step``: the kept weights of later steps belong to the run that is discarded (a ``best``
    interrupted mid-swap was put back by :func:`drop_leftovers`)."""
    run = Path(run)
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
        step, accuracy = best["step"], best["val_accuracy"]
    except (ValueError, KeyError, TypeError) as err:
        raise ValueError(f"{note}: not a bsb best-weights note ({err!r})") from None
    return {"step": step_number(step, f"{note}: step"), "val_accuracy": number(accuracy, f"{note}: val_accuracy", 0, 1)}


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


LOW_SPACE = (
    16 << 20
)  # bytes free under which a failed write is taken for a full disk (torch.save says only "unexpected pos")


def _folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) if folder.is_dir() else 0


def swap_in(tmp: Path, dest: Path) -> None:
    """``tmp``, a file or folder written beside ``dest``, becomes ``dest``: a file by one atomic rename; a folder by
    renaming ``dest`` to ``dest.old``, then ``tmp`` to ``dest``, then removing the old one. A crash between the two
    renames leaves ``dest.old`` and no ``dest`` (:func:`recover_checkpoint`, :func:`drop_leftovers` put it back)."""
    if not tmp.is_dir():
        os.replace(tmp, dest)
        return
    old = dest.with_name(dest.name + ".old")
    if dest.exists():
        shutil.rmtree(old, ignore_errors=True)
        os.replace(dest, old)
    os.replace(tmp, dest)
    shutil.rmtree(old, ignore_errors=True)


def write_whole(path: Path, text: str) -> None:
    """``text`` as the file ``path``, written beside it and swapped in: the old file or the new one, never a part."""
    part = path.with_name(path.name + ".part")
    part.write_text(text)
    swap_in(part, path)


def appended_lines(path: Path) -> list[str]:
    """The whole lines of an append-only JSONL file (none if it does not exist). A last line cut short by a crash is
    cut off the file too, so that the next append starts on a fresh line."""
    data = path.read_bytes() if path.exists() else b""
    if data and not data.endswith(b"\n"):
        data = data[: data.rfind(b"\n") + 1]
        path.write_bytes(data)
    return data.decode().splitlines()


def recover_checkpoint(out: Path) -> str:
    """Undo a crash inside :meth:`~bsb.train.run_folder.RunFolder.save_checkpoint`, which writes ``checkpoint.tmp``
    (complete once its ``state.json`` exists: written last, swapped into place), then swaps it in (:func:`swap_in`).
    Between the renames there is no ``checkpoint/``: the newest complete one is put back. Returns what it did ("" when
    there was nothing to recover)."""
    ckpt, tmp, old = out / "checkpoint", out / "checkpoint.tmp", out / "checkpoint.old"
    if ckpt.exists():
        return ""
    for source in (tmp, old):  # tmp is the newer of the two
        if (source / "state.json").exists():
            os.replace(source, ckpt)
            log.warning("recovered %s from %s (a run stopped while saving)", ckpt, source.name)
            return source.name
    return ""


def _complete(folder: Path) -> bool:
    """A checkpoint (its ``state.json`` is written last) or a Hugging Face folder (``config.json``)."""
    return (folder / "state.json").exists() or (folder / "config.json").exists()


def drop_leftovers(out: Path) -> list[str]:
    """What a kill inside a save or an export (:func:`swap_in`) left in the run folder, after
    :func:`recover_checkpoint`: an ``X.old`` whose ``X`` is missing is put back when complete; every other ``X.old``,
    ``X.tmp`` and ``X.part`` (half-written, or replaced) goes. Links are removed, never followed. Returns the names."""
    gone = []
    for parent in (out, out / "weights"):
        if parent.is_symlink() or not parent.is_dir():
            continue
        for entry in list(os.scandir(parent)):
            path = Path(entry.path)
            stem, dot, kind = entry.name.rpartition(".")
            if not dot or kind not in ("old", "tmp", "part"):
                continue
            folder = entry.is_dir(follow_symlinks=False)
            if kind == "old" and folder and not (parent / stem).exists() and _complete(path):
                os.replace(path, parent / stem)
                log.warning("put back %s from %s (a run stopped while swapping it in)", parent / stem, entry.name)
                continue
            shutil.rmtree(path) if folder else path.unlink()
            gone.append(str(path.relative_to(out)))
    return gone


def metric_rows(path: Path) -> list[str]:
    """The rows of a metrics file (:func:`numbered_metric_rows` without the line numbers)."""
    return [line for _, line in numbered_metric_rows(path)]


def numbered_metric_rows(path: Path) -> list[tuple[int, str]]:
    """The rows of a metrics file with their line numbers. A torn last line (a crash while it was written: no newline,
    not JSON) is dropped with a warning; any other row that is not a JSON object with an integer step (a boolean is
    none; an integer past Python's 4,300 digits is not read) is an error naming the file and line."""
    text = path.read_text()
    lines = text.splitlines()
    rows = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        why = "not a metrics row (a JSON object with an integer step)"
        try:
            row = json.loads(line)
            step = row.get("step") if isinstance(row, dict) else None
            ok = isinstance(step, int) and not isinstance(step, bool)
        except json.JSONDecodeError:
            ok = False
        except ValueError:  # an integer past Python's 4,300 digits
            ok, why = False, "a number of more digits than Python reads (4,300)"
        if not ok:
            if n == len(lines) and not text.endswith("\n"):
                log.warning("%s: dropped a torn last row (line %d, a run stopped while writing it)", path, n)
                continue
            raise ValueError(f"{path}, line {n}: {why}: {line[:80]!r}")
        rows.append((n, line))
    return rows
