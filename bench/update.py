"""The update, per path against tree-packed, side by side in one run (``update_packing``, docs/performance.md).

    python bench/update.py [--smoke] [--layers N] [--lens 1024 2048] [--trees T] [--steps S] [--json FILE]

1. **Paper-shaped trees** on a Qwen3-0.6B-shaped random model (width, heads, MLP and vocabulary of Qwen3-0.6B;
   ``--layers`` of its 28, fewer on a CPU): T trees of M = 4 chains and k = 2 siblings, prompts of 200 tokens, chains
   of each ``--lens`` length, forks at the chain's midpoint or in its first tenth. One mini-batch's loss forward and
   backward (the update's work on those rows), per path and tree-packed: token-forwards, time, peak memory (CUDA).
2. **The mask build** per fork-group size (``--mask-tokens``, unique tokens of one tree of four fork groups): the
   host-built reference masks (the build before 2026-12-06) against the vectorised build on the device, and the
   whole pack (indices included); on CUDA also the flex_attention block masks.
   Beside each case, the two packings' gradients: their largest difference relative to the largest gradient entry
   (the tree-packed attention, flex on CUDA, against the per-path one, on the same rows and weights).
   ``--olmo-window W`` adds the case on an OLMo-3-shaped model whose sliding layers see ``W`` keys (OLMo-3's
   pattern: three sliding layers, then a full one), so the tree-packed masks are cut by the window.
   ``--mem-tokens N``: one checkpointed per-path row of ``N`` tokens, its measured peak beside the activation model's
   figure (:func:`bsb.engine.activations.update_activation_bytes`; CUDA's ``max_memory_allocated``, less the
   gradients; on the CPU the figure alone).
3. **The embedded default**: ``--steps`` whole training steps of each CPU arm (configs/cpu/arms: Midpoint, Probe-JS,
   Lens-Shift, Entropy) with each packing, the update phase timed separately (``time_update``), with the arm's mean
   fork position (as a fraction of its chain) beside it.

Every row prints the ratios path / tree: the token-forward ratio and the time ratio (the saving realised).
``--smoke``: toy sizes, seconds (a test runs it). ``--mask-tokens`` with no sizes skips the mask build.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

import torch
import transformers

from bsb.engine.device import autocast
from bsb.train import update
from bsb.train.config import TrainConfig
from bsb.train.run_plan import resolve_plan
from bsb.train.tree_pack import _segments, _tree_mask, _window, pack_trees, reference_tree_mask, tree_attention_on

sys.path.insert(0, str(Path(__file__).resolve().parent))
from inputs import QWEN3_06B  # noqa: E402  (bench/ beside this script)

SMOKE = dict(
    vocab_size=64,
    hidden_size=32,
    intermediate_size=64,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=8,
    max_position_embeddings=4096,
    tie_word_embeddings=True,
)


def model_of(shape: dict, layers: int, device: torch.device, window: int | None = None):
    """A random model of ``shape``: Qwen3's, or with ``window`` OLMo-3's (three sliding layers of ``window`` keys,
    then a full one)."""
    torch.manual_seed(0)
    if window is None:
        cfg = transformers.Qwen3Config(num_hidden_layers=layers, **shape)
    else:
        kinds = ["full_attention" if i % 4 == 3 else "sliding_attention" for i in range(layers)]
        olmo = {k: v for k, v in shape.items() if k != "head_dim"}
        cfg = transformers.Olmo3Config(num_hidden_layers=layers, sliding_window=window, layer_types=kinds,
                                       bos_token_id=None, eos_token_id=None, pad_token_id=None, **olmo)
    return transformers.AutoModelForCausalLM.from_config(cfg).float().to(device).train()


def _grads(model) -> torch.Tensor:
    return torch.cat([p.grad.detach().flatten().float() for p in model.parameters() if p.grad is not None])


def paper_rows(trees: int, prompt: int, length: int, forks: str, vocab: int, seed: int = 0) -> list[update.Row]:
    """Rows of ``trees`` trees: M = 4 chains of ``length`` tokens (±10%), each forked at its midpoint (``mid``, ±5% of
    the chain) or in its first tenth (``early``) into the root's ending and k = 2 siblings of about its length."""
    rng = random.Random(seed)
    ids = lambda n: [rng.randrange(3, vocab) for _ in range(n)]  # noqa: E731
    rows = []
    for q in range(trees):
        p = ids(prompt)
        for group in range(4):
            n = int(length * rng.uniform(0.9, 1.1))
            cut = int(n * (rng.uniform(0.45, 0.55) if forks == "mid" else rng.uniform(0.01, 0.1)))
            pre = ids(cut)
            for _ in range(3):  # the root's own ending and k = 2 siblings
                resp = pre + ids(max(1, int((n - cut) * rng.uniform(0.9, 1.1))))
                adv = torch.full((len(resp),), rng.choice([-1.0, 1.0]))
                rows.append(update.Row(p, resp, adv, q, group, cut))
    return rows


