"""A sweep's summary over seeds ([Fork] §5-7, App. A), from each config's validation rows: the seed-mean accuracy at
every validation step, the *single best-aggregate checkpoint* (the step with the best seed-mean accuracy; ties go to
the earlier step) and the final one with their 95% t-intervals over seeds, the 3-point moving average the figure draws,
and the differences against a reference config by the two-level (seed × question) paired bootstrap; and the table's
Markdown lines."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from bsb.eval.bootstrap import two_level


def moving_average(xs, width: int = 3) -> list[float]:
    """Centred moving average over ``width`` points; the ends average the points that exist."""
    h = width // 2
    return [float(np.mean(xs[max(0, i - h) : i + h + 1])) for i in range(len(xs))]


def half_width(xs) -> float:
    """The 95% t-interval's half width of the mean of ``xs``: t_{0.975, n-1} · s / sqrt(n), exact for any n."""
    from scipy.stats import t

    xs = np.asarray(xs, dtype=float)
    if len(xs) < 2:
        return float("nan")
    return float(t.ppf(0.975, len(xs) - 1) * xs.std(ddof=1) / math.sqrt(len(xs)))


def step_mean(rows: Sequence[dict], field: str) -> float:
    """The mean of ``field`` over a run's training steps (rows with a rollout) where it is a finite number (NaN:
    none)."""
    xs = [float(r[field]) for r in rows if "rollout" in r and finite(r.get(field))]
    return sum(xs) / len(xs) if xs else math.nan


def seed_interval(values: Sequence[float]) -> tuple[float, float]:
    """(mean, 95% t half-width) of the finite ``values`` (one per seed); NaN where there are none (or one, for the
    half-width)."""
    xs = [v for v in values if finite(v)]
    return (sum(xs) / len(xs) if xs else math.nan), half_width(xs)


def interval_text(mean: float, hw: float) -> str:
    """``mean ± hw`` (``mean`` alone without an interval, empty without a mean)."""
    if math.isnan(mean):
        return ""
    return f"{mean:.3f}" if math.isnan(hw) else f"{mean:.3f} ± {hw:.3f}"


def finite(x) -> bool:
    """A number that is not NaN or infinite (a boolean is no number)."""
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def config_summary(name: str, vals: Sequence[Sequence[dict]]) -> dict:
    """One config's summary from each seed's validation rows (``step``, ``val_accuracy``, ``val_correct``,
    ``val_samples``); ``correct`` (seeds, checkpoints, questions) and ``best_index`` feed the differences."""
    steps = [x["step"] for x in vals[0]]
    if any([x["step"] for x in v] != steps for v in vals):
        raise ValueError(f"{name}: its seeds validated at different steps")
    acc = np.array([[x["val_accuracy"] for x in v] for v in vals])  # (seeds, checkpoints)
    mean = acc.mean(0)
    best = int(np.argmax(mean))  # the first maximum: ties go to the earlier step
    return {
        "steps": steps,
        "mean": mean.tolist(),
        "best_step": steps[best],
        "best": float(mean[best]),
        "best_hw": half_width(acc[:, best]),
        "final": float(mean[-1]),
        "final_hw": half_width(acc[:, -1]),
        "correct": np.array([[np.asarray(x["val_correct"]) / x["val_samples"] for x in v] for v in vals]),
        "best_index": best,
    }


def add_differences(configs: dict[str, dict], reference: str, resamples: int) -> None:
    """Each config's ``diff_final`` (final − the reference's final) and ``diff_best`` (its best − the reference's best)
    as interval text; empty for the reference itself."""
    ref = configs[reference]
    for name, r in configs.items():
        if name == reference:
            r["diff_final"] = r["diff_best"] = ""
            continue
        r["diff_final"] = str(two_level(r["correct"][:, -1], ref["correct"][:, -1], resamples))
        r["diff_best"] = str(
            two_level(r["correct"][:, r["best_index"]], ref["correct"][:, ref["best_index"]], resamples)
        )


