"""A run's memory and process budget across all its processes: a cgroup leaf per run (:mod:`bsb.tasks.code.sandbox`).

``RLIMIT_AS`` bounds each process, so a program that forks holds ``memory_mb`` per child. A cgroup bounds the sum:
where the machine lets bsb write one (as root), each run gets a leaf with ``memory_mb`` of memory (swap included) and
``max_processes`` tasks, entered by the run's first process before it starts anything, and removed after the run.
cgroup v2 (``memory.max``, ``memory.swap.max``, ``pids.max``) where it is mounted writable, else v1's ``memory`` and
``pids`` controllers. :func:`available` says which; without either, the per-process limits are all there is.

A leaf is named by its owner (:mod:`bsb.tasks.code.sandbox_sweep`): a caller that died without removing its leaves
leaves them to the next run, which kills what still runs in them and removes them (:func:`sweep`).
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from functools import lru_cache
from pathlib import Path

from bsb.tasks.code.sandbox_sweep import owner_gone, owner_tag

ROOT = Path("/sys/fs/cgroup")
PARENT = "bsb-sandbox"
LEAF = "run-"


@lru_cache(maxsize=1)
def available() -> str | None:
    """``"v2"``, ``"v1"`` or None: the cgroup kind bsb can create run leaves in here."""
    if os.geteuid() != 0:
        return None
    v2 = ROOT / "cgroup.controllers"
    if v2.exists() and {"memory", "pids"} <= set(v2.read_text().split()) and _writable(ROOT):
        return "v2"
    if _writable(ROOT / "memory") and _writable(ROOT / "pids"):
        return "v1"
    return None


def _writable(path: Path) -> bool:
    probe = path / f"{PARENT}-probe-{os.getpid()}"
    try:
        probe.mkdir()
        probe.rmdir()
        return True
    except OSError:
        return False


def _parents(kind: str | None) -> list[Path]:
    if kind == "v2":
        return [ROOT / PARENT]
    if kind == "v1":
        return [ROOT / "memory" / PARENT, ROOT / "pids" / PARENT]
    return []


def _remove(leaf: Path, tries: int = 50) -> None:
    """Kill what runs in ``leaf``, then remove it (the kernel may take a moment to empty it)."""
    for _ in range(tries):
        try:
            if (leaf / "cgroup.kill").exists():
                (leaf / "cgroup.kill").write_text("1")
            else:
                for pid in (leaf / "cgroup.procs").read_text().split():
                    try:
                        os.kill(int(pid), signal.SIGKILL)
                    except (ProcessLookupError, PermissionError):
                        pass
            leaf.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.02)


def sweep() -> list[Path]:
    """Kill and remove the leaves whose owner no longer runs; returns them."""
    stale = []
    for parent in _parents(available()):
        try:
            leaves = [p for p in parent.iterdir() if p.is_dir() and owner_gone(p.name, LEAF)]
        except OSError:
            continue
        for leaf in leaves:
            _remove(leaf)
            stale.append(leaf)
    return stale


class RunCgroup:
    """The leaf of one run: the run's first process writes its pid into each of :attr:`procs` before it starts
    anything; :meth:`close` reads whether memory ran out and removes the leaf."""

    def __init__(self, memory_mb: int, max_processes: int):
        self.kind = available()
        self.dirs: list[Path] = []
        if self.kind is None:
            return
        name = f"{LEAF}{owner_tag()}-{uuid.uuid4().hex[:12]}"
        limit = str(memory_mb << 20)
        if self.kind == "v2":
            parent = ROOT / PARENT
            parent.mkdir(exist_ok=True)
            (parent / "cgroup.subtree_control").write_text("+memory +pids")
            leaf = parent / name
            leaf.mkdir()
            (leaf / "memory.max").write_text(limit)
            if (leaf / "memory.swap.max").exists():
                (leaf / "memory.swap.max").write_text("0")
            (leaf / "pids.max").write_text(str(max_processes + 2))  # + the launcher and unshare
            self.dirs = [leaf]
        else:
            mem = ROOT / "memory" / PARENT / name
            pids = ROOT / "pids" / PARENT / name
            mem.mkdir(parents=True)
            pids.mkdir(parents=True)
            (mem / "memory.limit_in_bytes").write_text(limit)
            swap = mem / "memory.memsw.limit_in_bytes"
            if swap.exists():
                try:
                    swap.write_text(limit)
                except OSError:
                    pass
            (pids / "pids.max").write_text(str(max_processes + 2))
            self.dirs = [mem, pids]

    @property
    def procs(self) -> list[str]:
        """The files the run's first process joins the leaf through (thread-safe, unlike a preexec hook)."""
        return [str(d / "cgroup.procs") for d in self.dirs]

    def out_of_memory(self) -> bool:
        """Whether the run hit its memory budget (the kernel then kills a process of it)."""
        for d in self.dirs:
            try:
                if self.kind == "v2" and (d / "memory.events").exists():
                    events = dict(line.split() for line in (d / "memory.events").read_text().splitlines())
                    return int(events.get("oom_kill", 0)) > 0 or int(events.get("max", 0)) > 0
                if (d / "memory.failcnt").exists():  # v1: an OOM kill leaves failcnt at 0; oom_control counts it
                    oom = dict(line.split() for line in (d / "memory.oom_control").read_text().splitlines())
                    return int((d / "memory.failcnt").read_text()) > 0 or int(oom.get("oom_kill", 0)) > 0
            except (OSError, ValueError):
                return False
        return False

    def peak_mb(self) -> float | None:
        """The most memory the run's processes held together (None without a cgroup)."""
        for d in self.dirs:
            for name in ("memory.peak", "memory.max_usage_in_bytes"):
                if (d / name).exists():
                    try:
                        return int((d / name).read_text()) / 2**20
                    except (OSError, ValueError):
                        return None
        return None

    def close(self) -> None:
        for d in self.dirs:
            _remove(d)
