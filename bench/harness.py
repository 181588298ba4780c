"""Shared pieces of the benchmarks: providers, inputs, the machine's ceilings, peak memory, and the report.

Every benchmark records one row per (op, shape, provider) with its median time. At the end of the session the
rows are written to ``bench/results/<machine>.{json,csv,md}``, each with its ratio to the reference of the
same shape and to the machine's ceiling measured in the same run: the copy bandwidth and a single row-max
read pass for the row ops (logit bytes read once), the matmul rate for the lens.
"""

from __future__ import annotations

import csv
import importlib
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import torch

from bsb.kernels import dispatch

RESULTS = Path(__file__).parent / "results"
HAS_CUDA = torch.cuda.is_available()

# op -> module per provider: the dispatch table's, plus the reference for every op.
PROVIDER_MODULES = {**dispatch.PROVIDERS, "reference": {op: "bsb.kernels.reference" for op in dispatch.OPS}}


def device() -> str:
    return "cuda" if HAS_CUDA else "cpu"


def providers() -> list[str]:
    """reference plus the fast path of this device (C++ on the CPU, Triton on a GPU)."""
    return ["reference", "triton" if HAS_CUDA else "cpp"]


def op_fn(provider: str, op: str):
    if op == "train_logprobs":  # forward + backward of the training log-probs (bench/train_ops.py)
        import train_ops

        return train_ops.fwd_bwd(provider)
    return getattr(importlib.import_module(PROVIDER_MODULES[provider][op]), op)


def sync() -> None:
    if HAS_CUDA:
        torch.cuda.synchronize()


L2_BYTES = 60 * 2**20  # an H100/H200's L2; a GPU benchmark rotates through at least 4x this much input


