"""Compile every Triton kernel of bsb for an H100/H200 (sm_90a) without a GPU and report what ptxas says: registers
per thread, spill bytes, shared memory, and whether the dots became Hopper tensor-core instructions (wgmma).

Triton's compiler and its bundled ptxas need no GPU, so this runs on any machine (CI's too). A kernel that spills,
or whose bf16 dot did not become wgmma, cannot reach the bandwidth or matmul targets of the GPU benchmarks.

    python bench/sm90.py            # writes bench/results/sm90.md and .json (rewritten after every kernel)
    python bench/sm90.py --smoke    # one small kernel: the pipeline, in seconds
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

RESULTS = Path(__file__).parent / "results"


def compile_report(
    fn,
    signature: dict,
    constexprs: dict,
    divisible_by_16=(),
    options: dict | None = None,
    arch: int = 90,
    tag: str = "",
) -> dict:
    """Compile ``fn`` (a ``@triton.jit`` function, unwrapped from autotune) for sm_``arch``a and run ptxas -v."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from triton.runtime.jit import JITFunction

    while not isinstance(fn, JITFunction):  # autotune / heuristics wrappers hold the function in .fn
        fn = fn.fn
    sig = {**signature, **{k: "constexpr" for k in constexprs}}
    missing = [a for a in fn.arg_names if a not in sig]
    if missing:
        raise ValueError(f"{fn.__name__}: no signature or constexpr for {missing}")
    attrs = {(fn.arg_names.index(n),): [["tt.divisibility", 16]] for n in divisible_by_16}
    start = time.time()
    kernel = triton.compile(
        ASTSource(fn, sig, constexprs, attrs), target=GPUTarget("cuda", arch, 32), options=dict(options or {})
    )
    seconds = time.time() - start
    ptx_path = Path("/tmp") / f"bsb_{fn.__name__}_{tag}.ptx"
    ptx_path.write_text(kernel.asm["ptx"])
    ptxas = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"
    out = subprocess.run(
        [str(ptxas), f"-arch=sm_{arch}a", "-v", str(ptx_path), "-o", os.devnull], capture_output=True, text=True
    )
    info = " ".join(
        line.split("info    :")[-1].strip() for line in out.stderr.splitlines() if "Used" in line or "spill" in line
    )
    ttgir = kernel.asm.get("ttgir", "")
    mma = (
        "wgmma"
        if "warp_group_dot" in ttgir or "wgmma" in kernel.asm["ptx"]
        else ("mma.sync" if "mma.sync" in kernel.asm["ptx"] else "none")
    )
    ptx_path.unlink()
    return {
        "kernel": fn.__name__,
        "variant": tag,
        "registers": _before(info, "registers"),
        "spill_bytes": _before(info, "bytes spill stores"),
        "shared_bytes": kernel.metadata.shared,
        "num_warps": kernel.metadata.num_warps,
        "num_stages": kernel.metadata.num_stages,
        "mma": mma,
        "compile_s": round(seconds, 1),
    }


def _before(text: str, word: str) -> int | None:
    parts = text.split(word)[0].split()
    try:
        return int(parts[-1])
    except (IndexError, ValueError):
        return None