def one_minibatch(model, rows, packing: str, micro_batch: int, dtype: torch.dtype = torch.float32) -> dict:
    """The update's loss forward and backward over every row (one mini-batch), timed, under the update's autocast in
    ``dtype`` (fp32 master weights, as the trainer runs it); the tokens it computed."""
    cfg = TrainConfig(update_packing=packing, micro_batch=micro_batch)
    device = next(model.parameters()).device
    model.zero_grad(set_to_none=True)
    tally = update._Tally()
    n_tokens = sum(len(r.response) for r in rows)
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    with tree_attention_on(model) if packing == "tree" else _Nothing(), autocast(device, dtype):
        plan = resolve_plan(cfg, model)[0]
        update._backward(model, rows, list(range(len(rows))), cfg, plan, 0, n_tokens, len(rows), {}, tally)
    if device.type == "cuda":
        torch.cuda.synchronize()
    return {
        "time_s": time.perf_counter() - t0,
        "tokens": tally.tokens,
        "peak_gb": torch.cuda.max_memory_allocated() / 1e9 if device.type == "cuda" else None,
    }


class _Nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def paper_shape(args, device) -> list[dict]:
    shape = SMOKE if args.smoke else QWEN3_06B
    model = model_of(shape, args.layers, device)
    out = []
    for length in args.lens:
        for forks in args.forks:
            out.append(_case(model, args, f"chains {length}, forks {forks}", length, forks, shape["vocab_size"]))
            _print_row(out[-1])  # as it goes: a run cut off at its limit keeps its finished rows
    if args.mem_tokens:
        out.append(activation_row(model, args.mem_tokens, args.dtype))
        _print_memory(out[-1])
    if args.olmo_window:
        del model
        olmo = model_of(shape, 8, device, args.olmo_window)  # two of OLMo-3's blocks of four layers
        name = f"OLMo-3 window {args.olmo_window}, chains {args.lens[0]}"
        out.append(_case(olmo, args, name, args.lens[0], "mid", shape["vocab_size"]))
        _print_row(out[-1])
    return out


def _case(model, args, name: str, length: int, forks: str, vocab: int) -> dict:
    """One mini-batch per path and tree-packed on the same rows and weights: tokens, time, memory, and the largest
    gradient difference relative to the largest gradient entry."""
    rows = paper_rows(args.trees, args.prompt, length, forks, vocab)
    res, grads = {}, {}
    for packing in ("path", "tree"):
        one_minibatch(model, rows[:3], packing, args.micro_batch, args.dtype)  # warm-up
        res[packing] = one_minibatch(model, rows, packing, args.micro_batch, args.dtype)
        grads[packing] = _grads(model)
    scale = grads["path"].abs().max().item()
    diff = (grads["path"] - grads["tree"]).abs().max().item() / scale if scale else float("nan")
    return {**_ratios({"case": name, "rows": len(rows)}, res), "grad_rel_diff": diff}


def activation_row(model, tokens: int, dtype: torch.dtype) -> dict:
    """One per-path row of ``tokens`` tokens with gradient checkpointing, forward and backward under the update's
    autocast: CUDA's peak less what stood before and less the gradients, against the activation model's figure for
    that micro-batch (one process: fp32 layer inputs). The peak also holds what the model leaves out: autocast's bf16
    copies of the weights, the head's chunked log-probs, the allocator's rounding."""
    from bsb.engine.activations import update_activation_bytes

    device = next(model.parameters()).device
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    rng = random.Random(1)
    vocab, prompt = model.config.vocab_size, 16
    resp = [rng.randrange(3, vocab) for _ in range(tokens - prompt)]
    row = update.Row([rng.randrange(3, vocab) for _ in range(prompt)], resp, torch.ones(len(resp)), 0, 0, 0)
    model.zero_grad(set_to_none=True)
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated() if device.type == "cuda" else 0
    one_minibatch(model, [row], "path", 1, dtype)
    grads = sum(p.grad.numel() * p.grad.element_size() for p in model.parameters() if p.grad is not None)
    measured = torch.cuda.max_memory_allocated() - before - grads if device.type == "cuda" else None
    model.gradient_checkpointing_disable()
    name = "bfloat16" if dtype == torch.bfloat16 else "float32"
    predicted = update_activation_bytes(model.config, 1, tokens, True, dtype=name, input_bytes=4)
    return {"case": f"activations, 1 x {tokens:,}, checkpointed", "tokens": tokens, "predicted_gb": predicted / 1e9,
            "measured_gb": None if measured is None else measured / 1e9,
            "measured_over_predicted": None if measured is None else measured / predicted}  # fmt: skip