def table_lines(configs: dict[str, dict], reference: str, seeds: Sequence[int]) -> list[str]:
    """``table.md``: each config's start, best-aggregate and final accuracy, its mean fork yield (``fork_yield``,
    ``fork_yield_hw``), the differences, and where each config's best-aggregate weights were kept
    (``best_weights``: per seed, the folder or None)."""
    lines = [
        f"# Sweep: {len(configs)} configs × seeds {list(seeds)}; reference {reference}",
        "",
        f"| config | start | best-aggregate (step) | final | fork yield | final − {reference} [95% CI, two-level] "
        f"| best − {reference} best [95% CI] |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, r in configs.items():
        lines.append(
            f"| {name} | {r['mean'][0]:.3f} | {interval_text(r['best'], r['best_hw'])} ({r['best_step']}) | "
            f"{interval_text(r['final'], r['final_hw'])} | {interval_text(r['fork_yield'], r['fork_yield_hw'])} | "
            f"{r['diff_final']} | {r['diff_best']} |"
        )
    lines += [
        "",
        "Accuracy on the held-out set at the validation decoding, mean over seeds ± 95% t-interval. Best-aggregate: "
        "the single validation step with the best seed-mean accuracy (ties: the earlier step); differences use the "
        "two-level (seed × question) paired bootstrap. Fork yield: the share of a step's forks whose leaves' "
        "correctness differs, each run's mean over its training steps, then mean ± 95% t-interval over seeds "
        "(empty without forks: flat rollouts).",
        "",
        "Best-aggregate weights (`bsb export RUN --step S`, or `--best` where the run's own best is that step):",
    ]
    for name, r in configs.items():
        where = [w for w in r["best_weights"] if w]
        lines.append(
            f"- {name}, step {r['best_step']}: kept in {len(where)} of {len(r['best_weights'])} runs"
            + (
                f" ({where[0]}, ...)"
                if where
                else " (train with keep_last: -1 to keep every validation step's weights)"
            )
        )
    return lines


def run_lines(runs: Sequence[tuple[str, int, Sequence[dict]]]) -> list[str]:
    """One row per run ``(config, seed, metrics rows)``: its start, best (the first maximum) and final held-out
    accuracy, the tokens it generated, the token positions its update forwarded and back-propagated
    (``update_tokens``: prompts and responses of the rows with a non-zero advantage), its mean probe share, its fork
    yield by selector-score tercile (low / mid / high: each the mean over the steps with scored forks there; "-"
    where a run scores none, as flat and the stopping-time tree), its mean step time and its training hours."""
    lines = [
        "| run | start | best (step) | final | generated | update positions | probe share "
        "| fork yield low / mid / high | s a step | train h |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, seed, rows in runs:
        vals = [(r["step"], r["val_accuracy"]) for r in rows if "val_accuracy" in r]
        train = [r for r in rows if "rollout" in r]
        if not vals:
            continue
        step, best = max(vals, key=lambda v: (v[1], -v[0]))
        total = sum(float(r.get("time_step", 0.0)) for r in train)
        lines.append(
            f"| {name}-s{seed} | {vals[0][1]:.3f} | {best:.3f} ({step}) | {vals[-1][1]:.3f} | "
            f"{sum(int(r.get('tokens_generated', 0)) for r in train):,} | "
            f"{sum(int(r.get('update_tokens', 0)) for r in train):,} | {step_mean(train, 'probe_frac'):.3f} | "
            f"{_tercile_yields(train)} | {step_mean(train, 'time_step'):.0f} | {total / 3600:.2f} |"
        )
    return lines


def _tercile_yields(rows: Sequence[dict]) -> str:
    yields = [step_mean(rows, f"fork_yield_{t}") for t in ("low", "mid", "high")]
    return " / ".join("-" if math.isnan(y) else f"{y:.2f}" for y in yields)


def figure_series(configs: dict[str, dict]) -> tuple[dict, dict, dict]:
    """What the sweep's figure draws per config: the raw seed-mean curve and its moving average as (steps, values),
    and the best-aggregate point (step, accuracy)."""
    raw = {n: (r["steps"], r["mean"]) for n, r in configs.items()}
    smooth = {n: (r["steps"], moving_average(r["mean"])) for n, r in configs.items()}
    best = {n: (r["best_step"], r["best"]) for n, r in configs.items()}
    return raw, smooth, best
