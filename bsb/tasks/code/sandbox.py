"""Running untrusted model-written programs: :func:`run_program` and :class:`SandboxPool`.

The code task's reward runs a program the policy wrote against hidden tests. The program is hostile by assumption.
Each run gets these layers (:func:`layers` says which this machine allows):

============  ==============================================================================================
layer         what it stops
============  ==============================================================================================
process       a fresh throwaway working directory, an empty environment, no inherited file descriptors,
              ``python -I -S -B`` (no site-packages, no user paths); stdin carries the test input, so the
              hidden tests never touch the disk
rlimits       CPU seconds (infinite loops), address space (memory hogs), processes (fork bombs), file size,
              open files, no core dumps
supervisor    the wall-clock limit (sleeping, or blocked, programs and their children), the output limit (floods):
              the run's process group is killed and the verdict says why
user          as root: the program runs as an unprivileged uid with no supplementary groups and
              ``no_new_privs``; it cannot signal the parent, write outside its directory, or read 0700 files
namespaces    as root where ``unshare`` works: a network namespace with no interfaces up (no connections), a
              PID namespace (the parent is invisible, and every process of the run dies with it: nothing is left
              running), IPC and UTS namespaces, and a mount namespace
root          with the namespaces: the run's own root file system (``sandbox_launch.build_root``): a read-only
              tmpfs with ``/usr`` (and its links), ``/etc/ld.so.cache`` and four ``/dev`` nodes bound read-only,
              a fresh ``/proc``; no ``/sys``, ``/run``, ``/var``, ``/etc``, ``/home`` or any other host path, so no
              host socket, lock file, data file (the task's own problem files included) or layout is reachable;
              ``/tmp/work`` is a ``nosuid,nodev`` tmpfs of ``disk_mb`` and ``64 × disk_mb`` files (the run's
              disk quota: a full one ends the run as ``disk``; empty files for ever would fill its memory with inodes)
keyring       a fresh session keyring (the caller's keys are not the program's)
seccomp       a filter of system calls (:mod:`bsb.tasks.code.sandbox_seccomp`): no key can be made or read (no run
              leaves a key behind or sees another's), no new namespace (``unshare -U`` fails), no ptrace, no
              mount, no socket but ``AF_UNIX`` (no ``AF_VSOCK`` to the hypervisor host, no netlink)
cgroup        as root where a cgroup is writable (:mod:`bsb.tasks.code.sandbox_cgroup`; v2, else v1): a leaf per run
              bounds the memory (swap included) and the processes of all its processes together: a program that
              forks holds ``memory_mb`` in all, not per child
============  ==============================================================================================

Nothing of a run outlives its caller: the run's first process dies with the caller (``PR_SET_PDEATHSIG``, see
:mod:`bsb.tasks.code.sandbox_launch`) and takes the launcher and the PID namespace with it; the folder and cgroup
leaves a killed caller could not remove are swept by the next run on the machine (:mod:`bsb.tasks.code.sandbox_sweep`).

What it does not stop: CPU-time side channels; reading the world-readable files under ``/usr``; without a writable
cgroup, a memory budget across processes (``memory_mb`` then bounds each process's address space, so a run holds at
most ``memory_mb × max_processes``). Where namespaces are unavailable (not root, or a container that forbids
``unshare``): network access, the host's file tree (as the uid sees it), and processes that leave their process
group (the supervisor then kills the process group only; if the caller is killed, such a process runs on). Where
the seccomp layer is missing (not Linux x86_64 or aarch64): new user namespaces, ptrace and keys inside the run.
"""

from __future__ import annotations

import atexit
import dataclasses
import json
import os
import selectors
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from bsb.tasks.code import sandbox_cgroup, sandbox_seccomp
from bsb.tasks.code.sandbox_cgroup import RunCgroup
from bsb.tasks.code.sandbox_cgroup import available as cgroup_kind
from bsb.tasks.code.sandbox_launch import SYS_KEYCTL
from bsb.tasks.code.sandbox_sweep import FOLDER, owner_tag, sweep_folders

STATUSES = ("ok", "error", "timeout", "memory", "disk", "output_limit", "killed")
FILES_PER_MB = 64  # the run's tmpfs holds disk_mb × this many files: empty files cost inodes, not bytes
# a run in its own PID, network, mount, IPC and UTS namespaces, killed with its launcher, with its own /proc
UNSHARE = ("unshare", "--pid", "--net", "--mount", "--ipc", "--uts", "--fork", "--kill-child", "--mount-proc")
LAUNCHER = Path(__file__).with_name("sandbox_launch.py")
SANDBOX_UID = 61000  # base of the unprivileged uids (one per pool slot), used when running as root


