"""What ``bsb validate`` shows of its :class:`~bsb.eval.validation.Summary`: the selectors' table (one builder of the
rows for the console and for ``table.md``: best ★ on the console, **bold** and second _italic_ in Markdown), the
warnings about B, the fork contrast's line, the reads' cost and the lag diagnostic's rows."""

from __future__ import annotations

import math
from collections.abc import Sequence

from bsb.eval import table
from bsb.eval.validation import Summary

COLUMNS = ("selector", "mean E", "± s.e.", "vs Midpoint [95%]", "excess over floor", "fallbacks", "flip mass captured")
MARKS = ("**", "_")  # Markdown marks of the first and second ranked


def num(x: float, spec: str = ".3f") -> str:
    """A figure of the report, or n/a where it is undefined (no non-flat chain, no fork pair): never a nan."""
    return "n/a" if math.isnan(x) else format(x, spec)


def paired(x) -> str:
    """A paired difference with its interval, or n/a."""
    return "n/a" if x is None else f"{x.diff:+.3f} [{x.low:+.3f}, {x.high:+.3f}]"


def title(s: Summary, label: str, b_text: str, n_mc: int, skipped: int) -> str:
    """``label``: the model; ``b_text``: B as configured; ``skipped``: chains without a newline boundary."""
    return (
        f"{label}: {len(s.live)} non-flat of {s.chains} chains ({skipped} without a newline boundary), "
        f"{b_text}, "
        + (f"B/m={s.b_over_m:.2f} (median)" if s.live else "B/m n/a (no non-flat chain)")
        + f", N_MC={n_mc}"
    )


def selector_rows(s: Summary) -> list[tuple[str, int | None, list[str]]]:
    """Per selector: its name, its rank when first or second (else None), and its cells after the name."""
    rank = {n: i for i, n in enumerate(s.ranking[: len(MARKS)])}
    return [
        (
            n,
            rank.get(n),
            [
                num(s.mean_error[n]),
                num(s.sem[n]),
                paired(s.vs_midpoint[n]) if n != "midpoint" else "(reference)",
                num(s.mean_error[n] - s.floor),
                str(s.fallbacks[n]),
                num(s.captured[n], ".2f"),
            ],
        )
        for n in s.names
    ]


def rich_table(s: Summary, title_text: str):
    rows = [[("★ " if r == 0 else "") + n, *cells] for n, r, cells in selector_rows(s)]
    return table.rich_table(COLUMNS, rows, title=title_text)


def markdown(
    s: Summary, title_text: str, contrast: dict, lags: dict, notes: Sequence[str] = (), resolution: str = ""
) -> str:
    """The whole ``table.md``: the selectors' table with the DP floor, the fork contrast, the ``resolution`` lines
    (V*'s steps against their noise and the split-half oracle: :mod:`bsb.eval.resolution`), the lag diagnostic and
    the run's ``notes`` (a selector asked for and not scored, and why)."""
    rows = []
    for n, r, cells in selector_rows(s):
        mark = MARKS[r] if r is not None else ""
        rows.append([n, f"{mark}{cells[0]}{mark}", *cells[1:]])
    lines = [f"# {title_text}", "", *table.markdown(COLUMNS, rows)]
    lines.append(f"| oracle floor (DP) | {num(s.floor)} | | | 0 | | |")
    if any(v is not None for v in s.vs_midpoint.values()):
        lines += [
            "",
            f"vs Midpoint: E − Midpoint's E paired by chain; 95% bootstrap over the {s.problems} problems "
            "(a problem's chains resampled together); below 0 is better than Midpoint.",
        ]
    spans = contrast.get("interval_by_js_tercile", {})
    tercile = ", ".join(
        f"{k} {v:.3f}" + (f" [{spans[k][0]:.3f}, {spans[k][1]:.3f}]" if k in spans else "")
        for k, v in contrast.get("disagreement_by_js_tercile", {}).items()
    )
    lines += [
        "",
        f"Fork contrast (App. D): sibling agreement {num(contrast['sibling_agreement'])} "
        f"over {contrast['pairs']} pairs; disagreement by Probe-JS tercile: " + (tercile or "none"),
        "",
        *([read_cost_line(s), ""] if read_cost_line(s) else []),
        *([resolution, ""] if resolution else []),
        *lag_rows(lags),
        *(line for note in notes for line in ("", note)),
    ]
    return "\n".join(lines) + "\n"


