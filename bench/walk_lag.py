"""Where does a walk model's probe belief move around a wrong step, and does it copy an earlier symbol?

``python bench/walk_lag.py [MODEL] [--n 200]`` (default: the embedded walk model). On constructed ``wrong`` chains of
held-out-style problems (one wrong successor at line s, the walk carried on from it), the probe belief is read after
``=>`` at every boundary j (after j lines). It prints

- the mean JS(b_j, b_{j+1}) at j - s = -3..+3 against elsewhere: the value moves across the step after boundary s,
  so a belief without lag moves most at offset 0;
- the belief in the gold answer and in the chain's own final answer at boundaries s - 1 .. s + 2;
- where the walk's true end differs from the symbol of the latest line of the answer's phase (count = 1 mod the
  cycle's length, 3): how often the belief's top answer is each (the phase-copy shortcut behind a lag).
"""

from __future__ import annotations

import argparse
import random

import torch
import transformers

from bsb.embedded.model import resolve_model
from bsb.tasks.synthetic import walk as W


def js(p: torch.Tensor, q: torch.Tensor) -> float:
    m = 0.5 * (p + q)
    kl = lambda a, b: float((a * (a.clamp_min(1e-12).log() - b.clamp_min(1e-12).log())).sum())  # noqa: E731
    return 0.5 * kl(p, m) + 0.5 * kl(q, m)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", nargs="?", default="embedded")
    ap.add_argument("--n", type=int, default=200, help="wrong chains")
    ap.add_argument("--seed", type=int, default=99)
    args = ap.parse_args()
    path = resolve_model(args.model)
    tok = transformers.AutoTokenizer.from_pretrained(path)
    model = transformers.AutoModelForCausalLM.from_pretrained(path).eval()
    sym = [tok.convert_tokens_to_ids(s) for s in W.SYMBOLS]
    rng, ops = random.Random(args.seed), W.WalkTask().ops
    offsets = {k: [] for k in range(-3, 4)}
    elsewhere, gold, own, copy = [], {k: [] for k in range(-1, 3)}, {k: [] for k in range(-1, 3)}, [0, 0, 0]
    for _ in range(args.n):
        p = W.make_problem(rng, rng.choice(ops))
        c = W.make_chain(p, rng, "wrong")
        texts = [p.prompt + "".join(line + "\n" for line in c.lines[:j]) + W.SUFFIX for j in range(len(c.lines) + 1)]
        enc = [tok.encode(t, add_special_tokens=False) for t in texts]
        width = max(map(len, enc))
        ids = torch.tensor([[tok.pad_token_id] * (width - len(e)) + e for e in enc])
        with torch.no_grad():
            logits = model(input_ids=ids, attention_mask=(ids != tok.pad_token_id).long()).logits[:, -1]
        b = logits[:, sym].float().softmax(-1)
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
            lines = c.lines[:j]
            phase = [ln for ln in lines if int(ln[:-3]) % 3 == 1]
            if not phase or phase[-1][-1] == c.final_answer or W.cycles(p.succ) != [3]:
                continue
            top = W.SYMBOLS[int(b[j].argmax())]
            copy[0] += 1
            copy[1] += top == c.final_answer
            copy[2] += top == phase[-1][-1]
    mean = lambda v: sum(v) / max(1, len(v))  # noqa: E731
    print(f"model {path}, {args.n} wrong chains")
    print(
        "mean JS(b_j, b_j+1) at j - s:",
        {k: round(mean(v), 3) for k, v in offsets.items()},
        "elsewhere",
        round(mean(elsewhere), 3),
    )
    print("belief in the gold answer at s+k:", {k: round(mean(v), 2) for k, v in gold.items()})
    print("belief in the chain's own final at s+k:", {k: round(mean(v), 2) for k, v in own.items()})
    if copy[0]:
        print(
            f"top answer where the two differ ({copy[0]} boundaries): the walk's end {copy[1] / copy[0]:.2f}, "
            f"the phase copy {copy[2] / copy[0]:.2f}"
        )


if __name__ == "__main__":
    main()
