"""The sandbox against hostile programs: each ends with a failing status and a reason, the caller goes on, and no
process of the run is left behind. Where this machine does not give a layer (not root, no unshare), the tests
that need it say so and skip."""

import contextlib
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from bsb.tasks.code.sandbox import SANDBOX_UID, STATUSES, SandboxPool, layers, run_program

LIMITS = dict(timeout_s=2.0, memory_mb=256)
needs_ns = pytest.mark.skipif(not layers()["namespaces"], reason="no network/PID/mount namespaces here (needs root and unshare)")
needs_user = pytest.mark.skipif(not layers()["user"], reason="not root: programs run as this user (no uid drop)")


def _sandbox_processes() -> list[int]:
    """PIDs of processes running as a sandbox uid, or whose command line names a run's program."""
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/status") as f:
                uid = int(next(line for line in f if line.startswith("Uid:")).split()[1])
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read()
        except (OSError, StopIteration):
            continue
        if SANDBOX_UID <= uid < SANDBOX_UID + 64 or b"prog.py" in cmd:
            out.append(int(pid))
    return out


@pytest.fixture(autouse=True)
def nothing_left_running():
    yield
    deadline = time.time() + 5
    while _sandbox_processes() and time.time() < deadline:
        time.sleep(0.1)
    assert _sandbox_processes() == []


def test_a_good_program_reads_stdin_and_prints():
    r = run_program("import sys\nprint(sum(map(int, sys.stdin.read().split())))", "3 4 5", **LIMITS)
    assert (r.status, r.returncode, r.stdout, r.reason) == ("ok", 0, "12\n", "")


def test_a_crash_is_an_error_with_the_exception():
    r = run_program("raise ValueError('boom')", **LIMITS)
    assert r.status == "error" and r.returncode == 1 and "ValueError: boom" in r.reason


def test_an_infinite_loop_is_a_timeout():
    start = time.time()
    r = run_program("while True:\n    pass", timeout_s=1.0, memory_mb=256)
    assert r.status == "timeout" and ("wall-clock" in r.reason or "CPU" in r.reason)
    assert time.time() - start < 10


def test_a_fork_bomb_is_contained():
    r = run_program("import os\nwhile True:\n    os.fork()", **LIMITS)
    assert r.status in ("error", "timeout") and r.reason
    assert r.status != "ok"


def test_a_memory_hog_hits_the_memory_limit():
    r = run_program("x = bytearray(2 * 1024 ** 3)\nprint(len(x))", **LIMITS)
    assert r.status == "memory" and r.reason == "memory limit" and r.stdout == ""


def test_a_flood_of_output_is_cut():
    r = run_program("while True:\n    print('x' * 1000)", timeout_s=5.0, memory_mb=256, output_limit=100_000)
    assert r.status == "output_limit" and "100000 bytes" in r.reason and len(r.stdout) <= 100_000


@needs_user
def test_writing_outside_the_working_directory_fails(tmp_path):
    target = tmp_path / "escaped.txt"
    prog = (f"import os\nfor p in ['../escaped', '/tmp/escaped', {str(target)!r}, os.path.expanduser('~/escaped')]:\n"
            "    try:\n        open(p, 'w').write('x')\n        print('WROTE', p)\n    except OSError as e:\n        print('denied', p, type(e).__name__)\n"
            "open('/etc/bsb-escaped', 'w').write('x')")
    r = run_program(prog, **LIMITS)
    # in its own root the host's /etc is not there and / is read-only; as a plain uid, /etc is root's
    assert r.status == "error" and ("Read-only file system" if layers()["namespaces"] else "PermissionError") in r.reason
    assert "WROTE" not in r.stdout and not target.exists() and not os.path.exists("/etc/bsb-escaped")
    ok = run_program("open('mine.txt', 'w').write('x')\nprint(open('mine.txt').read())", **LIMITS)
    assert ok.status == "ok" and ok.stdout == "x\n"  # its own directory is writable


@needs_ns
def test_opening_a_network_connection_fails():
    prog = "import socket\ns = socket.create_connection(('127.0.0.1', 22), timeout=1)\nprint('CONNECTED')"
    r = run_program(prog, **LIMITS)
    assert r.status == "error" and "CONNECTED" not in r.stdout and ("unreachable" in r.reason or "refused" in r.reason)


@needs_ns
def test_the_hidden_tests_and_the_graders_files_cannot_be_read(tmp_path):
    hidden = tmp_path / "hidden_tests.json"
    hidden.write_text('{"secret": 42}')
    import bsb

    prog = (f"print(open({str(hidden)!r}).read())\n")
    r = run_program(prog, **LIMITS)
    assert r.status == "error" and "FileNotFoundError" in r.reason and "secret" not in r.stdout
    r = run_program(f"print(open({bsb.__file__!r}).read()[:50])", **LIMITS)
    assert r.status == "error" and "FileNotFoundError" in r.reason


