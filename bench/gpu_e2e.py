"""End-to-end GPU stage: the engine and a tree RLVR step on a Qwen3-0.6B-shaped model with random weights (nothing can
be downloaded on the device machine), bf16 on the GPU. Each measurement is appended to OUT/gpu_e2e.json as soon as it
is taken, so a time-out loses only what had not finished.

1. One tree RLVR step (M = 4 roots, k = 2 siblings, HF rollouts) with Probe-JS and with Lens-Shift: the share of the
   step spent in the reads (select, from the keys and values the generation kept) next to generation and the update.
2. Packed vs naive belief reads at T = 1,024 and 4,096 tokens with C = 16 cuts (Probe-JS reads).
3. Peak GPU memory of the training log-probs (forward + backward) at micro-batch 16 x 4,096 tokens: the chunked
   linear + logsumexp; the full-logits reference at 16 x 1,024 (its 16 x 4,096 logits alone would be 40 GB).

``--smoke`` runs every stage at toy sizes on the CPU (the test suite does), so the script is known to work before a
device run.

    python bench/gpu_e2e.py OUT [--smoke]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from inputs import QWEN3_06B, QWEN3_TOY  # noqa: E402


def _model(smoke: bool, device: torch.device, dtype: torch.dtype):
    import transformers

    cfg = transformers.Qwen3Config(num_hidden_layers=2 if smoke else 28, **(QWEN3_TOY if smoke else QWEN3_06B))
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    return transformers.AutoModelForCausalLM.from_config(cfg).to(device, dtype).eval()


class Log:
    def __init__(self, path: Path):
        self.path, self.rows = path, []

    def add(self, **row):
        self.rows.append(row)
        self.path.write_text(json.dumps(self.rows, indent=1))
        print(json.dumps(row), flush=True)


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def _timed(fn, device, rounds=3):
    fn()
    _sync(device)
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        out = fn()
        _sync(device)
        times.append(time.perf_counter() - t0)
    return sorted(times)[len(times) // 2] * 1e3, out


def packed_vs_naive(log, model, device, lengths, cuts=16, suffix_len=9):
    from bsb.engine.packed import naive_reads, packed_reads

    vocab = model.config.vocab_size
    g = torch.Generator().manual_seed(0)
    for t in lengths:
        prefix = torch.randint(0, vocab, (32 + t,), generator=g)
        cut = [32 + round(1 + j * (t - 3) / (cuts - 1)) for j in range(cuts)]
        suffix = torch.randint(0, vocab, (suffix_len,), generator=g)
        for name, fn in (("naive", naive_reads), ("packed", packed_reads)):
            ms, reads = _timed(lambda fn=fn, p=prefix, c=cut, s=suffix: fn(model, p, c, s), device)
            log.add(
                stage="reads",
                path=name,
                chain_tokens=t,
                cuts=cuts,
                ms=round(ms, 2),
                token_forwards=reads.token_forwards,
            )


def tree_step(log, model, device, dtype, prompts=4, max_response=256, chains=4, smoke=False):
    """One tree RLVR step through bsb's own rollout, advantages and update, with a stand-in reward (random weights
    give no meaningful answers): the share of the step each phase takes."""
    import random

    from bsb.engine.hf_backend import HFBackend
    from bsb.engine.selectors import SelectorConfig, make_selector
    from bsb.train import phases, update
    from bsb.train.config import TrainConfig
    from bsb.train.rollout import tree_rollout
    from bsb.train.run_plan import resolve_plan
    from bsb.train.sampling import Sampling
    from bsb.train.tree_options import TreeOptions

    vocab = model.config.vocab_size
    policy = model.float() if dtype != torch.float32 else model  # fp32 master weights, bf16 autocast
    # the policy generates and reads, so it keeps each generation's keys and values for the reads (as bsb train does)
    backend = HFBackend(policy, compute_dtype=None if dtype == torch.float32 else dtype, keep_kv=True)
    newline = torch.zeros(vocab, dtype=torch.bool)
    newline[::20] = True  # 5% of the vocabulary breaks a line: a random-weight chain has a boundary every ~20 tokens
    g = torch.Generator().manual_seed(1)
    prompt_ids = [torch.randint(0, vocab, (64,), generator=g).tolist() for _ in range(prompts)]
    cfg = TrainConfig(chains=chains, siblings=2, max_response_len=max_response, micro_batch=4, dynamic_sampling=False)
    opt = torch.optim.AdamW(policy.parameters(), lr=1e-6, fused=device.type == "cuda")
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    answer = [5, 6, 7]
    for selector in ("probe_js", "lens_shift"):
        scfg = SelectorConfig(suffix=list(range(10, 19)), range_cap=1.0)
        sel = make_selector(selector, scfg, backend)  # bound to the policy: it generates and reads
        t0 = time.perf_counter()
        trees, times = tree_rollout(
            prompt_ids,
            [f"p{i}" for i in range(prompts)],
            ["x"] * prompts,
            backend,
            sel,
            newline,
            TreeOptions(chains, 2, 1),
            Sampling(max_response),
            eos_id=vocab - 1,
            seed=0,
            answer_tokens=(lambda r: answer) if selector == "lens_shift" else None,
        )
        rng = random.Random(0)
        for tree in trees:
            for leaf in tree.leaves:
                leaf.correct = rng.random() < 0.5
                leaf.reward = float(leaf.correct)
        _sync(device)
        t1 = time.perf_counter()
        rows = phases.advantage_rows(trees, cfg, newline)
        plan = resolve_plan(cfg, policy)[0]
        update.update_policy(policy, opt, sched, rows, cfg, plan, pad=0, seed=0, compute_dtype=dtype)
        _sync(device)
        t2 = time.perf_counter()
        step = t2 - t0
        log.add(
            stage="tree_step",
            selector=selector,
            reads="kv",
            prompts=prompts,
            chains=chains,
            siblings=2,
            max_response=max_response,
            step_s=round(step, 2),
            generate_s=round(times.generate_s, 2),
            select_s=round(times.select_s, 3),
            update_s=round(t2 - t1, 2),
            read_share=round(times.select_s / step, 4),
            tokens_generated=times.tokens_generated,
            probe_token_forwards=sum(t.probe_tokens for t in trees),
        )


def logprob_memory(log, device, dtype, smoke=False):
    from bsb.kernels import reference
    from bsb.kernels.linear_logprob import linear_token_logprobs

    d, v = (64, 512) if smoke else (1024, 151_936)
    for name, fn, n in (
        ("chunked", linear_token_logprobs, 16 * (64 if smoke else 4096)),
        ("reference", reference.linear_token_logprobs, 16 * (16 if smoke else 1024)),
    ):
        g = torch.Generator(device).manual_seed(0)
        hidden = torch.randn(n, d, generator=g, device=device, dtype=dtype, requires_grad=True)
        weight = (torch.randn(v, d, generator=g, device=device) / d**0.5).to(dtype).requires_grad_()
        targets = torch.randint(0, v, (n,), generator=g, device=device)
        if device.type == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated() if device.type == "cuda" else 0
        t0 = time.perf_counter()
        with torch.autocast(device.type, dtype=dtype, enabled=dtype != torch.float32):
            fn(hidden, weight, targets).sum().backward()
        _sync(device)
        ms = (time.perf_counter() - t0) * 1e3
        peak = (torch.cuda.max_memory_allocated() - base) if device.type == "cuda" else None
        log.add(
            stage="train_logprobs",
            path=name,
            tokens=n,
            d=d,
            V=v,
            ms=round(ms, 1),
            peak_extra_gib=None if peak is None else round(peak / 2**30, 3),
        )
        del hidden, weight, targets


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", help="output folder (gpu_e2e.json)")
    ap.add_argument("--smoke", action="store_true", help="toy sizes on whatever device is there (a pipeline check)")
    ap.add_argument("--stages", nargs="*", default=["reads", "tree_step", "train_logprobs"])
    args = ap.parse_args(argv)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    log = Log(out / "gpu_e2e.json")
    log.add(
        stage="env",
        device=str(device),
        dtype=str(dtype),
        torch=torch.__version__,
        gpu=torch.cuda.get_device_name() if device.type == "cuda" else None,
        smoke=args.smoke,
    )
    model = _model(args.smoke, device, dtype)
    if "tree_step" in args.stages:  # first: the figure the check exists for
        tree_step(
            log,
            model,
            device,
            dtype,
            prompts=1 if args.smoke else 4,
            max_response=40 if args.smoke else 256,
            chains=2 if args.smoke else 4,
            smoke=args.smoke,
        )
    if "reads" in args.stages:
        packed_vs_naive(log, model, device, [48] if args.smoke else [1024, 4096], cuts=4 if args.smoke else 16)
    if "train_logprobs" in args.stages:
        logprob_memory(log, device, dtype, args.smoke)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
