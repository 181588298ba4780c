"""Figures: the per-chain case plot in the style of [Fork]'s Figure 1, the selector bar chart (Figure 3) and the
sweep's held-out accuracy over training steps (Figure 4). Files are written with matplotlib's Agg backend (no display
needed)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from bsb.safe_io import new_file


def _title(ax, text: str, size: int) -> None:
    """The axes' title, wrapped to the figure's width (a long run title would run past the edge)."""
    import textwrap

    ax.set_title(textwrap.fill(text, max(20, int(ax.figure.get_figwidth() * 90 / size))), fontsize=size)


MARKERS = "v^<>sPXD*ph"


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(plt, fig, path) -> Path:
    """Write ``fig`` at ``path`` in the format its suffix names (``.png`` added to a name without one, as matplotlib
    would) and return the path written; a folder is one error, not a figure beside it."""
    path = Path(path)
    if path.is_dir() and not path.is_symlink():
        plt.close(fig)
        raise IsADirectoryError(f"{path} is a folder: name the figure's file, e.g. {path / 'figure.png'}")
    if not path.suffix:
        path = path.with_suffix(".png")
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with new_file(path, "wb") as f:  # a regular file of its own: a link at the name is replaced, not followed
            fig.savefig(f, dpi=120, format=path.suffix[1:].lower())
    finally:
        plt.close(fig)
    return path


def case_plot(
    path: str | Path,
    cuts: Sequence[int],
    v_star: Sequence[float],
    forks: Mapping[str, int | None],
    *,
    belief: Sequence[float] | None = None,
    js: Sequence[float] | None = None,
    chain_len: int | None = None,
    title: str = "",
    captured: Mapping[str, float] | None = None,
) -> Path:
    """V* along the chain (the Monte-Carlo value at each candidate boundary), the Probe-JS belief in the
    answer and the JS score of each boundary (fork-before), and every selector's fork marker."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(10, 5.2))
    handles = ax.plot(cuts, v_star, "o-", color="black", lw=2, label="V*(t) (Monte-Carlo)")
    if belief is not None:
        handles += ax.plot(cuts, belief, "s--", color="tab:blue", alpha=0.8, label="Probe belief p(gold answer)")
    ax.set_ylim(-0.05, 1.14)
    ax.set_xlabel("response token position t")
    ax.set_ylabel("probability")
    if js is not None:
        ax2 = ax.twinx()
        width = max(1.0, 0.35 * (min((b - a for a, b in zip(cuts[:-1], cuts[1:])), default=4)))
        handles.append(
            ax2.bar(cuts, js, width=width, color="tab:orange", alpha=0.35, label="Probe-JS score (fork-before)")
        )
        ax2.set_ylabel("JS (nats)")
        ax2.set_ylim(0, max(0.05, 1.15 * max((v for v in js if v == v), default=0.05)))
    cmap = plt.get_cmap("tab10")
    for i, (name, fork) in enumerate(forks.items()):
        if fork is None:
            continue
        label = name + (f" (flip mass {captured[name]:.2f})" if captured and name in captured else "")
        ax.axvline(fork, color=cmap(i % 10), ls=":", alpha=0.6)
        handles += ax.plot(
            [fork],
            [1.02 + 0.025 * (i % 5)],
            MARKERS[i % len(MARKERS)],
            color=cmap(i % 10),
            ms=9,
            ls="none",
            label=label,
        )
    if chain_len is not None:
        ax.set_xlim(0, chain_len)
    _title(ax, title, 10)
    fig.legend(handles=handles, loc="lower center", ncol=3, fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.2, 1, 1))
    return _save(plt, fig, path)


