"""The ``bsb`` command line."""

from __future__ import annotations

import argparse
import sys
import time


def _demo(args: argparse.Namespace) -> int:
    """Belief reads on a tiny randomly initialised Qwen3 model: Probe-JS and Lens-Shift scores per boundary."""
    import torch
    import transformers
    from rich.console import Console
    from rich.table import Table

    import bsb.kernels as K

    torch.manual_seed(args.seed)
    cfg = transformers.Qwen3Config(
        vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=4, num_attention_heads=2,
        num_key_value_heads=1, head_dim=64, max_position_embeddings=256, tie_word_embeddings=False,
    )
    model = transformers.AutoModelForCausalLM.from_config(cfg).eval()
    chain = torch.randint(0, cfg.vocab_size, (args.chain_len,))
    suffix = torch.randint(0, cfg.vocab_size, (6,))  # stands in for "So the final answer is \boxed{"
    answer = torch.randint(0, cfg.vocab_size, (2,))  # the chain's committed answer, teacher-forced
    boundaries = torch.linspace(4, args.chain_len, args.boundaries).round().long().tolist()

    t0 = time.perf_counter()
    reads, profiles = [], []
    with torch.no_grad():
        for t in boundaries:  # the paper's per-candidate re-forward (App. B); the engine will pack these
            ids = torch.cat([chain[:t], suffix, answer])[None]
            out = model(ids, output_hidden_states=True)
            read = t + len(suffix) - 1  # the position whose next token is the first answer token
            reads.append(out.logits[0, read])
            # hidden_states[1:] are the layer outputs; the last one is already normed by HF, so use a hook-free
            # pre-norm copy: every layer's residual stream at the answer positions.
            hs = torch.stack(out.hidden_states[1:])[:, 0, read : read + len(answer)]  # (layers, n, d)
            hs[-1] = pre_norm_last(model, ids)[read : read + len(answer)]
            lp = K.lens_logprobs(hs, model.model.norm.weight, model.lm_head.weight, answer, eps=cfg.rms_norm_eps)
            profiles.append(lp.sum(-1))  # b_t^(l): the answer's log-prob at every layer (Eq. 3)
    logits = torch.stack(reads)  # (B, V)
    scores = K.probe_js(logits, torch.zeros(len(boundaries), dtype=torch.long), k=20)
    shape, height, depth = K.lens_readouts(torch.stack(profiles))
    elapsed = time.perf_counter() - t0

    console = Console()
    tbl = Table(title=f"Belief reads on a random tiny Qwen3 ({len(boundaries)} boundaries, fork-before scores)")
    for col in ("boundary t", "top belief token (p)", "Probe-JS", "Lens shape", "Lens height", "Lens depth"):
        tbl.add_column(col, justify="right")
    top_lp, top_id = K.topk_logprobs(logits, 1)
    best = {name: int(torch.nan_to_num(s, nan=-1).argmax()) for name, s in (("js", scores), ("shape", shape))}

    def mark(s, name, j):
        return f"{float(s[j]):.4f}" + (" *" if best[name] == j else "")

    for j, t in enumerate(boundaries):
        tbl.add_row(str(t), f"{int(top_id[j, 0])} ({float(top_lp[j, 0].exp()):.3f})", mark(scores, "js", j),
                    mark(shape, "shape", j), f"{float(height[j]):.4f}", f"{float(depth[j]):.0f}")
    console.print(tbl)
    console.print(f"* = fork position of Probe-JS / Lens-Shift(shape). Ops served by: "
                  f"probe_js={K.implementation('probe_js')}, lens_logprobs={K.implementation('lens_logprobs')}. "
                  f"{elapsed:.2f}s.")
    return 0


def pre_norm_last(model, ids):
    """The residual stream after the last decoder layer (before the final norm), for one sequence."""
    captured = {}
    hook = model.model.layers[-1].register_forward_hook(
        lambda m, i, o: captured.setdefault("h", o[0] if isinstance(o, tuple) else o)
    )
    try:
        model(ids)
    finally:
        hook.remove()
    return captured["h"][0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bsb", description="Belief-shift branching for tree-structured RLVR")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="belief reads on the embedded default")
    demo.add_argument("--seed", type=int, default=0)
    demo.add_argument("--chain-len", type=int, default=96, help="tokens in the sampled chain")
    demo.add_argument("--boundaries", type=int, default=8, help="candidate boundaries to read")
    args = parser.parse_args(argv)
    if args.command == "demo":
        if args.boundaries < 2 or args.chain_len < 8:
            parser.error("--boundaries must be >= 2 and --chain-len >= 8")
        return _demo(args)
    return 1


if __name__ == "__main__":
    sys.exit(main())