def variants():
    """(kernel, signature, constexprs, divisible, options, tag) of every kernel at the shapes the GPU runs."""
    from bsb.kernels import triton_lens as tl_lens
    from bsb.kernels import triton_margin as tm
    from bsb.kernels import triton_surprisal as ts
    from bsb.kernels import triton_topk as tt

    out = []
    for dt in ("bf16", "fp32"):
        out.append(
            (
                tt._split_kernel,
                {
                    "x_ptr": f"*{dt}",
                    "cand_ptr": "*i64",
                    "cnt_ptr": "*i32",
                    "m_ptr": "*fp32",
                    "s_ptr": "*fp32",
                    "nan_ptr": "*i32",
                    "V": "i32",
                    "stride_row": "i32",
                    "split_len": "i32",
                    "SPLITS": "i32",
                },
                {"K": 20, "KP": 32, "CAP": tt.CAP, "BLOCK": 512},
                ["x_ptr", "cand_ptr", "stride_row", "split_len"],
                {"num_warps": 4},
                f"{dt} K=20 BLOCK=512",
            )
        )
        out.append(
            (
                tt._merge_kernel,
                {
                    "x_ptr": f"*{dt}",
                    "cand_ptr": "*i64",
                    "cnt_ptr": "*i32",
                    "m_ptr": "*fp32",
                    "s_ptr": "*fp32",
                    "nan_ptr": "*i32",
                    "lp_ptr": "*fp32",
                    "idx_ptr": "*i64",
                    "max_ptr": "*fp32",
                    "rnan_ptr": "*i8",
                    "V": "i32",
                    "stride_row": "i32",
                    "SPLITS": "i32",
                },
                {"K": 20, "KP": 32, "CAP": tt.CAP, "SP": 8, "BLOCK": 4096},
                ["x_ptr", "cand_ptr", "stride_row"],
                {"num_warps": 4},
                f"{dt} K=20 SPLITS<=8",
            )
        )
    out.append(
        (
            tt._floored_js_kernel,
            {"lp_ptr": "*fp32", "idx_ptr": "*i64", "pair_ptr": "*i8", "out_ptr": "*fp32", "L": "i32"},
            {"K": 20, "KP": 32},
            ["lp_ptr", "idx_ptr"],
            {"num_warps": 4},
            "K=20",
        )
    )
    out.append(
        (
            ts._surprisal_entropy_kernel,
            {
                "x_ptr": "*bf16",
                "tok_ptr": "*i64",
                "sur_ptr": "*fp32",
                "ent_ptr": "*fp32",
                "max_ptr": "*fp32",
                "nan_ptr": "*i8",
                "V": "i32",
                "stride_row": "i32",
            },
            {"BLOCK": 4096},
            ["x_ptr", "stride_row"],
            {"num_warps": 4},
            "bf16 BLOCK=4096",
        )
    )
    out.append(
        (
            tm._margin_kernel,
            {
                "x_ptr": "*bf16",
                "out_ptr": "*fp32",
                "max_ptr": "*fp32",
                "nan_ptr": "*i8",
                "V": "i32",
                "stride_row": "i32",
            },
            {"BLOCK": 4096},
            ["x_ptr", "stride_row"],
            {"num_warps": 4},
            "bf16 BLOCK=4096",
        )
    )
    out += tl_lens.compile_variants()
    return out


def _write(out: Path, rows: list[dict], complete: bool) -> None:
    """sm90.json and sm90.md as they stand: rewritten after every kernel, so a run cut off by its time limit keeps
    every kernel it compiled."""
    import triton

    (out / "sm90.json").write_text(
        json.dumps({"triton": triton.__version__, "complete": complete, "rows": rows}, indent=1)
    )
    lines = [
        f"# sm_90a compile report (Triton {triton.__version__}, ptxas -v; no GPU needed)",
        "",
        "| kernel | variant | registers | spill bytes | shared bytes | warps | stages | tensor cores |",
        "|---|---|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['kernel']} | {r['variant']} | "
            + (
                f"error: {r['error']} | | | | | |"
                if "error" in r
                else f"{r['registers']} | {r['spill_bytes']} | {r['shared_bytes']} | {r['num_warps']} | {r['num_stages']} | {r['mma']} |"
            )
        )
    lines += ["", "Generated by `python bench/sm90.py`. Targets: no spills; every bf16 `tl.dot` as wgmma."]
    if not complete:
        lines += ["", "Incomplete: the run stopped before every kernel compiled."]
    (out / "sm90.md").write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(RESULTS), help="where sm90.md and sm90.json go")
    ap.add_argument("--smoke", action="store_true", help="compile only the smallest kernel (a pipeline check for CI)")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    todo = variants()
    if args.smoke:
        todo = [v for v in todo if v[0].__name__ == "_floored_js_kernel"]
    rows: list[dict] = []
    _write(out, rows, complete=False)
    for fn, sig, const, div, opts, tag in todo:
        try:
            rows.append(compile_report(fn, sig, const, div, opts, tag=tag))
        except Exception as err:  # a kernel that does not compile is a row of the report, not a crash of it
            rows.append(
                {
                    "kernel": getattr(fn, "__name__", str(fn)),
                    "variant": tag,
                    "error": f"{type(err).__name__}: {err}"[:300],
                }
            )
        r = rows[-1]
        _write(out, rows, complete=False)
        print(
            f"{r['kernel']} [{r['variant']}]: "
            + (
                r.get("error")
                or f"{r['registers']} registers, {r['spill_bytes']} B spilled, "
                f"{r['shared_bytes']} B shared, {r['num_warps']} warps, {r['num_stages']} stages, mma={r['mma']}"
            ),
            flush=True,
        )
    _write(out, rows, complete=True)
    print(f"wrote {out / 'sm90.md'}")
    return 1 if any("error" in r or r.get("spill_bytes") for r in rows) else 0


if __name__ == "__main__":
    # Compile for the device: the kernels must be decorated as JIT functions, not interpreted ones.
    if os.environ.get("TRITON_INTERPRET") == "1":
        raise SystemExit("unset TRITON_INTERPRET: bench/sm90.py compiles for sm_90a")
    sys.path.insert(0, str(Path(__file__).parents[1]))
    raise SystemExit(main())