def bar_chart(
    path: str | Path,
    values: Mapping[str, float],
    errors: Mapping[str, float] | None = None,
    *,
    ylabel: str,
    title: str = "",
    floor: float | None = None,
) -> Path:
    """One bar per selector (lower is better for reconstruction error), with optional error bars and the
    oracle floor as a line."""
    plt = _plt()
    names = list(values)
    fig, ax = plt.subplots(figsize=(max(5, 0.8 * len(names) + 2), 3.6))
    ax.bar(
        names,
        [values[n] for n in names],
        yerr=[errors[n] for n in names] if errors else None,
        color="tab:blue",
        alpha=0.8,
        capsize=3,
    )
    if floor is not None:
        ax.axhline(floor, color="black", ls="--", label="oracle floor")
        ax.legend()
    ax.set_ylabel(ylabel)
    _title(ax, title, 10)
    plt.setp(ax.get_xticklabels(), rotation=30, ha="right")
    fig.tight_layout()
    return _save(plt, fig, path)


def contrast_plot(path: str | Path, contrast: dict, *, title: str = "") -> Path:
    """The fork contrast (App. D): how often two siblings forked at a boundary reach different answers, by the
    boundary's Probe-JS tercile, with 95% intervals; the dashed line is the rate over every boundary."""
    plt = _plt()
    rates, spans = contrast["disagreement_by_js_tercile"], contrast["interval_by_js_tercile"]
    names = list(rates)
    fig, ax = plt.subplots(figsize=(4.8, 3.6))
    low = [max(0.0, rates[t] - spans[t][0]) for t in names]  # a one-problem tercile: a point, not a negative bar
    high = [max(0.0, spans[t][1] - rates[t]) for t in names]
    ax.bar(names, [rates[t] for t in names], yerr=[low, high], color="tab:orange", alpha=0.85, capsize=4)
    overall = 1 - contrast["sibling_agreement"]
    ax.axhline(overall, color="black", ls="--", lw=1, label="every boundary")
    ax.set_xlabel("Probe-JS tercile of the fork's boundary")
    ax.set_ylabel("sibling disagreement")
    ax.set_ylim(0, min(1.0, max(overall, *(spans[t][1] for t in names)) * 1.2 + 0.05))
    ax.legend(fontsize=8)
    _title(ax, title, 9)
    fig.tight_layout()
    return _save(plt, fig, path)


def lag_plot(path: str | Path, profiles: Mapping[str, dict], *, title: str = "") -> Path:
    """The lag diagnostic (:func:`bsb.eval.lag.lag_profile`): each score's correlation with the value jumps against
    the lag in boundaries, with its 95% bootstrap band; a peak right of 0 is a score that reacts late."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    for name, prof in profiles.items():
        lags = sorted(prof["lags"])
        r = [prof["lags"][k]["r"] for k in lags]
        lw = 2.4 if name in ("belief", "probe_js") else 1.2
        (line,) = ax.plot(lags, r, marker="o", lw=lw, label=name)
        lo = [prof["lags"][k]["lo"] for k in lags]
        hi = [prof["lags"][k]["hi"] for k in lags]
        ax.fill_between(lags, lo, hi, color=line.get_color(), alpha=0.12)
    ax.axvline(0, color="black", lw=0.8, ls=":")
    ax.set_xticks(sorted(next(iter(profiles.values()))["lags"]) if profiles else [])
    ax.set_xlabel("lag (boundaries): score at j + lag against |V*(t_{j+1}) − V*(t_j)|")
    ax.set_ylabel("pooled correlation")
    _title(ax, title, 10)
    ax.legend(fontsize=8, ncol=2)
    fig.tight_layout()
    return _save(plt, fig, path)


def sweep_curves(
    path: str | Path,
    raw: Mapping[str, tuple[Sequence[float], Sequence[float]]],
    smooth: Mapping[str, tuple[Sequence[float], Sequence[float]]],
    best: Mapping[str, tuple[float, float]],
    *,
    xlabel: str,
    ylabel: str,
    title: str = "",
) -> Path:
    """[Fork] Figure 4 style: raw validation curves (faint), their moving average (solid), a star at each
    series' best-aggregate checkpoint."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    for name, (x, y) in smooth.items():
        (line,) = ax.plot(x, y, "-", lw=2, label=name)
        ax.plot(*raw[name], "o-", lw=0.8, ms=3, alpha=0.3, color=line.get_color())
        ax.plot(*best[name], "*", ms=14, color=line.get_color(), markeredgecolor="black")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    _title(ax, title, 9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return _save(plt, fig, path)
