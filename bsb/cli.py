"""The ``bsb`` command line."""

from __future__ import annotations

import argparse
import sys
import time


def _demo(args: argparse.Namespace) -> int:
    """Every selector of the engine on chains sampled from a tiny randomly initialised Qwen3.

    Until the embedded default (a tiny model trained on the synthetic task) exists, the model is random and the
    tokens 0..15 of its 512-token vocabulary stand for line breaks, so sampled chains have step boundaries.
    """
    import torch
    import transformers
    from rich.console import Console
    from rich.table import Table
    from tqdm import tqdm

    from bsb import kernels
    from bsb.engine.hf_backend import HFBackend
    from bsb.engine.selectors import SELECTORS, ChainInput, SelectorConfig, make_selector

    torch.manual_seed(args.seed)
    cfg = transformers.Qwen3Config(
        vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=4, num_attention_heads=2,
        num_key_value_heads=1, head_dim=64, max_position_embeddings=1024, tie_word_embeddings=False,
        eos_token_id=511, pad_token_id=510,
    )
    backend = HFBackend(transformers.AutoModelForCausalLM.from_config(cfg))
    newline = torch.zeros(cfg.vocab_size, dtype=torch.bool)
    newline[:16] = True
    t0 = time.perf_counter()
    prompts = [torch.randint(16, 500, (12,)).tolist() for _ in range(args.chains)]
    responses = backend.generate(prompts, max_new_tokens=args.chain_len, temperature=1.0, seed=args.seed)
    rollout_s, rollout_tokens = time.perf_counter() - t0, sum(map(len, responses))
    chains = [ChainInput(p, r, answer=[100, 101]) for p, r in zip(prompts, responses)]
    config = SelectorConfig(suffix=[500, 501, 502, 503, 504, 505], max_candidates=16, seed=args.seed, margin_window=(4, 64))

    console = Console()
    table = Table(title=f"Fork positions on {len(chains)} chains sampled from a random tiny Qwen3 (kernels: "
                        f"probe_js={kernels.implementation('probe_js')}, lens={kernels.implementation('lens_logprobs')})")
    table.add_column("selector")
    for i, ch in enumerate(chains):
        table.add_column(f"chain {i} ({len(ch.response)} tok)", justify="right")
    table.add_column("reads / rollout tokens", justify="right")
    table.add_column("time", justify="right")
    reasons = set()
    for name in tqdm([n for n in SELECTORS if n != "bsv"], desc="selectors", leave=False):
        start = time.perf_counter()
        sel = make_selector(name, config).select(chains, newline, backend)
        spent = time.perf_counter() - start
        cells = []
        for c in sel.choices:
            cells.append("unforkable" if c.fork is None else f"{c.fork}*" if c.fallback else str(c.fork))
            reasons.update({c.fallback} - {""})
        table.add_row(name, *cells, f"{sel.token_forwards / rollout_tokens:.2f}", f"{spent:.2f}s")
    console.print(table)
    if reasons:
        console.print("* fell back to Midpoint or a single candidate: " + "; ".join(sorted(reasons)))
    console.print(f"Rollout: {rollout_tokens} tokens in {rollout_s:.2f}s. Scores are fork-before; a pool has at most "
                  f"{config.max_candidates} newline candidates. bsv needs a fitted direction (bsb.engine.bsv) and is skipped.")
    return 0


def _train(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from bsb.train.config import TrainConfig, parse_overrides
    from bsb.train.trainer import Trainer

    try:  # a config or a model that cannot run is a usage error, reported in one line
        data = TrainConfig.from_yaml(args.config).to_dict() if args.config else {}
        data.update(parse_overrides(args.set))
        trainer = Trainer(TrainConfig.from_dict(data), resume=not args.no_resume)
    except (ValueError, FileNotFoundError) as err:
        parser.error(str(err))
    rows = trainer.run()
    vals = [(r["step"], r["val_accuracy"]) for r in rows if "val_accuracy" in r]
    print(f"held-out accuracy by step: {', '.join(f'{s}: {a:.3f}' for s, a in vals)}")
    print(f"metrics: {trainer.out / 'metrics.jsonl'}; final model: {trainer.out / 'final'}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bsb", description="Belief-shift branching for tree-structured RLVR")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="belief reads on the embedded default")
    demo.add_argument("--seed", type=int, default=0)
    demo.add_argument("--chain-len", type=int, default=160, help="max tokens of each sampled chain")
    demo.add_argument("--chains", type=int, default=3, help="chains to sample")
    train = sub.add_parser("train", help="tree RLVR training (vLLM rollouts when installed)")
    train.add_argument("--config", help="YAML file of TrainConfig fields (see bsb/train/config.py)")
    train.add_argument("--set", nargs="*", default=[], metavar="FIELD=VALUE", help="override config fields, e.g. --set selector=entropy steps=20")
    train.add_argument("--no-resume", action="store_true", help="start over even if out_dir holds a checkpoint")
    args = parser.parse_args(argv)
    if args.command == "train":
        return _train(args, parser)
    if args.command == "demo":
        if args.chains < 1 or args.chain_len < 8:
            parser.error("--chains must be >= 1 and --chain-len >= 8")
        return _demo(args)
    return 1


if __name__ == "__main__":
    sys.exit(main())
