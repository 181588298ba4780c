"""``bsb report``'s one figure: a run's curves over its training steps, or a sweep's arms side by side with their
intervals (the numbers are :mod:`bsb.eval.report`'s)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from bsb.eval.figures import _plt, _save
from bsb.eval.report import TIME_SPLIT, Run, arm_summary, fork_fractions, series

TERCILE_LINES = (
    ("fork_yield", "all forks", "-"),
    ("fork_yield_low", "low score tercile", ":"),
    ("fork_yield_mid", "middle", "--"),
    ("fork_yield_high", "high", "-."),
)
BINS = np.linspace(0.0, 1.0, 21)


def run_figure(path: str | Path, run: Run) -> Path:
    """Six panels over the training steps: held-out and training accuracy and reward; fork yield and its tercile
    split; the fork positions (every step's, pooled); the probe's share of the step; the step's time split; the
    |advantage| on prefix nodes and after the fork, with the refill and fallback rates."""
    plt = _plt()
    fig, axes = plt.subplots(2, 3, figsize=(15, 7.5))
    ax = axes[0, 0]
    ax.plot(*series(run.vals, "val_accuracy"), "o-", lw=2, label="held-out accuracy")
    ax.plot(*series(run.steps, "accuracy"), lw=1, alpha=0.7, label="training accuracy")
    ax.plot(*series(run.steps, "reward_mean"), lw=1, alpha=0.7, label="training reward")
    _finish(ax, "accuracy and reward", "")
    ax = axes[0, 1]
    for field, label, style in TERCILE_LINES:
        ax.plot(*series(run.steps, field), style, marker=".", lw=2 if field == "fork_yield" else 1, label=label)
    ax.plot(*series(run.steps, "fork_yield_reward"), color="grey", lw=1, label="all forks, by reward")
    ax.set_ylim(-0.03, 1.03)
    _finish(ax, "fork yield: share of forks whose leaves disagree", "share")
    ax = axes[0, 2]
    fracs = fork_fractions(run)
    ax.hist(fracs, bins=BINS, color="tab:blue", alpha=0.8)
    ax.set_xlabel("fork position / chain length")
    ax.set_title(f"fork positions ({len(fracs)} forks, all steps)", fontsize=10)
    ax = axes[1, 0]
    ax.plot(*series(run.steps, "probe_frac"), "o-", ms=3)
    _finish(ax, "probe share of the step (probe_frac)", "share", legend=False)
    ax = axes[1, 1]
    steps = [r["step"] for r in run.steps]
    bottom = np.zeros(len(steps))
    for field, label in TIME_SPLIT:
        values = np.array([float(r.get(field, 0.0) or 0.0) for r in run.steps])
        ax.bar(steps, values, bottom=bottom, label=label)
        bottom += values
    total = [float(r.get("time_step", 0.0)) for r in run.steps]
    ax.plot(steps, total, "k_", ms=12, label="whole step")
    _finish(ax, "the step's time split", "seconds")
    ax = axes[1, 2]
    ax.plot(*series(run.steps, "adv_abs_prefix"), "o-", ms=3, label="mean |A|, prefix nodes")
    ax.plot(*series(run.steps, "adv_abs_leaf"), "s-", ms=3, label="mean |A|, after the fork")
    ax.plot(*series(run.steps, "refill_rate"), ":", label="refills per chain")
    ax.plot(*series(run.steps, "fallback_rate"), "--", label="fallbacks per fork")
    _finish(ax, "credit and refills", "")
    fig.suptitle(f"{run.name}: {len(run.steps)} training steps", fontsize=11)
    fig.tight_layout()
    return _save(plt, fig, path)


def sweep_figure(path: str | Path, runs: list[Run]) -> Path:
    """Four panels, one colour per arm: the held-out accuracy (mean over seeds, the 95% t band); fork yield and its
    tercile split (mean ± interval); the fork positions (every run's, pooled); the step's time split with the probe's
    share."""
    from bsb.eval.sweep_summary import half_width

    plt = _plt()
    summary = arm_summary(runs)
    arms = list(summary)
    fig, axes = plt.subplots(2, 2, figsize=(13, 8))
    ax = axes[0, 0]
    for arm in arms:
        curves = [dict(zip(*series(r.vals, "val_accuracy"))) for r in runs if r.arm == arm]
        steps = sorted(set.intersection(*(set(c) for c in curves))) if curves else []
        mean = np.array([np.mean([c[s] for c in curves]) for s in steps])
        hw = np.array([half_width([c[s] for c in curves]) for s in steps])
        (line,) = ax.plot(steps, mean, "o-", lw=2, ms=3, label=arm)
        if len(curves) > 1:
            ax.fill_between(steps, mean - hw, mean + hw, color=line.get_color(), alpha=0.15)
    _finish(ax, "held-out accuracy (mean over seeds, 95% band)", "accuracy")
    ax = axes[0, 1]
    fields = [f for f, _, _ in TERCILE_LINES]
    width = 0.8 / len(fields)
    x = np.arange(len(arms))
    for j, (field, label, _) in enumerate(TERCILE_LINES):
        means = [summary[a][field][0] for a in arms]
        errs = [0.0 if np.isnan(summary[a][field][1]) else summary[a][field][1] for a in arms]
        ax.bar(x + (j - (len(fields) - 1) / 2) * width, means, width, yerr=errs, capsize=2, label=label)
    ax.set_xticks(x, arms)
    ax.set_xlabel("arm")
    ax.set_ylim(0, 1.03)
    _finish(ax, "fork yield by selector-score tercile (mean ± 95% CI)", "share")
    ax = axes[1, 0]
    for arm in arms:
        fracs = [f for r in runs if r.arm == arm for f in fork_fractions(r)]
        if fracs:
            ax.hist(fracs, bins=BINS, histtype="step", lw=2, density=True, label=f"{arm} ({len(fracs)})")
    ax.set_xlabel("fork position / chain length")
    _finish(ax, "fork positions (all runs and steps, density)", "density")
    ax = axes[1, 1]
    bottom = np.zeros(len(arms))
    for field, label in TIME_SPLIT:
        values = np.array([summary[a][field][0] for a in arms])
        values = np.nan_to_num(values)
        ax.bar(x, values, 0.6, bottom=bottom, label=label)
        bottom += values
    for i, a in enumerate(arms):
        share = summary[a]["probe_frac"][0]
        if not np.isnan(share):
            ax.annotate(f"probe {share:.0%}", (x[i], bottom[i]), ha="center", va="bottom", fontsize=8)
    ax.set_xticks(x, arms)
    ax.set_xlabel("arm")
    ax.set_ylim(0, max(1e-9, float(bottom.max(initial=0.0))) * 1.12)  # room for the probe's share above the bars
    _finish(ax, "the step's time split (mean s/step)", "seconds")
    fig.suptitle(f"sweep: {len(arms)} arms, {len(runs)} runs", fontsize=11)
    fig.tight_layout()
    return _save(plt, fig, path)


def _finish(ax, title: str, ylabel: str, legend: bool = True) -> None:
    ax.set_xlabel(ax.get_xlabel() or "training step")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    if legend and ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)