@dataclass(frozen=True)
class SandboxResult:
    status: str  # one of STATUSES
    returncode: int | None  # the program's exit code (-signal when a signal ended it; None when killed by us)
    stdout: str
    stderr: str
    reason: str  # why, in words ("" when ok)
    wall_s: float = 0.0
    memory_peak_mb: float | None = None  # the run's processes together, at most (with a cgroup; None without)

    @property
    def ok(self) -> bool:
        return self.status == "ok"


@lru_cache(maxsize=1)
def layers() -> dict[str, bool]:
    """Which isolation layers this machine gives a run (checked once)."""
    root = getattr(os, "geteuid", lambda: -1)() == 0
    ns = False
    if root and shutil.which("unshare"):
        try:
            ns = (
                subprocess.run(
                    [
                        *UNSHARE,
                        "true",
                    ],
                    capture_output=True,
                    timeout=20,
                ).returncode
                == 0
            )
        except (OSError, subprocess.TimeoutExpired):
            ns = False
    keyring = os.uname().machine in SYS_KEYCTL
    return {
        "process": True,
        "rlimits": True,
        "supervisor": True,
        "user": root,
        "namespaces": ns,
        "root": ns,
        "keyring": keyring,
        "seccomp": sandbox_seccomp.available(),
        "cgroup": cgroup_kind() is not None,
    }


@lru_cache(maxsize=1)
def _filter_hex() -> str:
    return sandbox_seccomp.filter_program().hex() if layers()["seccomp"] else ""


@lru_cache(maxsize=1)
def sandbox_python() -> str:
    """The interpreter that runs programs: ``$BSB_SANDBOX_PYTHON``, else (as root, whose home is private) a system
    python3 the unprivileged uid can execute, else this one."""
    chosen = os.environ.get("BSB_SANDBOX_PYTHON")
    if chosen:
        return chosen
    if layers()["user"]:
        for cand in ("/usr/bin/python3", "/usr/local/bin/python3"):
            if os.path.exists(cand) and os.stat(cand).st_mode & 0o005 == 0o005:
                return cand
    return sys.executable


@lru_cache(maxsize=1)
def _launcher_source() -> str:
    return LAUNCHER.read_text()


def _prefix(python: str) -> str:
    """The installation the interpreter runs from (``/usr`` for a system python), bound read-only in the run's root."""
    real = Path(os.path.realpath(python))
    return str(real.parents[1]) if real.parent.name == "bin" else str(real.parent)


def _base_dir() -> Path:
    """A private (0700, root-owned when root) parent for the runs' directories: a run cannot reach past it. Its name
    carries this process's tag, so it is swept once this process is gone (:mod:`bsb.tasks.code.sandbox_sweep`)."""
    base = Path(tempfile.mkdtemp(prefix=f"{FOLDER}{owner_tag()}-"))
    base.chmod(0o700)
    return base


_BASE: Path | None = None
_BASE_PID = 0
_BASE_LOCK = threading.Lock()


def _base() -> Path:
    global _BASE, _BASE_PID
    with _BASE_LOCK:
        if _BASE is None or _BASE_PID != os.getpid() or not _BASE.exists():  # a forked child owns its own
            _BASE, _BASE_PID = _base_dir(), os.getpid()
            atexit.register(shutil.rmtree, _BASE, True)
        return _BASE


def sweep_stale() -> None:
    """Remove what dead callers left: their folders, and their cgroup leaves with whatever still runs in them."""
    sweep_folders()
    sandbox_cgroup.sweep()


