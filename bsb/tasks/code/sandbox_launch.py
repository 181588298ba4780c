"""The sandbox's launcher (see :mod:`bsb.tasks.code.sandbox`), run as ``python -I -S -B sandbox_launch.py`` with its
spec in ``$BSB_SANDBOX_SPEC`` (not on the command line: ``/proc/1/cmdline`` is world-readable, the environment of
PID 1 is not).

Standard library only. Inside the run's namespaces (when the sandbox has them) it is PID 1 and root. It builds the
run's root file system and enters it with ``pivot_root``, so nothing of the host's tree is visible but read-only system
directories:

* a fresh tmpfs as ``/`` with ``/usr`` (and the merged-usr links ``/bin``, ``/lib``, ``/lib64``, ``/sbin``), the
  interpreter's own prefix where it lives elsewhere, and ``/etc/ld.so.cache`` bound read-only, ``nosuid,nodev``;
* ``/dev`` with ``null``, ``zero``, ``random`` and ``urandom`` only; a fresh ``/proc`` of the PID namespace; no
  ``/sys``, ``/run``, ``/var``, ``/home`` or ``/etc``: no host sockets, locks, data files or layout to find;
* ``/tmp/work``, the run's directory, a tmpfs of ``disk_mb`` and ``files`` inodes (``nosuid,nodev``) holding a copy
  of the program: the run's disk quota, gone with the run.

Then it forks; the child joins a fresh session keyring, sets the rlimits, drops to the sandbox uid (no groups,
``no_new_privs``), installs the seccomp filter (:mod:`bsb.tasks.code.sandbox_seccomp`, handed over in the spec),
enters ``/tmp/work`` and executes the program. The launcher reaps every process of the run and exits with the
program's code, or 128 + the signal that ended it; when it exits, the kernel kills whatever is left in the PID
namespace. Its own failures exit 125 with a "bsb-sandbox:" line.

Nothing of a run outlives its caller. The run's first process is a *leash*: it asks the kernel for SIGKILL when the
caller dies (``PR_SET_PDEATHSIG``), gives up if the caller is already gone, joins the run's cgroup leaf and executes
``CMD`` (``unshare ... python -c SOURCE``, or the launcher itself without namespaces), which keeps that signal. The
caller builds it from util-linux's ``setpriv --pdeathsig`` and a shell where ``setpriv`` exists, else starts this
file as one (``python -c SOURCE leash CMD...``, :func:`leash`). ``unshare --kill-child`` passes the same signal on to
the launcher, the launcher to the program, and the PID namespace takes the rest.
"""

import ctypes
import json
import os
import resource
import signal
import sys

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT = 1, 2, 4, 8, 32
MS_BIND, MS_REC, MS_PRIVATE = 1 << 12, 1 << 14, 1 << 18
MNT_DETACH = 2
VISIBLE = "/tmp/work"  # the run's directory, as the program sees it
PR_SET_NO_NEW_PRIVS = 38
PR_SET_PDEATHSIG = 1
PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 22, 2
SYS_KEYCTL = {"x86_64": 250, "aarch64": 219}
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}
KEYCTL_JOIN_SESSION_KEYRING = 1
SYSTEM = ("/usr", "/bin", "/lib", "/lib64", "/sbin")  # read-only in the run's root (links where they are links)
DEVICES = ("null", "zero", "random", "urandom")


def fail(msg: str) -> None:
    sys.stderr.write(f"bsb-sandbox: {msg}\n")
    sys.stderr.flush()
    os._exit(125)


def _mount(libc, source, target, fstype=None, flags=0, data=None):
    enc = lambda x: None if x is None else x.encode()  # noqa: E731
    if libc.mount(enc(source), enc(target), enc(fstype), flags, enc(data)) != 0:
        fail(f"mounting {target} failed (errno {ctypes.get_errno()})")


def _bind_ro(libc, source: str, target: str) -> None:
    _mount(libc, source, target, None, MS_BIND | MS_REC)
    _mount(libc, None, target, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)


class SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def die_with_parent(libc, parent: int) -> None:
    """SIGKILL this process when ``parent`` dies; end now if it already has (the signal would never come)."""
    if libc.prctl(PR_SET_PDEATHSIG, ctypes.c_ulong(signal.SIGKILL), ctypes.c_ulong(0), ctypes.c_ulong(0), 0) != 0:
        fail(f"PR_SET_PDEATHSIG failed (errno {ctypes.get_errno()})")
    if os.getppid() != parent:
        os._exit(125)