def _ratios(row: dict, res: dict) -> dict:
    path, tree = res["path"], res["tree"]
    return {
        **row,
        "tokens_path": path["tokens"],
        "tokens_tree": tree["tokens"],
        "token_ratio": path["tokens"] / tree["tokens"] if tree["tokens"] else float("nan"),
        "time_path_s": path["time_s"],
        "time_tree_s": tree["time_s"],
        "time_ratio": path["time_s"] / tree["time_s"] if tree["time_s"] else float("nan"),
        "peak_gb_path": path.get("peak_gb"),
        "peak_gb_tree": tree.get("peak_gb"),
    }


def _timed(fn, device, repeat: int = 3) -> float:
    """The best of ``repeat`` timings of ``fn()`` (synchronised on CUDA)."""
    best = float("inf")
    for _ in range(repeat):
        if device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t0)
    return best


def mask_build(args, device) -> list[dict]:
    """The tree mask built on the host segment by segment (before) and on the device by vectorised ops (after), per
    group size; a sliding window of 4,096 (OLMo-3's) made from it once; the whole pack with that window."""
    return [_mask_case(target, args.prompt, device) for target in args.mask_tokens]


def _mask_case(target: int, prompt: int, device) -> dict:
    length = max(8, (target - prompt) // 8)  # four fork groups of a root and two siblings: ~8 chain lengths
    rows = paper_rows(1, prompt, length, "mid", 1000)
    prompts, responses, cuts = [r.prompt for r in rows], [r.response for r in rows], [r.prefix_len for r in rows]
    segs, _ = _segments(prompts, responses, cuts)
    positions = pack_trees(prompts, responses, cuts).positions
    host = _timed(lambda: reference_tree_mask(segs, positions), torch.device("cpu"))
    moved = positions.to(device)
    dev = _timed(lambda: _tree_mask(segs, moved, device), device)
    levels = _tree_mask(segs, moved, device).levels
    window = _timed(lambda: [_window(lv, moved, 4096) for lv in levels], device)
    whole = _timed(lambda: pack_trees(prompts, responses, cuts, device, windows=(4096,)), device)
    row = {"case": f"mask, {positions.numel():,} tokens", "tokens": positions.numel(), "host_s": host,
           "device_s": dev, "ratio": host / dev, "window_s": window, "pack_s": whole}  # fmt: skip
    if device.type == "cuda":
        row["flex_s"] = _timed(lambda: pack_trees(prompts, responses, cuts, device, (4096,), "flex"), device)
    return row


def embedded_steps(args) -> list[dict]:
    """``--steps`` training steps of each CPU arm with each packing (the HF backend: the same trees for both as long
    as the weights agree, which they do to rounding)."""
    from bsb.train.trainer import Trainer

    arms = ["midpoint"] if args.smoke else args.arms
    out = []
    for arm in arms:
        res = {}
        for packing in ("path", "tree"):
            with tempfile.TemporaryDirectory() as tmp:
                extra = (
                    dict(
                        gen_prompts=2,
                        prompts_per_step=2,
                        chains=2,
                        siblings=1,
                        max_response_len=48,
                        val_problems=2,
                        dynamic_sampling=False,
                    )
                    if args.smoke
                    else {}
                )
                cfg = TrainConfig.from_yaml(Path(__file__).parent.parent / "configs" / "cpu" / "arms" / f"{arm}.yaml")
                cfg = TrainConfig(
                    **{
                        **cfg.__dict__,
                        **extra,
                        "steps": args.steps,
                        "val_every": 0,
                        "backend": "hf",
                        "out_dir": tmp,
                        "update_packing": packing,
                        "keep_last": 0,
                        "save_every": 0,
                    }
                )
                rows = [r for r in Trainer(cfg).run() if "update_tokens" in r]
            res[packing] = {
                "tokens": sum(r["update_tokens"] for r in rows),
                "time_s": sum(r["time_update"] for r in rows),
                "fork_rel": sum(r["fork_rel_mean"] for r in rows) / len(rows),
            }
        out.append(_ratios({"case": f"embedded {arm}", "fork_rel_mean": res["tree"]["fork_rel"]}, res))
    return out


def _print_row(r: dict) -> None:
    peak = "" if r.get("peak_gb_path") is None else f"{r['peak_gb_path']:.1f} / {r['peak_gb_tree']:.1f}"
    fork = f"  (forks at {r['fork_rel_mean']:.2f})" if "fork_rel_mean" in r else ""
    grad = f"  gradients differ by {r['grad_rel_diff']:.1e} of the largest" if "grad_rel_diff" in r else ""
    print(
        f"{r['case']:32} {r['tokens_path']:>12,} {r['tokens_tree']:>9,} {r['token_ratio']:>6.2f} "
        f"{r['time_path_s']:>9.2f}s {r['time_tree_s']:>7.2f}s {r['time_ratio']:>6.2f}  {peak}{fork}{grad}",
        flush=True,
    )


def _print_memory(r: dict) -> None:
    measured = "not measured (no CUDA)" if r["measured_gb"] is None else (
        f"measured {r['measured_gb']:.3f} GB, {r['measured_over_predicted']:.2f}x")  # fmt: skip
    print(f"{r['case']:32} the activation model {r['predicted_gb']:.3f} GB, {measured}", flush=True)


def main(argv=None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke", action="store_true", help="toy sizes on the CPU (seconds)")
    ap.add_argument(
        "--layers", type=int, default=None, help="decoder layers (Qwen3-0.6B has 28; default 28 on CUDA, 2 on the CPU)"
    )
    ap.add_argument("--lens", type=int, nargs="+", default=None, help="chain lengths (default 1024 2048)")
    ap.add_argument("--trees", type=int, default=1, help="trees in the mini-batch (12 rows each)")
    ap.add_argument("--prompt", type=int, default=200, help="prompt tokens")
    ap.add_argument("--micro-batch", type=int, default=12, help="rows per forward/backward")
    ap.add_argument("--forks", nargs="+", default=["mid", "early"], choices=["mid", "early"], help="fork placements")
    ap.add_argument("--steps", type=int, default=3, help="training steps of each embedded arm (0: skip)")
    ap.add_argument(
        "--arms",
        nargs="+",
        default=["midpoint", "probe_js", "lens_shift", "entropy"],
        help="embedded arms (configs/cpu/arms)",
    )
    ap.add_argument("--skip-paper", action="store_true", help="only the embedded arms")
    ap.add_argument(
        "--mask-tokens", type=int, nargs="*", default=None, help="mask build group sizes (default 9000 25000 45000)"
    )
    ap.add_argument("--olmo-window", type=int, default=None, help="add the case on an OLMo-3 shape with this window")
    ap.add_argument("--mem-tokens", type=int, default=None, help="one checkpointed row of this length, measured")
    ap.add_argument("--json", default=None, help="write the rows here")
    ap.add_argument(
        "--dtype", default=None, choices=["float32", "bfloat16"], help="the update's autocast (default bf16 on CUDA)"
    )
    args = ap.parse_args(argv)
    device = torch.device("cuda" if torch.cuda.is_available() and not args.smoke else "cpu")
    args.layers = args.layers or (2 if args.smoke or device.type == "cpu" else 28)
    args.dtype = getattr(torch, args.dtype or ("bfloat16" if device.type == "cuda" else "float32"))
    args.lens = args.lens or ([64, 128] if args.smoke else [1024, 2048])
    if args.mask_tokens is None:
        args.mask_tokens = [300] if args.smoke else [9000, 25000, 45000]
    if args.smoke:
        args.prompt, args.steps = 16, min(args.steps, 1)
    masks = mask_build(args, device)
    print(
        f"{'mask build':32} {'tokens':>9} {'host (before)':>14} {'device (after)':>15} {'ratio':>6} {'a window':>9} "
        f"{'whole pack':>11}"
    )
    for m in masks:
        flex = f"  flex block masks {m['flex_s']:.3f}s" if "flex_s" in m else ""
        print(
            f"{m['case']:32} {m['tokens']:>9,} {m['host_s']:>13.3f}s {m['device_s']:>14.3f}s {m['ratio']:>6.2f} "
            f"{m['window_s']:>8.3f}s {m['pack_s']:>10.3f}s{flex}",
            flush=True,
        )
    print(
        f"{'case':32} {'tokens path':>12} {'tree':>9} {'ratio':>6} {'time path':>10} {'tree':>8} {'ratio':>6}  peak GB"
        f"  ({args.dtype})",
        flush=True,
    )
    rows = [] if args.skip_paper else paper_shape(args, device)
    if args.steps:
        for r in embedded_steps(args):
            rows.append(r)
            _print_row(r)
    if args.json:
        doc = {"device": str(device), "layers": args.layers, "dtype": str(args.dtype), "rows": rows, "masks": masks}
        Path(args.json).write_text(json.dumps(doc, indent=1))
    return rows


if __name__ == "__main__":
    main()