@needs_user
def test_signalling_or_killing_the_parent_fails():
    me = os.getpid()
    r = run_program(f"import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\nos.kill({me}, signal.SIGTERM)\nprint('KILLED')", **LIMITS)
    assert r.status == "error" and ("PermissionError" in r.reason or "ProcessLookupError" in r.reason)
    assert "KILLED" not in r.stdout  # and this test process is still here to check it
    r = run_program("import os, signal\nos.kill(-1, signal.SIGKILL)", **LIMITS)
    # kill(-1) signals every process the caller may, except itself: as the sandbox uid in its PID namespace, none
    assert r.status == "error" and "ProcessLookupError" in r.reason


def test_sleeping_past_the_limit_in_a_child_is_a_timeout_and_the_child_dies():
    prog = "import os, time\nif os.fork() == 0:\n    time.sleep(60)\nelse:\n    os.wait()"
    start = time.time()
    r = run_program(prog, timeout_s=1.0, memory_mb=256)
    assert r.status == "timeout" and time.time() - start < 10


@needs_ns
def test_a_child_that_leaves_the_process_group_still_dies_with_the_run():
    prog = "import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(60)\nprint('parent done')"
    r = run_program(prog, **LIMITS)
    assert r.status == "ok" and r.stdout == "parent done\n"  # the fixture checks the detached child is gone


def test_bad_limits_are_errors():
    with pytest.raises(ValueError, match="timeout_s"):
        run_program("print(1)", timeout_s=0, memory_mb=256)
    with pytest.raises(ValueError, match="total_memory_mb"):
        SandboxPool(2, memory_mb=512, total_memory_mb=256)


def test_the_pool_runs_many_programs_under_a_memory_bound():
    with SandboxPool(4, timeout_s=2.0, memory_mb=256, total_memory_mb=512) as pool:
        assert pool.workers == 2  # 512 MB holds two runs of 256 MB
        jobs = [("import sys\nprint(int(sys.stdin.read()) ** 2)", str(i)) for i in range(6)] + [("while True: pass", "")]
        results = pool.map(jobs)
    assert [r.stdout for r in results[:6]] == [f"{i * i}\n" for i in range(6)]
    assert results[6].status == "timeout"
    assert set(r.status for r in results) <= set(STATUSES)


def test_every_status_is_documented():
    assert STATUSES == ("ok", "error", "timeout", "memory", "output_limit", "killed")
    r = run_program("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)", **LIMITS)
    assert r.status == "killed" and r.returncode == -signal.SIGKILL and "SIGKILL" in r.reason


def test_a_pool_whose_interpreter_cannot_run_is_refused_at_once(monkeypatch, tmp_path):
    from bsb.tasks.code import sandbox

    monkeypatch.setenv("BSB_SANDBOX_PYTHON", str(tmp_path / "no-python"))
    sandbox.sandbox_python.cache_clear()
    try:
        with pytest.raises(RuntimeError, match="cannot run a trivial program.*BSB_SANDBOX_PYTHON"):
            SandboxPool(1)
    finally:
        monkeypatch.delenv("BSB_SANDBOX_PYTHON")
        sandbox.sandbox_python.cache_clear()


# ------------------------------------------------------------------ the run's own root: the escapes found, closed


@needs_ns
def test_run_lock_and_var_lock_are_not_the_hosts():
    """Found: /run/lock (= /var/lock) was the host's, world-writable: files persisted and passed between runs."""
    marker = f"bsb-escape-{os.getpid()}"
    prog = (f"import os\nfor d in ['/run/lock', '/var/lock', '/run', '/var/tmp', '/dev/shm']:\n"
            f"    try:\n        open(os.path.join(d, {marker!r}), 'w').write('x')\n        print('WROTE', d)\n"
            "    except OSError as e:\n        print('denied', d, e.errno)\n")
    r = run_program(prog, **LIMITS)
    assert r.status == "ok" and "WROTE" not in r.stdout, r.stdout
    assert not any(os.path.exists(f"{d}/{marker}") for d in ("/run/lock", "/var/lock", "/run", "/var/tmp", "/dev/shm"))


@needs_ns
def test_a_host_unix_socket_is_unreachable(tmp_path):
    """Found: a filesystem UNIX socket outside the covered paths exchanged data with the program."""
    import socket
    import tempfile
    import threading

    where = Path(tempfile.mkdtemp(dir="/srv" if os.access("/srv", os.W_OK) else "/var/lib"))
    path = where / "s.sock"
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(path))
    os.chmod(where, 0o755)
    os.chmod(path, 0o777)
    listener.listen(1)
    listener.settimeout(8)
    got = []

    def accept():
        with contextlib.suppress(OSError):  # closed when the test ends
            got.append(listener.accept())

    threading.Thread(target=accept, daemon=True).start()
    try:
        prog = (f"import socket\ns = socket.socket(socket.AF_UNIX)\ntry:\n    s.connect({str(path)!r})\n"
                "    s.sendall(b'hello')\n    print('CONNECTED')\nexcept OSError as e:\n    print('refused', e.errno)\n")
        r = run_program(prog, **LIMITS)
    finally:
        listener.close()
        path.unlink(missing_ok=True)
        where.rmdir()
    assert r.status == "ok" and "CONNECTED" not in r.stdout and not got