def run_program(
    source: str,
    stdin: str = "",
    *,
    timeout_s: float,
    memory_mb: int,
    output_limit: int = 1 << 20,
    max_processes: int = 32,
    max_file_mb: int = 16,
    disk_mb: int = 64,
    slot: int = 0,
) -> SandboxResult:
    """Run the Python program ``source`` with ``stdin`` under every layer this machine allows; never raises for
    anything the program does. ``output_limit``: bytes of stdout and of stderr kept (more ends the run); ``disk_mb``:
    what the run may write in all (its directory is a tmpfs of that size, with namespaces). A source that is not
    valid Unicode is an ``error`` result; so is ``stdin`` a ValueError (the grader's input, not the program's)."""
    if timeout_s <= 0 or memory_mb < 16 or output_limit < 1 or disk_mb < 1:
        raise ValueError(
            "timeout_s must be > 0, memory_mb >= 16, output_limit >= 1 and disk_mb >= 1; "
            f"got {timeout_s}, {memory_mb}, {output_limit}, {disk_mb}"
        )
    try:
        stdin_bytes = stdin.encode("utf-8")
    except UnicodeEncodeError as err:
        raise ValueError(f"stdin is not valid Unicode text (a lone surrogate at character {err.start})") from None
    try:
        program = source.encode("utf-8")
    except UnicodeEncodeError as err:
        why = f"the program is not valid Unicode text (a lone surrogate at character {err.start})"
        return SandboxResult("error", None, "", "", why)
    avail = layers()
    sweep_stale()
    work = Path(tempfile.mkdtemp(prefix="run-", dir=_base()))
    uid = SANDBOX_UID + slot if avail["user"] else None
    try:
        (work / "prog.py").write_bytes(program)
        if uid is not None:
            os.chown(work, uid, uid)
            os.chown(work / "prog.py", uid, uid)
        work.chmod(0o700)
        spec = dict(
            workdir=str(work),
            python=sandbox_python(),
            cpu_s=int(timeout_s) + 1,
            memory_mb=int(memory_mb),
            nproc=int(max_processes),
            fsize_mb=int(max_file_mb),
            uid=uid,
            isolate=avail["namespaces"],  # the run's own read-only root (sandbox_launch.build_root)
            prefix=_prefix(sandbox_python()),
            disk_mb=int(disk_mb),
            files=int(disk_mb) * FILES_PER_MB,
            seccomp=_filter_hex(),
            caller=os.getpid(),
        )
        # the launcher's source on the command line, run by the sandbox's interpreter: /proc/1/cmdline, which the
        # program can read, names no host path
        launcher = [sandbox_python(), "-I", "-S", "-B", "-c", _launcher_source()]
        group = RunCgroup(memory_mb, max_processes)  # the budget across the run's processes, where the machine allows
        spec["cgroup_procs"] = group.procs
        cmd = _leashed([*UNSHARE, *launcher] if avail["namespaces"] else launcher, group.procs, launcher)
        try:
            result = _supervise(cmd, stdin_bytes, timeout_s, output_limit, str(work), json.dumps(spec))
            if group.out_of_memory() and result.status in ("killed", "error"):
                result = dataclasses.replace(result, status="memory", reason=f"memory limit ({memory_mb} MB a run)")
            elif result.status == "disk":
                why = f"disk limit ({disk_mb} MB, {disk_mb * FILES_PER_MB} files a run)"
                result = dataclasses.replace(result, reason=why)
            return dataclasses.replace(result, memory_peak_mb=group.peak_mb())
        finally:
            group.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)


@lru_cache(maxsize=1)
def _setpriv() -> str | None:
    """util-linux's ``setpriv``, where it has ``--pdeathsig`` (2.33 and later)."""
    setpriv = shutil.which("setpriv", path="/usr/bin:/bin")
    if setpriv is None:
        return None
    try:
        check = subprocess.run([setpriv, "--pdeathsig", "KILL", "--", "true"], capture_output=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return setpriv if check.returncode == 0 else None


def _leashed(cmd: list[str], procs: list[str], launcher: list[str]) -> list[str]:
    """``cmd`` behind the leash (:mod:`bsb.tasks.code.sandbox_launch`): SIGKILL when this process dies, nothing if it
    is already gone, the cgroup leaf joined (thread-safe, unlike a preexec hook). util-linux's ``setpriv`` and a shell
    where there is one (two execs), else the launcher's own leash (a Python start, ~15 ms more a run)."""
    setpriv = _setpriv()
    if setpriv is None:
        return [*launcher, "leash", *cmd]
    joins = "".join(f"echo $$ > {shlex.quote(p)} && " for p in procs)
    script = f'[ "$PPID" = {os.getpid()} ] || exit 125; {joins}exec "$@"'  # $PPID: read after setpriv's prctl
    return [setpriv, "--pdeathsig", "KILL", "--", "/bin/sh", "-c", script, "sh", *cmd]


def _supervise(cmd: list[str], stdin: bytes, timeout_s: float, output_limit: int, cwd: str, spec: str) -> SandboxResult:
    start = time.perf_counter()
    try:
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=cwd,
            close_fds=True,
            start_new_session=True,
            env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "BSB_SANDBOX_SPEC": spec},  # not argv: /proc/1/cmdline
        )
    except OSError as err:  # the interpreter cannot be executed: the launcher's own failure, as when it exits 125
        return SandboxResult("error", None, "", "", f"bsb-sandbox: starting {cmd[0]} failed: {err.strerror}")
    writer = threading.Thread(target=_feed, args=(proc.stdin, stdin), daemon=True)
    writer.start()
    out, err, why = bytearray(), bytearray(), None
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ, out)
    sel.register(proc.stderr, selectors.EVENT_READ, err)
    deadline = start + timeout_s + 0.5  # + the interpreter's start-up
    while sel.get_map():
        left = deadline - time.perf_counter()
        if left <= 0:
            why = ("timeout", f"wall-clock limit of {timeout_s:g} s")
            break
        for key, _ in sel.select(min(left, 0.5)):
            chunk = os.read(key.fileobj.fileno(), 65536)
            if not chunk:
                sel.unregister(key.fileobj)
                continue
            key.data.extend(chunk)
            if len(key.data) > output_limit:
                why = ("output_limit", f"more than {output_limit} bytes of output")
                break
        if why:
            break
    if why is None:
        try:
            proc.wait(max(0.1, deadline - time.perf_counter()))
        except subprocess.TimeoutExpired:
            why = ("timeout", f"wall-clock limit of {timeout_s:g} s")
    _kill(proc)
    sel.close()
    wall = time.perf_counter() - start
    stdout, stderr = (
        bytes(out[:output_limit]).decode("utf-8", "replace"),
        bytes(err[:output_limit]).decode("utf-8", "replace"),
    )
    if why is not None:
        return SandboxResult(why[0], None, stdout, stderr, why[1], wall)
    return _verdict(proc.returncode, stdout, stderr, wall)