def rotation(make_args, nbytes: int) -> list:
    """Input sets to cycle through so each call reads from HBM, not L2: at least 4x the L2 size in all (GPU only)."""
    if not HAS_CUDA:
        return [make_args(0)]
    copies = max(1, min(16, -(-4 * L2_BYTES // max(1, nbytes))))
    return [make_args(i) for i in range(copies)]


def cuda_ms(fn, arg_sets: list) -> float:
    """Median time of ``fn`` over the rotating ``arg_sets``, CUDA-event timed by ``triton.testing.do_bench``."""
    import itertools

    from triton.testing import do_bench

    cycle = itertools.cycle(arg_sets)
    return do_bench(lambda: fn(*next(cycle)), warmup=25, rep=100, return_mode="median")


def median_ms(fn, rounds: int = 5, warmup: int = 1) -> float:
    for _ in range(warmup):
        fn()
    sync()
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        sync()
        times.append((time.perf_counter() - start) * 1e3)
    times.sort()
    return times[len(times) // 2]


# ------------------------------------------------------------------------------------------------- ceilings

_CEILINGS: dict[str, float] = {}


def copy_gbps() -> float:
    """Measured copy bandwidth (bytes read + written per second), GB/s."""
    if "copy" not in _CEILINGS:
        n = (256 << 20) // 4
        src = torch.empty(n, device=device()).uniform_()
        dst = torch.empty_like(src)
        ms = cuda_ms(lambda: dst.copy_(src), [()]) if HAS_CUDA else median_ms(lambda: dst.copy_(src), rounds=9)
        _CEILINGS["copy"] = 2 * src.numel() * 4 / ms / 1e6
    return _CEILINGS["copy"]


def rowmax_ms(x: torch.Tensor) -> float:
    """A single read pass over the same logits (one max per row): the floor for any one-pass row op."""
    return median_ms(lambda: x.amax(-1), rounds=9)


def matmul_tflops(dtype: torch.dtype) -> float:
    """Measured dense matmul rate for ``dtype`` on this device, TFLOP/s."""
    key = f"mm-{dtype}"
    if key not in _CEILINGS:
        n = 4096 if HAS_CUDA else 1536
        a = torch.randn(n, n, device=device(), dtype=dtype)
        b = torch.randn(n, n, device=device(), dtype=dtype)
        ms = cuda_ms(lambda: a @ b, [()]) if HAS_CUDA else median_ms(lambda: a @ b, rounds=5)
        _CEILINGS[key] = 2 * n**3 / ms / 1e9
    return _CEILINGS[key]


# ------------------------------------------------------------------------------------------------- memory

_CHILD = r"""
import json, sys, torch
sys.path.insert(0, {bench!r})
import harness, inputs
op, provider, shape = {op!r}, {provider!r}, {shape!r}
args = inputs.make(op, shape, "cpu")
fn = harness.op_fn(provider, op)
fn(*args)  # warm: first-call allocations (thread pools, caches) are not the op's working memory
def rss():
    return int(open("/proc/self/statm").read().split()[1]) * 4096
open("/proc/self/clear_refs", "w").write("5")  # reset the peak RSS (VmHWM)
base = rss()
fn(*args)
peak = next(int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith("VmHWM"))
print(json.dumps(peak - base))
"""


def peak_extra_bytes(op: str, provider: str, shape: dict) -> int:
    """Peak memory an op needs beyond its inputs (a fresh process per measurement)."""
    if HAS_CUDA:
        import inputs

        args = inputs.make(op, shape, "cuda")
        fn = op_fn(provider, op)
        fn(*args)
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        fn(*args)
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - base
    code = _CHILD.format(bench=str(Path(__file__).parent), op=op, provider=provider, shape=shape)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return int(out.stdout.strip().splitlines()[-1])


# ------------------------------------------------------------------------------------------------- report

ROWS: list[dict] = []


def record(**row) -> None:
    """Keep a row and rewrite the report at once: a run cut short (a device script's time-out) keeps every row so far."""
    ROWS.append(row)
    write_report()


def machine() -> dict:
    info = {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "cpu": _cpu_name(),
    }
    try:
        import bsb._C

        info["cpp_isa"] = bsb._C.isa()
    except ImportError:
        info["cpp_isa"] = "not built"
    if HAS_CUDA:
        info["gpu"] = torch.cuda.get_device_name()
        import triton

        info["triton"] = triton.__version__
    info.update({f"ceiling_{k}": round(v, 2) for k, v in _CEILINGS.items()})
    return info


def _cpu_name() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def write_report() -> Path | None:
    if not ROWS:
        return None
    RESULTS.mkdir(exist_ok=True)
    tag = ("gpu-" + torch.cuda.get_device_name().replace(" ", "_")) if HAS_CUDA else "cpu"
    # A partial run (-k) updates its rows and keeps the others of the last report.
    key = lambda r: (r["op"], r["shape"], r["provider"])  # noqa: E731
    fresh = {key(r) for r in ROWS}
    old = RESULTS / f"{tag}.json"
    kept = [r for r in json.loads(old.read_text())["rows"] if key(r) not in fresh] if old.exists() else []
    rows = kept + ROWS
    rows.sort(key=lambda r: (r["op"], r["shape"], r["provider"] != "reference"))
    ref = {(r["op"], r["shape"]): r["ms"] for r in rows if r["provider"] == "reference"}
    for r in rows:
        base = ref.get((r["op"], r["shape"]))
        r["speedup_vs_reference"] = round(base / r["ms"], 2) if base and r["provider"] != "reference" else None
    meta = machine()
    (RESULTS / f"{tag}.json").write_text(json.dumps({"machine": meta, "rows": rows}, indent=1))
    keys = sorted({k for r in rows for k in r})
    with open(RESULTS / f"{tag}.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        w.writerows(rows)
    lines = [f"# Benchmarks on {tag}", "", "Machine: " + ", ".join(f"{k}={v}" for k, v in meta.items()), ""]
    cols = ["op", "shape", "provider", "ms", "speedup_vs_reference", "vs_ceiling", "ceiling", "gbps", "tflops", "peak_extra_mb"]
    lines += ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        lines.append("| " + " | ".join("" if r.get(c) is None else str(r.get(c)) for c in cols) + " |")
    lines += ["", "vs_ceiling: time of one read pass (row max) / time of the op for the row ops; achieved / measured "
              "matmul TFLOP/s for the lens. Generated by `make bench`; numbers are from one run on this machine."]
    (RESULTS / f"{tag}.md").write_text("\n".join(lines) + "\n")
    os.environ["BSB_BENCH_REPORT"] = str(RESULTS / f"{tag}.md")
    return RESULTS / f"{tag}.md"
