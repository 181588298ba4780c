"""Where does a walk model's probe belief move around a wrong step, and does it copy an earlier symbol?

``python bench/walk_lag.py [MODEL] [--n 200]`` (default: the embedded walk model). On constructed ``wrong`` chains of
held-out-style problems (one wrong successor at line s, the walk carried on from it), the probe belief is read after
``=>`` at every boundary j (after j lines). It prints

- the mean JS(b_j, b_{j+1}) at j - s = -3..+3 against elsewhere: the value moves across the step after boundary s,
  so a belief without lag moves most at offset 0;
- the belief in the gold answer and in the chain's own final answer at boundaries s - 1 .. s + 2;
- where the walk's true end differs from the symbol of the latest line of the answer's phase (count = 1 mod the
  cycle's length, 3): how often the belief's top answer is each (the phase-copy shortcut behind a lag);
- the thresholds a belief that follows the walk meets (:data:`TARGETS`), each with its measured figure; the exit status
  is 1 when one is missed.
"""

from __future__ import annotations

import argparse
import random

import torch
import transformers

from bsb.embedded.model import resolve_model
from bsb.tasks.synthetic import walk as W

# JS across the wrong line against one line later and elsewhere, the belief in the gold answer on correct prefixes
TARGETS = {"js_at_over_next": 3.0, "js_at_over_elsewhere": 5.0, "gold_before": 0.8}


def js(p: torch.Tensor, q: torch.Tensor) -> float:
    m = 0.5 * (p + q)
    kl = lambda a, b: float((a * (a.clamp_min(1e-12).log() - b.clamp_min(1e-12).log())).sum())  # noqa: E731
    return 0.5 * kl(p, m) + 0.5 * kl(q, m)


def _mean(v: list[float]) -> float:
    return sum(v) / max(1, len(v))


@torch.no_grad()
def beliefs(model, tok, prompt: str, lines: list[str]) -> torch.Tensor:
    """The next-token logits after ``=>`` at every boundary j = 0..len(lines) (after the prompt and j lines): the
    text ``prompt + lines[:j] + "=>"`` as the model reads it. The chain is forwarded once and each boundary's suffix
    read reuses its keys and values (row j of one batch sees the first j lines only, at its own positions), the
    arithmetic of one forward per text at a tenth of the cost; a chain whose pieces do not tokenize apart is read one
    text a row."""
    enc = lambda text: tok.encode(text, add_special_tokens=False)  # noqa: E731
    pieces, suffix = [enc(prompt)] + [enc(line + "\n") for line in lines], enc(W.SUFFIX)
    cuts = [sum(map(len, pieces[: j + 1])) for j in range(len(pieces))]
    texts = [prompt + "".join(line + "\n" for line in lines[:j]) + W.SUFFIX for j in range(len(pieces))]
    chain = [t for piece in pieces for t in piece]
    if any(enc(t) != chain[:cut] + suffix for t, cut in zip(texts, cuts)):
        rows = [enc(t) for t in texts]
        width = max(map(len, rows))
        ids = torch.tensor([[tok.pad_token_id] * (width - len(e)) + e for e in rows])
        return model(input_ids=ids, attention_mask=(ids != tok.pad_token_id).long()).logits[:, -1]
    cache = model(input_ids=torch.tensor([chain]), use_cache=True).past_key_values
    cache.batch_repeat_interleave(len(cuts))
    n, s = len(chain), len(suffix)
    mask = torch.zeros(len(cuts), n + s, dtype=torch.long)
    for j, cut in enumerate(cuts):
        mask[j, :cut] = 1
    mask[:, n:] = 1
    positions = torch.tensor(cuts)[:, None] + torch.arange(s)
    ids = torch.tensor([suffix] * len(cuts))
    return model(input_ids=ids, attention_mask=mask, position_ids=positions, past_key_values=cache).logits[:, -1]


