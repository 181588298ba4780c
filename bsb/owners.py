"""Files and folders named by the process that owns them, and the sweep of those whose owner is gone.

A process killed outright (the OOM killer, a failed rank, SIGKILL) runs no cleanup: what it was about to remove stays
(a sandbox's folders and cgroup leaves, :mod:`bsb.tasks.code.sandbox_sweep`; an engine's weight-sync folder in
``/dev/shm``, :mod:`bsb.engine.vllm_backend`). Their names carry the owner's tag: its PID namespace, its pid and the
kernel's start time of that pid. Whoever finds one whose owner is gone (the pid no longer runs, or runs as a younger
process) removes it; a pid reused by another process is not mistaken for the owner, and a name from another PID
namespace (a container sharing ``/tmp``, whose pids mean nothing here) is left alone.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path


def _start_time(pid: int) -> str:
    """The kernel's start time of ``pid`` (``/proc/PID/stat`` field 22), or "0" where there is no ``/proc``."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return "0"
    return stat.rsplit(")", 1)[1].split()[19]  # the fields after the command name, which may hold spaces or ')'


def _pid_namespace() -> str:
    try:
        return str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        return "0"


def owner_tag(pid: int | None = None) -> str:
    """``NS-PID-START`` of this process (or ``pid``, in this PID namespace)."""
    pid = os.getpid() if pid is None else pid
    return f"{_pid_namespace()}-{pid}-{_start_time(pid)}"


def owner_gone(name: str, prefix: str) -> bool:
    """Whether ``name`` (``PREFIX + NS-PID-START-...``) belongs to a process of this PID namespace that no longer
    runs; a name in another format or from another namespace is never taken for stale."""
    parts = name[len(prefix) :].split("-") if name.startswith(prefix) else []
    if len(parts) < 3 or not all(p.isdigit() for p in parts[:3]) or parts[0] != _pid_namespace():
        return False
    pid, start = int(parts[1]), parts[2]
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass  # it runs, as another user
    return start != "0" and _start_time(pid) not in (start, "0")


def sweep(where: str | Path, prefix: str) -> list[Path]:
    """Remove the folders ``PREFIX + tag + ...`` under ``where`` whose owner is gone; returns them."""
    removed = []
    try:
        entries = list(os.scandir(where))
    except OSError:
        return removed
    for entry in entries:
        if entry.name.startswith(prefix) and owner_gone(entry.name, prefix):
            shutil.rmtree(entry.path, ignore_errors=True)
            removed.append(Path(entry.path))
    return removed
