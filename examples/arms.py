"""The paper's four arms (Midpoint, Entropy, Probe-JS, Lens-Shift) at matched budgets, several seeds.

Every arm shares the tree construction (M chains, k siblings), data order, reward, optimizer and step count,
and differs only in the fork selector (seed 000 §5). For each arm and seed this runs ``bsb train`` in a fresh
process (each run starts its own vLLM engine when vLLM is installed), then writes:

* ``OUT/curves.png``: held-out accuracy (the paper's validation decoding) against step, mean over seeds with a 95% t-interval band;
* ``OUT/table.md``: start and final accuracy per arm (mean ± 95% t-interval over seeds), the final gain, tokens
  generated, probe cost as a fraction of the step, and each arm's final difference to Midpoint with a
  two-level (seed × question) paired bootstrap 95% interval;
* ``OUT/<arm>-s<seed>/metrics.jsonl`` for every run (resumable: rerunning skips finished runs).

Usage (the embedded default on a CPU; about a minute or two per run):

    python examples/arms.py --seeds 0 1 2 --steps 24 --out runs/arms
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import yaml

from bsb.eval.bootstrap import two_level
from bsb.eval.figures import curves
from bsb.train.config import TrainConfig

ARMS = ("midpoint", "entropy", "probe_js", "lens_shift")
T95 = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26}


def half_width(xs) -> float:
    xs = np.asarray(xs, dtype=float)
    return float(T95.get(len(xs) - 1, 1.96) * xs.std(ddof=1) / math.sqrt(len(xs))) if len(xs) > 1 else float("nan")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--arms", nargs="*", default=list(ARMS))
    ap.add_argument("--seeds", nargs="*", type=int, default=[0, 1, 2])
    ap.add_argument("--steps", type=int, default=24)
    ap.add_argument("--val-every", type=int, default=4)
    ap.add_argument("--out", default="runs/arms")
    ap.add_argument("--set", nargs="*", default=[], metavar="FIELD=VALUE", help="config overrides shared by every arm")
    args = ap.parse_args(argv)
    from bsb.train.config import parse_overrides

    out = Path(args.out)
    shared = dict(steps=args.steps, val_every=args.val_every, save_every=0, progress=False, **parse_overrides(args.set))
    runs = {}
    for arm in args.arms:
        for seed in args.seeds:
            run_dir = out / f"{arm}-s{seed}"
            metrics = run_dir / "metrics.jsonl"
            rows = [json.loads(x) for x in metrics.read_text().splitlines()] if metrics.exists() else []
            if not rows or rows[-1]["step"] < args.steps:
                cfg = TrainConfig.from_dict({**shared, "selector": arm, "seed": seed, "out_dir": str(run_dir)})
                run_dir.mkdir(parents=True, exist_ok=True)
                (run_dir / "arm.yaml").write_text(yaml.safe_dump(cfg.to_dict()))
                print(f"--- {arm}, seed {seed}", flush=True)
                subprocess.run([sys.executable, "-m", "bsb.cli", "train", "--no-resume", "--config", str(run_dir / "arm.yaml")], check=True)
                rows = [json.loads(x) for x in metrics.read_text().splitlines()]
            runs[(arm, seed)] = rows

    series, lines, finals = {}, [], {}
    head = ("| arm | start acc | final acc (± 95% t) | gain | tokens generated / step | probe share of step | final − midpoint [95% CI, two-level] |")
    lines += [f"# Arms at matched budgets: {args.steps} steps, seeds {args.seeds}", "", head, "|---|---:|---:|---:|---:|---:|---:|"]
    for arm in args.arms:
        vals = [[r for r in runs[(arm, s)] if "val_accuracy" in r] for s in args.seeds]
        steps = [r["step"] for r in vals[0]]
        acc = np.array([[r["val_accuracy"] for r in v] for v in vals])  # (seeds, checkpoints)
        series[arm] = (steps, acc.mean(0).tolist(), [half_width(acc[:, j]) if len(args.seeds) > 1 else 0.0 for j in range(acc.shape[1])])
        finals[arm] = np.array([np.asarray(v[-1]["val_correct"]) / v[-1]["val_samples"] for v in vals])  # (seeds, questions)
        train_rows = [r for s in args.seeds for r in runs[(arm, s)] if "tokens_generated" in r]
        tok = np.mean([r["tokens_generated"] for r in train_rows])
        probe = np.mean([r["probe_frac"] for r in train_rows])
        ci = str(two_level(finals[arm], finals["midpoint"])) if "midpoint" in finals and arm != "midpoint" else ""
        lines.append(f"| {arm} | {acc[:, 0].mean():.3f} | {acc[:, -1].mean():.3f} ± {half_width(acc[:, -1]):.3f} | "
                     f"{acc[:, -1].mean() - acc[:, 0].mean():+.3f} | {tok:.0f} | {probe:.3f} | {ci} |")
    (out / "table.md").write_text("\n".join(lines) + "\n")
    curves(out / "curves.png", series, xlabel="training step", ylabel="held-out accuracy (T=1.0, top-p 0.95)",
           title=f"four arms, {len(args.seeds)} seeds (mean, 95% t band)")
    print("\n".join(lines))
    print(f"figure: {out / 'curves.png'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
