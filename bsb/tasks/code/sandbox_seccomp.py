"""The sandbox's seccomp filter (:mod:`bsb.tasks.code.sandbox`): the system calls a run's program may not make.

A small classic-BPF program of our own, built here and installed by the launcher (``prctl(PR_SET_SECCOMP,
SECCOMP_MODE_FILTER)``, after ``no_new_privs`` and the uid drop, just before the program starts). It is ours rather
than libseccomp's: the filter is a deny list of a few dozen instructions, the launcher runs on the sandbox's bare
interpreter with the standard library only, and a hand-built filter needs no system package on a fresh machine.

What it refuses, with ``EPERM`` (the program sees an ordinary failure and goes on):

* keys: ``add_key``, ``request_key`` and every ``keyctl`` operation but reading a keyring's id without creating it.
  No run can make a key, so none is listed in another run's ``/proc/keys`` or outlives the run in a user keyring;
* namespaces: ``unshare``, ``setns`` and a ``clone`` with any ``CLONE_NEW*`` flag (``unshare -U -r`` fails);
  ``clone3``, whose flags live in memory a filter cannot read, answers ``ENOSYS``, so the C library falls back to
  ``clone``, which the filter checks;
* other processes: ``ptrace``, ``process_vm_readv`` / ``process_vm_writev``;
* mounts: ``mount``, ``umount2``, ``pivot_root``, ``chroot`` and the new mount API (``open_tree``, ``move_mount``,
  ``fsopen``, ``fsconfig``, ``fsmount``, ``fspick``, ``mount_setattr``);
* sockets of every family but ``AF_UNIX`` (``socket`` and ``socketpair``): no ``AF_VSOCK`` (the VM's port space,
  shared with the hypervisor host, which no network namespace closes), ``AF_INET*``, ``AF_NETLINK``, ``AF_PACKET``,
  ``AF_ALG``. ``AF_UNIX`` stays (``multiprocessing`` needs it); the run's network namespace holds its abstract names
  and its own root its paths, so it reaches nothing outside the run;
* kernel attack surface a program never needs: ``bpf``, ``perf_event_open``, ``userfaultfd``, ``io_uring_*``,
  ``open_by_handle_at`` / ``name_to_handle_at``.

A call made through another ABI than the machine's own (i386's ``int 0x80`` on x86_64) kills the process, and so
x32's numbers (``nr >= 0x40000000``) get ``EPERM``: a deny list only holds for the numbering it was written in.
"""

from __future__ import annotations

import os
import struct
import sys
from functools import lru_cache
from pathlib import Path

AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
X32_BIT = 0x40000000
# name: (x86_64, aarch64); aarch64 uses the generic table
REFUSED = {
    "add_key": (248, 217),
    "request_key": (249, 218),
    "unshare": (272, 97),
    "setns": (308, 268),
    "ptrace": (101, 117),
    "process_vm_readv": (310, 270),
    "process_vm_writev": (311, 271),
    "process_madvise": (440, 440),
    "pidfd_getfd": (438, 438),  # another process's file descriptors
    "kcmp": (312, 272),
    "mount": (165, 40),
    "umount2": (166, 39),
    "pivot_root": (155, 41),
    "chroot": (161, 51),
    "open_tree": (428, 428),
    "move_mount": (429, 429),
    "fsopen": (430, 430),
    "fsconfig": (431, 431),
    "fsmount": (432, 432),
    "fspick": (433, 433),
    "mount_setattr": (442, 442),
    "bpf": (321, 280),
    "perf_event_open": (298, 241),
    "userfaultfd": (323, 282),
    "io_uring_setup": (425, 425),
    "io_uring_enter": (426, 426),
    "io_uring_register": (427, 427),
    "open_by_handle_at": (304, 265),
    "name_to_handle_at": (303, 264),
}
KEYCTL = (250, 219)
CLONE = (56, 220)
CLONE3 = (435, 435)
SOCKET = (41, 198)
SOCKETPAIR = (53, 199)
AF_UNIX = 1
KEYCTL_GET_KEYRING_ID = 0
CLONE_NEW = 0x7E020000  # CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET

# classic BPF
LD_W_ABS, JEQ_K, JGE_K, JSET_K, RET_K = 0x20, 0x15, 0x35, 0x45, 0x06
RET_KILL_PROCESS, RET_ERRNO, RET_ALLOW = 0x80000000, 0x00050000, 0x7FFF0000
EPERM, ENOSYS = 1, 38
# struct seccomp_data: int nr; u32 arch; u64 instruction_pointer; u64 args[6] (little-endian: an arg's low word first)
NR, ARCH, ARG0_LO, ARG2_LO = 0, 4, 16, 32


@lru_cache(maxsize=1)
def available() -> bool:
    """Whether this machine takes the filter: a Linux kernel with seccomp filters, on an architecture named here."""
    actions = Path("/proc/sys/kernel/seccomp/actions_avail")
    try:
        avail = set(actions.read_text().split())
    except OSError:
        return False
    return (
        sys.platform == "linux"
        and os.uname().machine in AUDIT_ARCH
        and sys.byteorder == "little"
        and {"errno", "kill_process", "allow"} <= avail
    )


def filter_program(machine: str | None = None) -> bytes:
    """The filter as ``struct sock_filter`` records (8 bytes each), for ``machine`` (default: this one's)."""
    machine = machine or os.uname().machine
    if machine not in AUDIT_ARCH:
        raise ValueError(f"no seccomp filter for {machine}; known: {', '.join(AUDIT_ARCH)}")
    col = 0 if machine == "x86_64" else 1
    # (code, k, jump-if-true label, jump-if-false label); None: the next instruction
    code: list[tuple[int, int, str | None, str | None] | str] = [
        (LD_W_ABS, ARCH, None, None),
        (JEQ_K, AUDIT_ARCH[machine], None, "kill"),
        (LD_W_ABS, NR, None, None),
    ]
    if machine == "x86_64":
        code.append((JGE_K, X32_BIT, "eperm", None))
    code += [(JEQ_K, nrs[col], "eperm", None) for nrs in REFUSED.values()]
    code += [
        (JEQ_K, CLONE3[col], "enosys", None),
        (JEQ_K, KEYCTL[col], "keyctl", None),
        (JEQ_K, CLONE[col], "clone", None),
        (JEQ_K, SOCKET[col], "socket", None),
        (JEQ_K, SOCKETPAIR[col], "socket", None),
        (RET_K, RET_ALLOW, None, None),
        "keyctl",
        (LD_W_ABS, ARG0_LO, None, None),
        (JEQ_K, KEYCTL_GET_KEYRING_ID, None, "eperm"),
        (LD_W_ABS, ARG2_LO, None, None),  # create: a keyring made on demand would outlive the run
        (JEQ_K, 0, "allow", "eperm"),
        "clone",
        (LD_W_ABS, ARG0_LO, None, None),
        (JSET_K, CLONE_NEW, "eperm", "allow"),
        "socket",
        (LD_W_ABS, ARG0_LO, None, None),  # the family, an int to the kernel: the low word is all it reads
        (JEQ_K, AF_UNIX, "allow", "eperm"),
        "allow",
        (RET_K, RET_ALLOW, None, None),
        "eperm",
        (RET_K, RET_ERRNO | EPERM, None, None),
        "enosys",
        (RET_K, RET_ERRNO | ENOSYS, None, None),
        "kill",
        (RET_K, RET_KILL_PROCESS, None, None),
    ]
    labels, ops = {}, []
    for item in code:
        if isinstance(item, str):
            labels[item] = len(ops)
        else:
            ops.append(item)
    out = bytearray()
    for i, (op, k, jt, jf) in enumerate(ops):
        rel = [0 if label is None else labels[label] - i - 1 for label in (jt, jf)]
        if not all(0 <= r <= 255 for r in rel):
            raise AssertionError("a seccomp jump out of range")  # the list above grew past 255 entries
        out += struct.pack("=HBBI", op, rel[0], rel[1], k)
    return bytes(out)