@needs_ns
def test_the_program_has_its_own_session_keyring():
    """Found: the program shared root's session keyring (read, revoked and added root's keys)."""
    import ctypes

    prog = ("import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
            "print(libc.syscall(250, 0, -3, 0))\n")  # keyctl(KEYCTL_GET_KEYRING_ID, KEY_SPEC_SESSION_KEYRING, no create)
    if os.uname().machine != "x86_64":
        pytest.skip("the keyctl syscall number here is x86_64's")
    mine = ctypes.CDLL(None, use_errno=True).syscall(250, 0, -3, 1)
    r = run_program(prog, **LIMITS)
    assert r.status == "ok" and int(r.stdout) > 0 and int(r.stdout) != mine


@needs_ns
def test_the_tasks_data_files_are_never_visible(tmp_path):
    """Found: CodeTask never hid its own problem file: a program that found it printed the stored answer."""
    import tempfile

    where = Path(tempfile.mkdtemp(dir="/srv" if os.access("/srv", os.W_OK) else "/var/lib"))
    data = where / "problems.jsonl"
    data.write_text('{"answer": "stored-secret"}\n')
    os.chmod(where, 0o755)
    os.chmod(data, 0o644)
    try:
        prog = (f"import os\nfor p in [{str(data)!r}, '/etc/passwd', '/sys/class/net', '/home', '/work', '/root']:\n"
                "    print(p, os.path.exists(p))\n"
                f"print(open({str(data)!r}).read())\n")
        r = run_program(prog, **LIMITS)
    finally:
        data.unlink()
        where.rmdir()
    assert r.status == "error" and "FileNotFoundError" in r.reason and "stored-secret" not in r.stdout
    assert all(line.endswith("False") for line in r.stdout.splitlines()), r.stdout


@needs_ns
def test_the_run_directory_is_a_nosuid_tmpfs_of_disk_mb():
    """Found: 1 GB written into the run's folder in 3.6 s; setuid bits allowed in /tmp/work."""
    prog = ("import os\nopts = [l for l in open('/proc/self/mountinfo') if ' /tmp/work ' in l][0]\n"
            "print('nosuid' in opts.split()[5], 'nodev' in opts.split()[5])\n"
            "for i in range(8):\n    open(f'f{i}', 'wb').write(b'x' * (10 << 20))\n")
    r = run_program(prog, disk_mb=32, **LIMITS)
    assert r.stdout.splitlines()[0] == "True True"
    assert r.status == "error" and "No space left on device" in r.stderr
    assert run_program("open('f', 'wb').write(b'x' * (10 << 20))", disk_mb=32, **LIMITS).ok


@needs_ns
def test_the_host_layout_is_not_readable_from_proc():
    """Found: /proc/1/cmdline and /proc/self/mountinfo showed host paths."""
    import bsb

    repo = str(Path(bsb.__file__).resolve().parents[1])
    r = run_program("print(open('/proc/1/cmdline').read())", **LIMITS)
    assert r.ok and repo not in r.stdout and sys.executable not in r.stdout  # the launcher names no host path
    r = run_program("print('\\n'.join(l.split()[4] for l in open('/proc/self/mountinfo')))", **LIMITS)
    mounts = set(r.stdout.split())
    assert r.ok and mounts <= {"/", "/usr", "/etc/ld.so.cache", "/proc", "/tmp/work", "/dev/null", "/dev/zero",
                               "/dev/random", "/dev/urandom", str(Path(sys.executable).resolve().parents[1])}, mounts


needs_cgroup = pytest.mark.skipif(not layers()["cgroup"], reason="no writable cgroup here (needs root)")


@needs_cgroup
def test_forked_children_share_one_memory_budget():
    """Found: memory_mb bounded each process, so 12 children held 1,015 MB under memory_mb=256."""
    prog = ("import os, time\nkids = []\nfor i in range(12):\n    pid = os.fork()\n    if pid == 0:\n"
            "        b = bytearray(80 << 20)\n        for j in range(0, len(b), 4096):\n            b[j] = 1\n"
            "        time.sleep(2)\n        os._exit(0)\n    kids.append(pid)\n"
            "codes = [os.waitpid(k, 0)[1] for k in kids]\nprint(sum(c != 0 for c in codes), 'children ended by the budget')\n")
    r = run_program(prog, timeout_s=8, memory_mb=256)
    assert r.memory_peak_mb is not None and r.memory_peak_mb <= 256 * 1.02, r.memory_peak_mb
    assert int(r.stdout.split()[0]) > 0  # the kernel ended children past the run's budget
    for parent in (Path("/sys/fs/cgroup/memory/bsb-sandbox"), Path("/sys/fs/cgroup/bsb-sandbox")):
        assert not list(parent.glob("run-*")), "a run's cgroup leaf was left behind"
