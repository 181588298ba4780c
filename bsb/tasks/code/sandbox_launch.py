"""The sandbox's launcher (see :mod:`bsb.tasks.code.sandbox`), run as ``python -I -S -B sandbox_launch.py SPEC``.

Standard library only. Inside the run's namespaces (when the sandbox has them) it is PID 1 and root: it covers the
``hide`` paths with empty tmpfs, forks, and in the child sets the rlimits, drops to the sandbox uid (no groups,
``no_new_privs``), enters the run's directory and executes the program. It reaps
every process of the run and exits with the program's code, or 128 + the signal that ended it; when it exits, the
kernel kills whatever is left in the PID namespace. Its own failures exit 125 with a "bsb-sandbox:" line.
"""

import ctypes
import json
import os
import resource
import sys

MS_NOSUID, MS_NODEV, MS_BIND, MS_REC, MS_PRIVATE = 2, 4, 1 << 12, 1 << 14, 1 << 18
VISIBLE = "/tmp/work"  # where the run's directory appears once /tmp is covered
PR_SET_NO_NEW_PRIVS = 38


def fail(msg: str) -> None:
    sys.stderr.write(f"bsb-sandbox: {msg}\n")
    sys.stderr.flush()
    os._exit(125)


def main() -> None:
    spec = json.loads(sys.argv[1])
    libc = ctypes.CDLL(None, use_errno=True)
    work = os.open(spec["workdir"], os.O_RDONLY | os.O_DIRECTORY)
    if spec["hide"]:
        if libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None) != 0:
            fail(f"making mounts private failed (errno {ctypes.get_errno()})")
        for path in spec["hide"]:
            if libc.mount(b"tmpfs", path.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, b"size=64k,mode=0755") != 0:
                fail(f"covering {path} failed (errno {ctypes.get_errno()})")
        # the run's own directory, bound into the covered /tmp (the interpreter opens the program by absolute path)
        os.mkdir(VISIBLE)
        if libc.mount(f"/proc/self/fd/{work}".encode(), VISIBLE.encode(), None, MS_BIND, None) != 0:
            fail(f"binding the run's directory failed (errno {ctypes.get_errno()})")
        os.close(work)
        work = os.open(VISIBLE, os.O_RDONLY | os.O_DIRECTORY)
    child = os.fork()
    if child == 0:
        try:
            os.fchdir(work)
            os.close(work)
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
            if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
                fail("no_new_privs failed")
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