@torch.no_grad()
def measure(path, n: int = 200, seed: int = 99) -> dict:
    """The lag figures of the walk model at ``path`` on ``n`` wrong chains drawn with ``seed``."""
    tok = transformers.AutoTokenizer.from_pretrained(path)
    model = transformers.AutoModelForCausalLM.from_pretrained(path).eval()
    sym = [tok.convert_tokens_to_ids(s) for s in W.SYMBOLS]
    rng, ops = random.Random(seed), W.WalkTask().ops
    offsets = {k: [] for k in range(-3, 4)}
    elsewhere, gold, own, copy = [], {k: [] for k in range(-1, 3)}, {k: [] for k in range(-1, 3)}, [0, 0, 0]
    for _ in range(n):
        p = W.make_problem(rng, rng.choice(ops))
        c = W.make_chain(p, rng, "wrong")
        b = beliefs(model, tok, p.prompt, c.lines)[:, sym].float().softmax(-1)
        s, scores = c.pivot_line, [js(b[j], b[j + 1]) for j in range(len(b) - 1)]
        for k in offsets:
            if 0 <= s + k < len(scores):
                offsets[k].append(scores[s + k])
        elsewhere += [x for j, x in enumerate(scores) if abs(j - s) > 3]
        for k in gold:
            if 0 <= s + k < len(b):
                gold[k].append(float(b[s + k, W.SYMBOLS.index(p.answer)]))
                own[k].append(float(b[s + k, W.SYMBOLS.index(c.final_answer)]))
        for j in range(s + 1, min(len(c.lines), s + 3) + 1):  # 1-3 lines after the slip
            phase = [ln for ln in c.lines[:j] if int(ln[:-3]) % 3 == 1]
            if not phase or phase[-1][-1] == c.final_answer:
                continue
            top = W.SYMBOLS[int(b[j].argmax())]
            copy[0] += 1
            copy[1] += top == c.final_answer
            copy[2] += top == phase[-1][-1]
    out = {
        "model": str(path),
        "chains": n,
        "js": {k: _mean(v) for k, v in offsets.items()},
        "js_elsewhere": _mean(elsewhere),
        "gold": {k: _mean(v) for k, v in gold.items()},
        "own": {k: _mean(v) for k, v in own.items()},
        "copy_boundaries": copy[0],
        "top_is_end": copy[1] / max(1, copy[0]),
        "top_is_phase_copy": copy[2] / max(1, copy[0]),
    }
    out["js_at_over_next"] = out["js"][0] / max(out["js"][1], 1e-12)
    out["js_at_over_elsewhere"] = out["js"][0] / max(out["js_elsewhere"], 1e-12)
    out["gold_before"] = min(out["gold"][-1], out["gold"][0])  # the two boundaries before the wrong line
    return out


def missed(figures: dict) -> list[str]:
    """The targets ``figures`` misses, each with its measured value (empty: all met)."""
    return [f"{k} {figures[k]:.2f} < {v}" for k, v in TARGETS.items() if not figures[k] >= v]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", nargs="?", default="embedded")
    ap.add_argument("--n", type=int, default=200, help="wrong chains")
    ap.add_argument("--seed", type=int, default=99)
    args = ap.parse_args(argv)
    if args.n < 1:
        ap.error(f"--n must be >= 1, got {args.n}")
    f = measure(resolve_model(args.model), args.n, args.seed)
    r = lambda d, k=3: {j: round(x, k) for j, x in d.items()}  # noqa: E731
    print(f"model {f['model']}, {f['chains']} wrong chains")
    print("mean JS(b_j, b_j+1) at j - s:", r(f["js"]), "elsewhere", round(f["js_elsewhere"], 3))
    print("belief in the gold answer at s+k:", r(f["gold"], 2))
    print("belief in the chain's own final at s+k:", r(f["own"], 2))
    if f["copy_boundaries"]:
        print(
            f"top answer where the two differ ({f['copy_boundaries']} boundaries): the walk's end "
            f"{f['top_is_end']:.2f}, the phase copy {f['top_is_phase_copy']:.2f}"
        )
    print(
        f"JS at the wrong line / one line later {f['js_at_over_next']:.1f}x (target >= {TARGETS['js_at_over_next']}), "
        f"/ elsewhere {f['js_at_over_elsewhere']:.1f}x (>= {TARGETS['js_at_over_elsewhere']}), "
        f"gold before {f['gold_before']:.2f} (>= {TARGETS['gold_before']})"
    )
    miss = missed(f)
    print("targets: " + ("all met" if not miss else "missed: " + "; ".join(miss)))
    return 1 if miss else 0


if __name__ == "__main__":
    raise SystemExit(main())
