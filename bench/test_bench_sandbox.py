"""Sandboxed programs per second on this machine: the code task's hidden-test runs through bsb.tasks.code.sandbox (every
layer this machine allows), a pool of 1 and of 2 workers, beside a bare ``python -c`` subprocess (no isolation) in
the same run, so the sandbox's cost shows as a ratio."""

import subprocess
import time

import harness
import pytest

from bsb.tasks.code.sandbox import SandboxPool, layers, sandbox_python

PROGRAM = "import sys\nn = int(sys.stdin.read())\nprint(sum(i * i for i in range(n)))"
JOBS = 24


def _bare(n: int) -> None:
    for i in range(n):
        subprocess.run([sandbox_python(), "-I", "-S", "-c", PROGRAM], input=str(1000 + i), capture_output=True, text=True, check=True)


@pytest.mark.parametrize("provider", ["bare_subprocess", "sandbox_1", "sandbox_2"])
def test_sandbox_programs_per_second(benchmark, provider):  # noqa: D103
    if provider == "bare_subprocess":
        def call():
            _bare(JOBS)
    else:
        pool = SandboxPool(int(provider[-1]), timeout_s=5.0, memory_mb=256, total_memory_mb=1024)

        def call():
            results = pool.map([(PROGRAM, str(1000 + i)) for i in range(JOBS)])
            assert all(r.ok for r in results)

    start = time.perf_counter()
    benchmark.pedantic(call, rounds=3, warmup_rounds=1)
    s = benchmark.stats.stats.median
    harness.record(op="sandbox", shape=f"{JOBS} programs", provider=provider, ms=round(1e3 * s, 1), programs_per_s=round(JOBS / s, 1),
                   layers="+".join(k for k, v in layers().items() if v) if provider != "bare_subprocess" else "none",
                   wall_s=round(time.perf_counter() - start, 1))
