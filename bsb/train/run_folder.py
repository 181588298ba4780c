"""A run folder and its integrity: :class:`RunFolder` owns everything a trainer keeps in ``out_dir``.

* :class:`RunFolder`: the lock, crash recovery, the checkpoint (save, read, verify, resume check, load), the metrics
  rows and trackers, ``config.yaml``, kept weights and the final export. Every file or folder it replaces is written
  beside its place and swapped in by :func:`swap_in`, so it is whole or absent after any crash.

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

import contextlib
import errno
import fcntl
import json
import logging
import os
import random
import shutil
import weakref
from pathlib import Path

import torch

from bsb.run_storage import (
    BEST_NOTE,
    LOW_SPACE,
    _folder_bytes,
    best_weights,
    checkpoint_files,
    drop_leftovers,
    drop_weights_after,
    file_checksums,
    metric_rows,
    recover_checkpoint,
    swap_in,
    verify_checksums,
    weight_steps,
    write_whole,
)
from bsb.train.config import resume_changes
from bsb.train.sharding import DCP_DIR
from bsb.train.trackers import Trackers

log = logging.getLogger(__name__)

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


class RunFolder:
    """``out_dir`` of one training run, as every rank sees it: rank 0 holds the lock and writes the shared files; the
    checkpoint's shards are written by every rank (through the policy's :class:`~bsb.train.sharding.Placement`)."""

    def __init__(self, out: Path, world):
        self.out, self.world = Path(out), world
        self.ckpt = self.out / "checkpoint"
        self.metrics = self.out / "metrics.jsonl"
        self.lock, self.trackers = None, None
        self.redone = False  # the resume discarded metrics rows written after its checkpoint
        if world.main:
            self.out.mkdir(parents=True, exist_ok=True)
            self.lock = RunLock(self.out)  # one trainer process a folder: a second is an error naming the first's pid
            weakref.finalize(self, self.lock.release)  # a trainer that fails to build lets the folder go
            # a crash inside save_checkpoint() must not turn into a silent restart at step 0
            recover_checkpoint(self.out)
            drop_leftovers(self.out)  # and leaves no .old / .tmp / .part behind
        world.barrier()

    # ------------------------------------------------------------ resume
    def check_fresh(self, why: str) -> None:
        """Refuse a folder that holds a run (a checkpoint or metrics rows): ``why`` writes only a fresh one."""
        held = self.ckpt.exists() or (self.metrics.exists() and self.metrics.stat().st_size > 0)
        if held:
            raise ValueError(f"{why} in a fresh out_dir; {self.out} holds a run (its checkpoint or metrics)")

    def resume_state(self, cfg, resume: bool) -> tuple[dict | None, dict]:
        """The checkpoint's state to resume from (None: start at step 0) and the config changes ``resume_changes``
        allowed (recorded in the next metrics row). Checked before any model loads: the state's shape, every file
        against its checksum, the stored config against ``cfg``."""
        if not resume:
            return None, {}
        if not (self.ckpt / "state.json").exists():
            if self.ckpt.exists():  # never a silent restart over a checkpoint
                raise ValueError(
                    f"{self.ckpt}: holds no state.json (not a complete bsb checkpoint); move it away to start over, "
                    "or pass --no-resume"
                )
            return None, {}
        state = self._read_state()
        self._verify(state)
        self._check_metrics(state)
        return state, self._check_resume(state, cfg)

    @property
    def sharded(self) -> bool:
        """Whether the checkpoint holds a DCP (sharded) model, which only the policy's placement can load."""
        return (self.ckpt / DCP_DIR).exists()

    def _read_state(self) -> dict:
        """The checkpoint's ``state.json``: a mapping with the run's config and step counts in range, or one error
        naming the file."""
        where = self.ckpt / "state.json"
        try:
            state = json.loads(where.read_text())
            stored, step, active = state["config"], state["step"], state.get("active_steps", 0)
        except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError, AttributeError) as err:
            raise ValueError(
                f"{where}: not a bsb checkpoint state ({err!r}); move the checkpoint away to start over"
            ) from None
        if not isinstance(stored, dict):
            raise ValueError(f"{where}: holds no config; move the checkpoint away to start over")
        for name, value in (("step", step), ("active_steps", active)):
            if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= step:
                raise ValueError(
                    f"{where}: {name} {value!r} is not a step count in [0, step]; the checkpoint is damaged"
                )
        return state

    def _verify(self, state: dict) -> None:
        """The checkpoint's files against the checksums its ``state.json`` records (each rank a share; one error on
        every rank). The checksums are required: a state without them could hide any damage."""
        expected = state.get("checksums")
        if expected is None:
            raise ValueError(
                f"{self.ckpt / 'state.json'}: records no checksums, so its files cannot be checked; move the "
                "checkpoint away to start over"
            )
        if not isinstance(expected, dict) or not all(isinstance(v, str) for v in expected.values()):
            raise ValueError(f"{self.ckpt / 'state.json'}: its checksums are not a mapping of file: crc")
        try:
            verify_checksums(self.ckpt, expected, self.world.part(sorted(expected)))
            problem = None
        except ValueError as err:
            problem = str(err)
        problems = [p for p in self.world.gather(problem) if p]
        if problems:
            raise ValueError(problems[0])

    def _check_metrics(self, state: dict) -> None:
        """A checkpoint is saved after its step's metrics row: a step beyond the last row means the metrics file is not
        this checkpoint's (or was cut), and resuming would record a run with missing steps."""
        rows = metric_rows(self.metrics) if self.metrics.exists() else []
        last = max((json.loads(r)["step"] for r in rows), default=None)
        if state["step"] > 0 and (last is None or state["step"] > last):
            raise ValueError(
                f"{self.ckpt / 'state.json'}: step {state['step']} is beyond {self.metrics} (last row: "
                f"{'none' if last is None else f'step {last}'}); restore the run's metrics file, or move the "
                "checkpoint away to start over"
            )

    def _check_resume(self, state: dict, cfg) -> dict:
        """The stored config against ``cfg``: a change that alters the run's results is an error listing the fields,
        unless ``resume_changes`` names them (then they are returned)."""
        changed = resume_changes(state["config"], cfg)
        refused = {k: v for k, v in changed.items() if k not in cfg.resume_changes}
        if refused:
            listed = "; ".join(f"{k}: {old!r} -> {new!r}" for k, (old, new) in refused.items())
            raise ValueError(
                f"{self.out} holds a different run ({listed}): use another out_dir, --no-resume to start over, or "
                f"resume_changes=[{', '.join(refused)}] to change them on purpose"
            )
        return changed

    # ------------------------------------------------------------ checkpoint
    def save_checkpoint(self, placement, optimizer, scheduler, tokenizer, step: int, active_steps: int, cfg) -> None:
        """Atomic: written beside the old checkpoint, then swapped in. Sharded, every rank writes its shards of the
        model and optimizer into one DCP checkpoint and rank 0 the rest."""
        tmp, main = self.out / "checkpoint.tmp", self.world.main
        with self._space("the checkpoint", tmp):
            if main:
                shutil.rmtree(tmp, ignore_errors=True)
                tmp.mkdir()
            self.world.barrier()
            blob = {"scheduler": scheduler.state_dict(), "torch_rng": torch.get_rng_state()}
            blob["python_rng"] = random.getstate()
            blob.update(placement.save(optimizer, tmp, tokenizer))
            if main:
                torch.save(blob, tmp / "trainer.pt")
            self.world.barrier()  # every shard written before the checksums and rank 0's declaring it complete
            mine = file_checksums(tmp, self.world.part(checkpoint_files(tmp)))
            sums = {k: v for part in self.world.gather(mine) for k, v in part.items()}
            if main:
                # state.json last, and whole (renamed into place): a checkpoint.tmp holding it is complete
                state = {"step": step, "active_steps": active_steps, "config": cfg.to_dict()}
                state.update(world_size=self.world.size, checksums=sums)
                write_whole(tmp / "state.json", json.dumps(state, indent=1))
                swap_in(tmp, self.ckpt)
            self.world.barrier()

    def load_checkpoint(self, placement, optimizer, scheduler, state: dict) -> None:
        """Optimizer, schedule and RNG states of the checkpoint (the model was loaded with the policy, or DCP loads it
        here); the metrics rows and kept weights written after it belong to the discarded run and go."""
        blob = torch.load(self.ckpt / "trainer.pt", weights_only=True, map_location="cpu")
        placement.load(optimizer, self.ckpt, blob)  # the optimizer moves its state to the params
        scheduler.load_state_dict(blob["scheduler"])
        torch.set_rng_state(blob["torch_rng"])
        random.setstate(blob["python_rng"])
        if self.world.main:
            if self.metrics.exists():  # rows after the checkpoint: a crash between save points
                rows = metric_rows(self.metrics)
                kept = [line for line in rows if json.loads(line)["step"] <= state["step"]]
                self.redone = len(kept) < len(rows)  # steps the run logged and now trains again (the trackers mark it)
                write_whole(self.metrics, "".join(line + "\n" for line in kept))
            drop_weights_after(self.out, state["step"])

    # ------------------------------------------------------------ metrics
    def begin(self, cfg, example_prompt: str, step: int) -> None:
        """``config.yaml`` (with the first held-out prompt as the model sees it) and the trackers; at step 0 an empty
        ``metrics.jsonl``. Rank 0 only."""
        if not self.world.main:
            return
        import yaml

        example = "".join(f"#   {line}\n" for line in example_prompt.splitlines())
        write_whole(
            self.out / "config.yaml",
            yaml.safe_dump(cfg.to_dict(), sort_keys=False)
            + f"# prompt_format: {cfg.prompt_format}; the first held-out prompt as the model sees it:\n{example}",
        )
        self.trackers = Trackers(
            cfg.report_to, self.out, cfg.to_dict(), self.out.name, step if step > 0 else None, self.redone
        )
        if step == 0:
            self.metrics.write_text("")

    def record(self, row: dict) -> None:
        """One metrics row, appended to ``metrics.jsonl`` and sent to the trackers (rank 0)."""
        if not self.world.main:
            return
        with self.metrics.open("a") as f:
            f.write(json.dumps(row) + "\n")
        self.trackers.log(row)

    # ------------------------------------------------------------ weights
    def keep_weights(self, row: dict, placement, tokenizer, cfg) -> None:
        """After a validation: this step's weights as ``weights/step-S`` (the newest ``keep_last`` kept; -1: all) and,
        with ``keep_best``, as ``best/`` when its held-out accuracy beats every earlier one (``best/bsb_best.json``
        names the step). Each folder is written beside its place and swapped in, so it is whole or absent."""
        if cfg.keep_last != 0:
            self.export(placement, tokenizer, self.out / "weights" / f"step-{row['step']}")
            if self.world.main and cfg.keep_last > 0:
                for step in sorted(weight_steps(self.out), reverse=True)[cfg.keep_last :]:
                    shutil.rmtree(self.out / "weights" / f"step-{step}", ignore_errors=True)
        if cfg.keep_best:
            best = self.world.gather(best_weights(self.out) if self.world.main else None)[0]  # rank 0's record
            if best is None or row["val_accuracy"] > best["val_accuracy"]:
                note = {"step": row["step"], "val_accuracy": row["val_accuracy"]}
                self.export(placement, tokenizer, self.out / "best", note)

    def export(self, placement, tokenizer, path: Path, note: dict | None = None) -> None:
        """The policy as a Hugging Face folder at ``path`` (``note`` as its ``bsb_best.json``), whole or absent."""
        tmp = path.with_name(path.name + ".tmp")
        if self.world.main:
            shutil.rmtree(tmp, ignore_errors=True)
        with self._space(f"{path.name}/", tmp):
            placement.export(tmp, tokenizer)  # a collective when sharded: every rank takes part
            if self.world.main:
                if note is not None:
                    (tmp / BEST_NOTE).write_text(json.dumps(note))
                swap_in(tmp, path)
        self.world.barrier()

    @contextlib.contextmanager
    def _space(self, what: str, tmp: Path):
        """A write that ran out of disk space is one error naming the folder and the space it needs, never a library's
        traceback (safetensors, torch.save's zip writer); the half-written ``tmp`` goes, the previous copy stays."""
        try:
            yield
        except Exception as err:
            free = shutil.disk_usage(self.out).free
            full = (isinstance(err, OSError) and err.errno == errno.ENOSPC) or "space left" in str(err).lower()
            if not (full or free < LOW_SPACE):
                raise
            shutil.rmtree(tmp, ignore_errors=True)
            need = _folder_bytes(self.ckpt) or _folder_bytes(self.out / "final")
            wanted = f"about {need / 2**20:,.0f} MiB (the size of the last one)" if need else "more"
            raise OSError(
                errno.ENOSPC,
                f"{self.out}: no space left on the device while writing {what} ({free / 2**20:,.0f} MiB free; it needs "
                f"{wanted}); the previous copy is intact: free space and resume",
            ) from None

    def close(self) -> None:
        """The trackers closed and the folder's lock let go (idempotent)."""
        if self.trackers is not None:
            self.trackers.close()
            self.trackers = None
        if self.lock is not None:
            self.lock.release()
