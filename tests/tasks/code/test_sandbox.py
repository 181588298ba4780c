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


def _proc(pid: int) -> tuple[int, int, bytes] | None:
    """(uid, parent pid, command line) of a process, None when it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            fields = dict(line.split(":", 1) for line in f if ":" in line)
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read()
        return int(fields["Uid"].split()[0]), int(fields["PPid"].split()[0]), cmd
    except (OSError, KeyError, ValueError):
        return None


def _is_sandboxed(info: tuple[int, int, bytes]) -> bool:
    uid, _, cmd = info
    return SANDBOX_UID <= uid < SANDBOX_UID + 64 or b"prog.py" in cmd


def _sandbox_processes() -> list[int]:
    """PIDs of sandboxed processes (a sandbox uid, or a command line that names a run's program) that this process
    left: its descendants, and orphans (nothing but sandboxed processes between them and init). Another pytest
    worker's runs, live under that worker, are not this test's (the suite runs on two workers at once)."""
    me, out = os.getpid(), []
    for pid in map(int, filter(str.isdigit, os.listdir("/proc"))):
        info = _proc(pid)
        if info is None or not _is_sandboxed(info):
            continue
        orphan, parent = True, info[1]
        while parent > 1 and parent != me:
            up = _proc(parent)
            if up is None:
                break
            orphan = orphan and _is_sandboxed(up)
            parent = up[1]
        if parent == me or orphan:
            out.append(pid)
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
    # with the seccomp layer the socket itself is refused (EPERM); the empty network namespace is the second layer
    why = ("Operation not permitted",) if layers()["seccomp"] else ("unreachable", "refused")
    assert r.status == "error" and "CONNECTED" not in r.stdout and any(w in r.reason for w in why), r.reason


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
    assert STATUSES == ("ok", "error", "timeout", "memory", "disk", "output_limit", "killed")
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
    assert r.status == "disk" and "No space left on device" in r.stderr
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
    from bsb.tasks.code.sandbox_sweep import owner_tag

    for parent in (Path("/sys/fs/cgroup/memory/bsb-sandbox"), Path("/sys/fs/cgroup/bsb-sandbox")):
        # this process's leaves (another pytest worker's runs have theirs at the same time)
        assert not list(parent.glob(f"run-{owner_tag()}-*")), "a run's cgroup leaf was left behind"


# ------------------------------------------------------------------ the second hostile round: keys, namespaces, orphans

needs_seccomp = pytest.mark.skipif(not layers()["seccomp"], reason="no seccomp filter here (needs Linux x86_64 or aarch64)")
needs_x86 = pytest.mark.skipif(os.uname().machine != "x86_64", reason="the programs' syscall numbers are x86_64's")
SYSCALLS = ("import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
            "def call(*args):\n    r = libc.syscall(*args)\n    return r, ctypes.get_errno() if r < 0 else 0\n")


@needs_seccomp
@needs_x86
def test_a_run_can_make_no_key_another_run_could_read():
    """Found: a key added to the session keyring (opened with SETPERM 0x3f3f3f3f) was listed in a concurrent run's
    /proc/keys, and one added to the user keyring outlived the run."""
    marker = f"bsb-key-{os.getpid()}"
    prog = SYSCALLS + (
        "import sys\nsecret = sys.stdin.read().encode()\n"
        f"d = b{marker!r}\n"
        "print('add_user', *call(248, b'user', d, secret, len(secret), -4))\n"  # add_key to KEY_SPEC_USER_KEYRING
        "print('add_session', *call(248, b'user', d, secret, len(secret), -3))\n"
        "print('request', *call(249, b'user', d, None, 0))\n"  # request_key
        "print('setperm', *call(250, 5, -3, 0x3f3f3f3f))\n"  # keyctl(KEYCTL_SETPERM) on the session keyring
        "print('join', *call(250, 1, None))\n"  # keyctl(KEYCTL_JOIN_SESSION_KEYRING)
        "print('keys', d.decode() in open('/proc/keys').read())\n")
    with SandboxPool(2, timeout_s=3.0, memory_mb=256, total_memory_mb=512) as pool:
        runs = pool.map([(prog, "hidden-input-1"), (prog, "hidden-input-2")])
    for r in runs:
        assert r.ok, r.reason
        got = dict(line.split(" ", 1) for line in r.stdout.splitlines())
        assert all(got[k] == "-1 1" for k in ("add_user", "add_session", "request", "setperm", "join")), got  # EPERM
        assert got["keys"] == "False"
    with open("/proc/keys") as f:
        assert marker not in f.read()  # nothing stays on the host


@needs_seccomp
def test_user_namespaces_are_refused():
    """Found: `unshare -U -r id -u` printed 0 inside the sandbox."""
    prog = ("import subprocess\nr = subprocess.run(['unshare', '-U', '-r', 'id', '-u'], capture_output=True, text=True)\n"
            "print(repr(r.stdout), r.returncode, r.stderr.strip())\n")
    r = run_program(prog, **LIMITS)
    assert r.ok and "'0\\n'" not in r.stdout and "Operation not permitted" in r.stdout, r.stdout


@needs_seccomp
@needs_x86
def test_unshare_and_clone_into_new_namespaces_are_refused():
    prog = SYSCALLS + (
        "print('unshare', *call(272, 0x10000000))\n"  # unshare(CLONE_NEWUSER)
        "r = call(56, 0x10000000 | 17, 0, 0, 0, 0)\n"  # clone(CLONE_NEWUSER | SIGCHLD): a fork into a new user namespace
        "if r[0] == 0:\n    os._exit(0)\n"
        "print('clone', *r)\n"
        "print('setns', *call(308, 0, 0))\n")
    r = run_program(prog, **LIMITS)
    assert r.ok and r.stdout.splitlines() == ["unshare -1 1", "clone -1 1", "setns -1 1"], r.stdout


@needs_seccomp
@needs_x86
def test_ptrace_is_refused():
    prog = SYSCALLS + "print('traceme', *call(101, 0, 0, 0, 0))\n"  # ptrace(PTRACE_TRACEME)
    r = run_program(prog, **LIMITS)
    assert r.ok and r.stdout == "traceme -1 1\n", r.stdout


@needs_seccomp
@needs_x86
def test_mount_is_refused_even_inside_a_new_user_namespace():
    prog = SYSCALLS + (
        "call(272, 0x10000000 | 0x20000)\n"  # unshare(CLONE_NEWUSER | CLONE_NEWNS), refused or not
        "os.mkdir('m')\n"
        "print('mount', *call(165, b'none', b'm', b'tmpfs', 0, None))\n")
    r = run_program(prog, **LIMITS)
    assert r.ok and r.stdout == "mount -1 1\n", r.stdout


def _stale_leaves(pid: int) -> list[Path]:
    roots = (Path("/sys/fs/cgroup/bsb-sandbox"), Path("/sys/fs/cgroup/memory/bsb-sandbox"), Path("/sys/fs/cgroup/pids/bsb-sandbox"))
    return [leaf for root in roots for leaf in root.glob(f"run-*-{pid}-*")]


@pytest.mark.parametrize("leash", ["setpriv", "launcher"])
def test_a_killed_caller_leaves_no_program_cgroup_or_folder(leash):
    """Found: SIGKILL the caller of run_program while its program sleeps: unshare, the launcher and the program ran on,
    and the run's cgroup leaves and /tmp/bsb-sandbox-* folder stayed. Both leashes: util-linux's setpriv, and the
    launcher's own where there is no setpriv."""
    import subprocess
    import tempfile

    no_setpriv = "sandbox._setpriv = lambda: None\n" if leash == "launcher" else ""
    caller = subprocess.Popen([sys.executable, "-c", f"from bsb.tasks.code import sandbox\n{no_setpriv}"
                               "sandbox.run_program('import time\\ntime.sleep(600)', timeout_s=8, memory_mb=256)"])

    def program_running() -> bool:
        for pid in _sandbox_processes():
            with contextlib.suppress(OSError):
                if Path(f"/proc/{pid}/cmdline").read_bytes().endswith(b"prog.py\0"):
                    return True
        return False

    deadline = time.time() + 20
    while time.time() < deadline and not program_running():
        time.sleep(0.05)
    assert program_running()
    assert caller.poll() is None
    folders = list(Path(tempfile.gettempdir()).glob(f"bsb-sandbox-*-{caller.pid}-*"))
    assert folders, "the run's folder names its owner"
    caller.kill()
    caller.wait()
    deadline = time.time() + 3
    while _sandbox_processes() and time.time() < deadline:
        time.sleep(0.05)
    assert _sandbox_processes() == [], "the launcher or the program outlived its caller"
    assert run_program("print(1)", **LIMITS).ok  # the next run sweeps what the dead caller left
    assert not any(f.exists() for f in folders)
    assert _stale_leaves(caller.pid) == []


def test_a_lone_surrogate_is_a_clear_failure_not_a_unicode_error():
    """Found: run_program raised UnicodeEncodeError for a lone surrogate in the source or the input."""
    r = run_program("print('\ud800')", **LIMITS)
    assert r.status == "error" and "not valid Unicode" in r.reason
    with pytest.raises(ValueError, match="stdin is not valid Unicode"):
        run_program("print(1)", "\udcff", **LIMITS)


@needs_seccomp
@needs_x86
def test_the_x32_numbering_is_no_way_around_the_filter():
    prog = SYSCALLS + "print(*call(0x40000000 | 248, b'user', b'k', b'v', 1, -3))\n"  # add_key by its x32 number
    r = run_program(prog, **LIMITS)
    assert r.ok and r.stdout == "-1 1\n", r.stdout  # EPERM from the filter, not the kernel's ENOSYS


def test_the_filter_is_built_for_both_architectures_and_refuses_unknown_ones():
    from bsb.tasks.code.sandbox_seccomp import RET_KILL_PROCESS, filter_program

    for machine in ("x86_64", "aarch64"):
        prog = filter_program(machine)
        assert len(prog) % 8 == 0 and int.from_bytes(prog[-4:], sys.byteorder) == RET_KILL_PROCESS
    with pytest.raises(ValueError, match="no seccomp filter for riscv64"):
        filter_program("riscv64")


@needs_cgroup
def test_a_stale_cgroup_leaf_is_killed_and_removed_by_the_next_run():
    """A leaf whose owner died with something still running in it (a program that escaped its launcher's death)."""
    import subprocess

    from bsb.tasks.code.sandbox_cgroup import PARENT, ROOT, available
    from bsb.tasks.code.sandbox_sweep import owner_tag

    owner = subprocess.Popen(["sleep", "0.2"])
    name = f"run-{owner_tag(owner.pid)}-deadbeef0000"
    owner.wait()
    leaves = [ROOT / PARENT / name] if available() == "v2" else [ROOT / c / PARENT / name for c in ("memory", "pids")]
    straggler = subprocess.Popen(["sleep", "60"])
    try:
        for leaf in leaves:
            leaf.mkdir(parents=True)
            (leaf / "cgroup.procs").write_text(str(straggler.pid))
        assert run_program("print(1)", **LIMITS).ok
        assert straggler.wait(5) == -signal.SIGKILL
        assert not any(leaf.exists() for leaf in leaves)
    finally:
        straggler.kill()
        straggler.wait()
        for leaf in leaves:
            with contextlib.suppress(OSError):
                leaf.rmdir()


def test_an_owner_is_gone_only_when_its_pid_no_longer_runs_as_itself():
    import subprocess

    from bsb.tasks.code.sandbox_sweep import owner_gone, owner_tag

    ns, pid, start = owner_tag().split("-")
    assert not owner_gone(f"run-{ns}-{pid}-{start}-abc", "run-")  # this process
    assert owner_gone(f"run-{ns}-{pid}-{int(start) + 1}-abc", "run-")  # its pid, reused by a younger process
    assert not owner_gone(f"run-{int(ns) + 1}-{pid}-{int(start) + 1}-abc", "run-")  # another PID namespace's
    assert not owner_gone("run-abcdef012345", "run-") and not owner_gone("bsb-sandbox-x1y2", "bsb-sandbox-")
    dead = subprocess.Popen(["true"])
    dead.wait()
    assert owner_gone(f"run-{ns}-{dead.pid}-{start}-abc", "run-")


# ------------------------------------------------------------------ the third hostile round: socket families, tmpfs


@needs_seccomp
def test_every_socket_family_but_af_unix_is_refused():
    """Found: a run created socket(AF_VSOCK), bound and listened: the VM's vsock port space, shared with the host (a
    path to the hypervisor host that no network namespace closes). Only AF_UNIX is left; the run's own network and
    mount namespaces keep it to the run."""
    prog = (
        "import socket\n"
        "for name in ('AF_INET', 'AF_INET6', 'AF_VSOCK', 'AF_NETLINK', 'AF_PACKET', 'AF_ALG', 'AF_BLUETOOTH'):\n"
        "    family = getattr(socket, name, None)\n"
        "    if family is None:\n        continue\n"
        "    for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM, socket.SOCK_RAW):\n"
        "        try:\n            socket.socket(family, kind).close()\n            print(name, kind, 'open')\n"
        "        except OSError as e:\n            print(name, kind, e.errno)\n"
        "    try:\n        socket.socketpair(family)\n        print(name, 'pair open')\n"
        "    except OSError as e:\n        print(name, 'pair', e.errno)\n"
        "a, b = socket.socketpair()\na.sendall(b'x')\nprint('unix pair', b.recv(1))\n"
        "s = socket.socket(socket.AF_UNIX)\ns.bind('s.sock')\ns.listen(1)\nprint('unix ok')\n"
    )
    r = run_program(prog, **LIMITS)
    lines = r.stdout.splitlines()
    assert r.ok and lines[-2:] == ["unix pair b'x'", "unix ok"], (r.stdout, r.stderr)
    refused = lines[:-2]
    assert any(line.startswith("AF_VSOCK") for line in refused) and len(refused) >= 20
    assert all(line.endswith(" 1") for line in refused), refused  # EPERM, from the filter, for every family and type


@needs_seccomp
@needs_x86
def test_a_socket_family_in_the_high_word_is_still_refused():
    """The kernel reads the family as an int: a value with bits above 32 set is the same family to it."""
    prog = SYSCALLS + ("print('socket', *call(41, ctypes.c_long((1 << 32) | 40), 1, 0))\n"  # socket(AF_VSOCK + high bits, STREAM)
                       "print('socketpair', *call(53, ctypes.c_long((1 << 32) | 2), 1, 0, None))\n")
    r = run_program(prog, **LIMITS)
    assert r.ok and r.stdout.splitlines() == ["socket -1 1", "socketpair -1 1"], r.stdout


@needs_ns
@pytest.mark.parametrize("make", ["open(f'f{i}', 'w').close()", "os.mkdir(f'd{i}')", "os.symlink('x', f'l{i}')"])
def test_endless_empty_files_end_as_a_counted_disk_error(make):
    """Found: a run making empty files for ever on its tmpfs (no bytes, so no size limit) filled the run's memory with
    inodes and ended in `unshare: sigprocmask unblock failed` (status error), never counted as a resource limit."""
    prog = f"import os\ni = 0\nwhile True:\n    {make}\n    i += 1\n"
    r = run_program(prog, timeout_s=6, memory_mb=256, disk_mb=16)
    assert r.status == "disk" and "disk limit (16 MB, 1024 files a run)" == r.reason, (r.status, r.reason)
    assert r.wall_s < 5 and (r.memory_peak_mb is None or r.memory_peak_mb < 128), r.memory_peak_mb


@needs_cgroup
def test_kernel_memory_past_the_budget_is_a_memory_status():
    """Found: on cgroup v1 an OOM kill leaves memory.failcnt at 0 (only memory.oom_control counts it), so a run the
    kernel ended for its memory was an `error`. Many small files of a large disk quota: the page cache and inodes are
    the run's memory."""
    prog = "i = 0\nwhile True:\n    open(f'f{i}', 'wb').write(b'x' * 4096)\n    i += 1\n"
    r = run_program(prog, timeout_s=8, memory_mb=64, disk_mb=4096)
    assert r.status == "memory" and r.reason == "memory limit (64 MB a run)", (r.status, r.reason)


@needs_ns
def test_an_abstract_unix_socket_of_the_host_is_unreachable():
    """AF_UNIX is the one family left: its abstract names belong to the run's own network namespace."""
    import socket

    name = f"\0bsb-abstract-{os.getpid()}"
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(name)
    listener.listen(1)
    try:
        prog = (f"import socket\ns = socket.socket(socket.AF_UNIX)\ntry:\n    s.connect({name!r})\n    print('CONNECTED')\n"
                "except OSError as e:\n    print('refused', e.errno)\n")
        r = run_program(prog, **LIMITS)
    finally:
        listener.close()
    assert r.ok and r.stdout == "refused 111\n", r.stdout  # ECONNREFUSED: no such name in the run's namespace
