"""What ``bsb report`` reads and tabulates: a training run's or a sweep's ``metrics.jsonl`` files, and nothing else (so
it reports on a run that is still going, and on runs copied from a cluster).

A *run* folder holds ``metrics.jsonl``; a *sweep* folder holds run folders, each named ``ARM-sSEED`` as ``bsb sweep``
names them (any other run folder is an arm of its own). Every statistic of :data:`STATS` is summarised per run as
its mean over the run's training steps (steps where it is defined), except the held-out accuracy, which is the
run's last validation. A sweep shows each arm's runs as their mean ± the 95% t-interval over seeds.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

from bsb.eval.sweep_summary import finite, interval_text, seed_interval, step_mean
from bsb.eval.table import markdown
from bsb.run_storage import numbered_metric_rows
from bsb.safe_io import LIMIT, number, step_number

METRICS = "metrics.jsonl"
SEEDED = re.compile(r"^(?P<arm>.+)-s(?P<seed>\d+)$")

FRACTION, AT_LEAST_0, ANY = (0, 1), (0, LIMIT), (-LIMIT, LIMIT)
# (metrics field, label, its range): what the table shows, in its order; every number the report reads is checked
# against its range when the row is read (NaN, the trainer's 'not defined at this step', passes)
STATS = (
    ("val_accuracy", "held-out accuracy", FRACTION),
    ("reward_mean", "reward (training leaves)", ANY),
    ("accuracy", "accuracy (training leaves)", FRACTION),
    ("no_answer_rate", "responses with no answer the task reads", FRACTION),
    ("fork_yield", "fork yield", FRACTION),
    ("fork_yield_reward", "fork yield by reward", FRACTION),
    ("fork_yield_low", "fork yield, low score tercile", FRACTION),
    ("fork_yield_mid", "fork yield, middle tercile", FRACTION),
    ("fork_yield_high", "fork yield, high tercile", FRACTION),
    ("fork_rel_mean", "fork position / chain length", FRACTION),
    ("adv_abs_prefix", "mean abs. advantage, prefix nodes", AT_LEAST_0),
    ("adv_abs_leaf", "mean abs. advantage after the fork", AT_LEAST_0),
    ("refill_rate", "refills per root chain", AT_LEAST_0),
    ("fallback_rate", "Midpoint fallbacks per fork", AT_LEAST_0),
    ("probe_frac", "probe share of the step", FRACTION),
    ("time_generate", "generate, s/step", AT_LEAST_0),
    ("time_select", "select (probe), s/step", AT_LEAST_0),
    ("time_update", "update, s/step", AT_LEAST_0),
    ("time_sync", "weight sync, s/step", AT_LEAST_0),
    ("time_step", "step, s", AT_LEAST_0),
)
# the step's time split the figure stacks: (field, label); the rollout's rest is scoring and dynamic sampling
TIME_SPLIT = (
    ("time_generate", "generate"),
    ("time_select", "select (probe)"),
    ("time_update", "update"),
    ("time_sync", "sync"),
)


@dataclass
class Run:
    name: str  # the folder's name
    arm: str  # the sweep arm (the folder name without -sSEED)
    rows: list[dict]

    @property
    def steps(self) -> list[dict]:
        """The training steps' rows (a validation-only row, step 0, has no rollout)."""
        return [r for r in self.rows if "rollout" in r]

    @property
    def vals(self) -> list[dict]:
        return [r for r in self.rows if "val_accuracy" in r]


def read_run(folder: Path) -> Run:
    path = folder / METRICS
    rows = [check_row(json.loads(line), f"{path}, line {n}") for n, line in numbered_metric_rows(path)]
    if not rows:
        raise ValueError(f"{path}: holds no rows yet (the run has not finished its first validation)")
    match = SEEDED.match(folder.name)
    return Run(folder.name, match["arm"] if match else folder.name, rows)


def read_runs(path: str | Path) -> tuple[str, list[Run]]:
    """``("run", [the run])`` for a run folder, ``("sweep", its runs)`` for a sweep folder; one error naming the path
    for anything else."""
    path = Path(path)
    if not path.exists():
        raise ValueError(f"{path}: no such folder")
    if not path.is_dir():
        raise ValueError(f"{path}: a file; bsb report reads a run folder (holding {METRICS}) or a sweep folder")
    if (path / METRICS).is_file():
        return "run", [read_run(path)]
    runs = sorted(p for p in path.iterdir() if (p / METRICS).is_file())
    if not runs:
        raise ValueError(f"{path}: holds no {METRICS} and no run folder with one (not a bsb train run or sweep)")
    started = [p for p in runs if numbered_metric_rows(p / METRICS)]  # a run just begun has no row yet: not drawn
    if not started:
        raise ValueError(f"{path}: none of its {len(runs)} runs has a row yet (they have not finished a validation)")
    return "sweep", [read_run(p) for p in started]