def read_cost_line(s: Summary) -> str:
    """The reads' cost against the chains' sampling, for each selector that reads the model ("" when none did)."""
    spent = {n: c for n, c in s.read_cost.items() if c[0] or c[1]}
    if not spent:
        return ""
    cells = "; ".join(f"{n} {a:.2f} ({f:.2f})" for n, (a, f) in spent.items())
    return (
        "Read cost: token-forwards of a selector's reads per token the chain sampled, as spent here (the HF reader "
        "forwards the chain again) and, in brackets, on an engine that holds the chain's keys and values "
        f"(each read's suffix and read tokens alone, Eq. 8's T_probe): {cells}."
    )


def warnings(s: Summary) -> list[str]:
    """Why the selectors may not separate on these chains: B keeps every boundary of some, most of each, or one of
    most (a constant)."""
    out = []
    if s.whole:
        out.append(
            f"B keeps every boundary of {s.whole} of {len(s.live)} non-flat chains: any selector that "
            "ranks them all scores E=0 there; a smaller --b separates the selectors"
        )
    single = sum(r["b"] == 1 and len(r["cuts"]) > 1 for r in s.live)
    if single and 2 * single >= len(s.live):
        out.append(
            f"B = 1 on {single} of {len(s.live)} non-flat chains: one kept point reconstructs a constant, so E "
            "rewards the boundary whose V* is nearest the curve's median, not a fork before its largest jump (on a "
            "curve that drifts, Midpoint's middle is near that median); --b 2, or a --b-ratio that keeps two, makes a "
            "pivot count"
        )
    if s.b_over_m > 0.2:
        out.append(
            f"B/m = {s.b_over_m:.2f} (median): most of each V* curve is kept, so evenly spaced points are "
            "near-optimal and selectors cannot separate; the paper keeps 10 of up to 128 (B/m ≈ 0.08): "
            "--b-ratio 0.08 with longer chains matches it"
        )
    return out


def contrast_line(contrast: dict) -> str:
    """The fork contrast as the console shows it."""
    agree = num(contrast["sibling_agreement"], ".2f")
    line = f"fork contrast: siblings agree on {agree} of {contrast['pairs']} boundary forks"
    if "disagreement_by_js_tercile" in contrast:
        by = contrast["disagreement_by_js_tercile"]
        line += "; disagreement by Probe-JS tercile (bottom/middle/top): " + " / ".join(
            f"{by[t]:.2f}" for t in ("bottom", "middle", "top")
        )
    return line


def lag_rows(lags: dict) -> list[str]:
    """The lag diagnostic as Markdown rows: each score's pooled correlation at every lag, and its peak."""
    order = sorted(next(iter(lags.values()))["lags"]) if lags else []
    rows = []
    for name, prof in lags.items():
        cells = [
            f"{x['r']:.2f} [{x['lo']:.2f}, {x['hi']:.2f}]" if not math.isnan(x["r"]) else "n/a"
            for x in (prof["lags"][k] for k in order)
        ]
        rows.append([name, *cells, f"{prof['peak']:+d}" if prof["peak"] is not None else "none"])
    return [
        "Lag diagnostic: correlation of the score at boundary j + lag with |V*(t_{j+1}) − V*(t_j)|, pooled over the "
        "non-flat chains [95% bootstrap over chains]; fork-before assumes the peak at lag 0 (peak: the largest "
        "correlation positive beyond its interval; none: the score does not mark the pivots).",
        "",
        *table.markdown(["score", *(f"lag {k:+d}" for k in order), "peak"], rows),
    ]