def _feed(pipe, data: bytes) -> None:
    try:
        pipe.write(data)
        pipe.close()
    except (BrokenPipeError, OSError, ValueError):
        pass


def _kill(proc: subprocess.Popen) -> None:
    """Kill the run's whole process group (its PID namespace dies with the launcher) and reap it."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
    for pipe in (proc.stdin, proc.stdout, proc.stderr):
        try:
            pipe.close()
        except (OSError, ValueError):
            pass


def _verdict(code: int, stdout: str, stderr: str, wall: float) -> SandboxResult:
    """The launcher exits with the program's code, or 128 + the signal that ended it."""
    if code == 0:
        return SandboxResult("ok", 0, stdout, stderr, "", wall)
    if code > 128 or code < 0:  # a signal ended the program (> 128), or the launcher itself (< 0)
        sig = code - 128 if code > 128 else -code
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = f"signal {sig}"
        if sig == signal.SIGXCPU:  # the CPU-seconds rlimit
            return SandboxResult("timeout", -sig, stdout, stderr, "CPU time limit", wall)
        return SandboxResult("killed", -sig, stdout, stderr, f"ended by {name}", wall)
    tail = stderr.strip().splitlines()[-1] if stderr.strip() else ""
    if "MemoryError" in tail or "Cannot allocate memory" in stderr:
        return SandboxResult("memory", code, stdout, stderr, "memory limit", wall)
    if "No space left on device" in tail or "Disk quota exceeded" in tail:  # the run's tmpfs: bytes or files
        return SandboxResult("disk", code, stdout, stderr, "disk limit", wall)
    return SandboxResult(
        "error", code, stdout, stderr, tail or f"exit code {code}", wall
    )  # 125: the launcher's own failure


class SandboxPool:
    """Many programs at once: ``workers`` concurrent runs, each with its own uid (as root), under a total memory
    bound (``workers × memory_mb`` never exceeds ``total_memory_mb``)."""

    def __init__(
        self, workers: int = 2, *, timeout_s: float = 6.0, memory_mb: int = 512, total_memory_mb: int = 4096, **limits
    ):
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        self.workers = max(1, min(workers, total_memory_mb // memory_mb))
        if total_memory_mb < memory_mb:
            raise ValueError(f"total_memory_mb={total_memory_mb} cannot hold one run of memory_mb={memory_mb}")
        self.kw = dict(timeout_s=timeout_s, memory_mb=memory_mb, **limits)
        check = run_program("print(6 * 7)", timeout_s=max(timeout_s, 10.0), memory_mb=memory_mb)
        if check.stdout != "42\n":  # e.g. an interpreter the sandbox uid cannot execute: every run would fail
            raise RuntimeError(
                f"the sandbox cannot run a trivial program ({check.status}: {check.reason}); interpreter "
                f"{sandbox_python()}, layers {layers()}; set BSB_SANDBOX_PYTHON to a python3 the sandbox can run"
            )
        self._slots = list(range(self.workers))
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="bsb-sandbox")

    def _run(self, source: str, stdin: str) -> SandboxResult:
        with self._lock:
            slot = self._slots.pop()
        try:
            return run_program(source, stdin, slot=slot, **self.kw)
        finally:
            with self._lock:
                self._slots.append(slot)

    def map(self, jobs) -> list[SandboxResult]:
        """Run ``(source, stdin)`` pairs; results in order."""
        return list(self._pool.map(lambda job: self._run(*job), list(jobs)))

    def close(self) -> None:
        self._pool.shutdown(wait=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