def install_filter(libc, program: bytes) -> None:
    """The seccomp filter (``struct sock_filter`` records) on this process and what it executes."""
    buf = ctypes.create_string_buffer(program, len(program))
    fprog = SockFprog(len(program) // 8, ctypes.addressof(buf))
    if libc.prctl(PR_SET_SECCOMP, ctypes.c_ulong(SECCOMP_MODE_FILTER), ctypes.byref(fprog), ctypes.c_ulong(0), 0) != 0:
        fail(f"installing the seccomp filter failed (errno {ctypes.get_errno()})")


def leash(libc, spec: dict, cmd: list[str]) -> None:
    """The run's first process (see the module docstring): dies with the caller, joins the cgroup leaf, runs ``cmd``."""
    die_with_parent(libc, spec["caller"])
    for procs in spec["cgroup_procs"]:
        with open(procs, "w") as f:
            f.write(str(os.getpid()))
    os.execvp(cmd[0], cmd)


def build_root(libc, spec: dict, program: bytes) -> None:
    """The run's root file system (see the module docstring), then ``pivot_root`` into it."""
    _mount(libc, "none", "/", None, MS_REC | MS_PRIVATE)
    new = "/tmp/bsb-root"
    _mount(libc, "tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "size=64k,mode=0755")  # a place to build it
    os.mkdir(new)
    _mount(libc, "tmpfs", new, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0755")
    for path in SYSTEM:
        if os.path.islink(path):
            os.symlink(os.readlink(path), new + path)
        elif os.path.isdir(path):
            os.mkdir(new + path)
            _bind_ro(libc, path, new + path)
    prefix = spec.get("prefix")
    if prefix and not any(prefix == p or prefix.startswith(p + "/") for p in SYSTEM):
        os.makedirs(new + prefix)
        _bind_ro(libc, prefix, new + prefix)
    os.mkdir(new + "/etc")
    if os.path.isfile("/etc/ld.so.cache"):
        open(new + "/etc/ld.so.cache", "w").close()
        _bind_ro(libc, "/etc/ld.so.cache", new + "/etc/ld.so.cache")
    os.mkdir(new + "/dev")
    for name in DEVICES:
        open(f"{new}/dev/{name}", "w").close()
        _mount(libc, f"/dev/{name}", f"{new}/dev/{name}", None, MS_BIND)
    os.mkdir(new + "/proc")
    os.makedirs(new + VISIBLE)
    _mount(
        libc,
        "tmpfs",
        new + VISIBLE,
        "tmpfs",
        MS_NOSUID | MS_NODEV,
        f"size={spec['disk_mb']}m,nr_inodes={spec['files']},mode=0700",
    )
    with open(new + VISIBLE + "/prog.py", "wb") as f:
        f.write(program)
    if spec["uid"] is not None:
        os.chown(new + VISIBLE, spec["uid"], spec["uid"])
        os.chown(new + VISIBLE + "/prog.py", spec["uid"], spec["uid"])
    _mount(libc, None, new, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)  # the root itself: read-only
    os.chdir(new)
    number = SYS_PIVOT_ROOT.get(os.uname().machine)
    if number is None or libc.syscall(number, b".", b".") != 0:  # the old root is stacked beneath, then detached
        fail(f"pivot_root failed (errno {ctypes.get_errno()})")
    if libc.umount2(b".", MNT_DETACH) != 0:
        fail(f"detaching the host's root failed (errno {ctypes.get_errno()})")
    os.chdir("/")
    _mount(libc, "proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)


def main() -> None:
    spec = json.loads(os.environ["BSB_SANDBOX_SPEC"])
    libc = ctypes.CDLL(None, use_errno=True)
    if sys.argv[1:2] == ["leash"]:
        try:
            leash(libc, spec, sys.argv[2:])
        except OSError as err:
            fail(f"starting the run failed: {err}")
    # the leash's signal, again: under unshare this process is its child, not the leash itself
    if libc.prctl(PR_SET_PDEATHSIG, ctypes.c_ulong(signal.SIGKILL), ctypes.c_ulong(0), ctypes.c_ulong(0), 0) != 0:
        fail(f"PR_SET_PDEATHSIG failed (errno {ctypes.get_errno()})")
    launcher = os.getpid()
    if spec["isolate"]:
        with open(os.path.join(spec["workdir"], "prog.py"), "rb") as f:
            program = f.read()
        build_root(libc, spec, program)
        work = os.open(VISIBLE, os.O_RDONLY | os.O_DIRECTORY)
    else:
        work = os.open(spec["workdir"], os.O_RDONLY | os.O_DIRECTORY)
    child = os.fork()
    if child == 0:
        try:
            os.fchdir(work)
            os.close(work)
            keyctl = SYS_KEYCTL.get(os.uname().machine)
            if keyctl is not None and libc.syscall(keyctl, KEYCTL_JOIN_SESSION_KEYRING, None) < 0:
                fail(f"joining a fresh session keyring failed (errno {ctypes.get_errno()})")
            mb = 1 << 20
            resource.setrlimit(resource.RLIMIT_CPU, (spec["cpu_s"], spec["cpu_s"] + 1))
            resource.setrlimit(resource.RLIMIT_AS, (spec["memory_mb"] * mb, spec["memory_mb"] * mb))
            resource.setrlimit(resource.RLIMIT_FSIZE, (spec["fsize_mb"] * mb, spec["fsize_mb"] * mb))
            resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
            resource.setrlimit(resource.RLIMIT_NPROC, (spec["nproc"], spec["nproc"]))
            if spec["uid"] is not None:
                os.setgroups([])
                os.setgid(spec["uid"])
                os.setuid(spec["uid"])
            die_with_parent(libc, launcher)  # after the uid drop, which clears it
            if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
                fail("no_new_privs failed")
            if spec["seccomp"]:
                install_filter(libc, bytes.fromhex(spec["seccomp"]))
            env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": "/nonexistent", "PYTHONHASHSEED": "0"}
            os.execve(spec["python"], [spec["python"], "-I", "-S", "-B", "prog.py"], env)
        except BaseException as err:  # noqa: BLE001 - anything here is the launcher's failure, reported as such
            fail(f"starting the program failed: {type(err).__name__}: {err}")
    os.close(work)
    while True:  # reap every process of the run (as PID 1, orphans come here too) until the program has ended
        try:
            pid, status = os.wait()
        except ChildProcessError:
            fail("the program vanished")
        if pid == child:
            break
    if os.WIFSIGNALED(status):
        os._exit(128 + os.WTERMSIG(status))
    os._exit(os.WEXITSTATUS(status))


if __name__ == "__main__":
    main()