def check_row(row: dict, where: str) -> dict:
    """``row`` once every number the report reads from it is checked (:data:`STATS`' ranges, the step, each fork
    position a fraction); else one error naming ``where`` and the field."""
    step_number(row["step"], f"{where}: step")
    for field, _, (lo, hi) in STATS:
        if field in row:
            number(row[field], f"{where}: {field}", lo, hi, nan=True)
    fracs = row.get("fork_rel", [])
    if not isinstance(fracs, list):
        raise ValueError(f"{where}: fork_rel must be a list of fractions in [0, 1], got {fracs!r:.40}")
    for i, x in enumerate(fracs):
        number(x, f"{where}: fork_rel[{i}]", 0, 1)
    return row


def series(rows: list[dict], field: str) -> tuple[list[int], list[float]]:
    """(steps, values) of ``field`` where it is a finite number."""
    pts = [(r["step"], float(r[field])) for r in rows if finite(r.get(field))]
    return [s for s, _ in pts], [v for _, v in pts]


def run_value(run: Run, field: str) -> float:
    """A run's summary of ``field``: its last held-out accuracy, or the mean over its training steps."""
    if field == "val_accuracy":
        return series(run.vals, field)[1][-1] if run.vals else math.nan
    return step_mean(run.steps, field)


def fork_fractions(run: Run) -> list[float]:
    """Every recorded fork position of the run as a fraction of its chain (all steps pooled)."""
    return [float(f) for r in run.steps for f in r.get("fork_rel", [])]


def run_table(run: Run) -> list[str]:
    """The run's Markdown table: each statistic's steps, first, last and summary (:func:`run_value`)."""
    rows = []
    for field, label, _ in STATS:
        steps, values = series(run.vals if field == "val_accuracy" else run.steps, field)
        if not values:
            rows.append([label, "0", "", "", ""])
            continue
        rows.append([label, str(len(values)), _fmt(values[0]), _fmt(values[-1]), _fmt(run_value(run, field))])
    last = max(r["step"] for r in run.rows)
    return [
        f"# Run {run.name}: {len(run.steps)} training steps (last step {last})",
        "",
        *markdown(["statistic", "steps", "first", "last", "run (mean over steps; held-out: last)"], rows),
        "",
        "From metrics.jsonl alone. Fork statistics: docs/training.md, 'Fork statistics'.",
    ]


def arm_summary(runs: list[Run]) -> dict[str, dict[str, tuple[float, float, int]]]:
    """Per arm and statistic: (mean over its runs, 95% t half-width, runs with a value)."""
    arms: dict[str, list[Run]] = {}
    for run in runs:
        arms.setdefault(run.arm, []).append(run)
    out = {}
    for arm, mine in arms.items():
        out[arm] = {}
        for field, *_ in STATS:
            values = [run_value(r, field) for r in mine]
            out[arm][field] = (*seed_interval(values), sum(not math.isnan(v) for v in values))
    return out


SWEEP_COLUMNS = (
    "val_accuracy",
    "reward_mean",
    "fork_yield",
    "fork_yield_low",
    "fork_yield_mid",
    "fork_yield_high",
    "fork_rel_mean",
    "probe_frac",
    "time_step",
)


def sweep_table(runs: list[Run]) -> list[str]:
    """The sweep's Markdown table: one row per arm, mean ± 95% t-interval over its runs."""
    summary = arm_summary(runs)
    labels = {field: label for field, label, _ in STATS}
    rows = []
    for arm, stats in summary.items():
        n = sum(r.arm == arm for r in runs)
        rows.append([arm, str(n), *(interval_text(*stats[f][:2]) for f in SWEEP_COLUMNS)])
    return [
        f"# Sweep: {len(summary)} arms, {len(runs)} runs",
        "",
        *markdown(["arm", "runs", *(labels[f] for f in SWEEP_COLUMNS)], rows),
        "",
        "Mean over each arm's runs ± 95% t-interval over seeds (none with one run). Per run: the last held-out "
        "accuracy, and every other statistic's mean over its training steps. From metrics.jsonl alone.",
    ]


def _fmt(x: float) -> str:
    return "" if math.isnan(x) else f"{x:.3f}"
