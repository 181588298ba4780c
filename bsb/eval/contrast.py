"""The fork contrast ([Fork] App. D): the first two completions at a boundary are two siblings forked there. How
often they reach the same final answer, and how often they disagree by Probe-JS tercile, says whether the boundaries
the probe scores high are those where a fork changes the outcome."""

from __future__ import annotations

import math

import numpy as np

from bsb.eval.bootstrap import cluster_mean


def fork_contrast(curves: list[dict]) -> dict:
    """App. D over the ``curves.jsonl`` rows of ``bsb validate``: how often the two siblings forked at a boundary reach
    the same final answer, and the disagreement rate by Probe-JS tercile (pooled over every boundary with a JS
    score; a chain Probe-JS could not score, ranked by the midpoint instead, is left out of them), each rate with its
    95% interval resampling problems (a problem's forks travel together). An empty answer never agrees."""
    pairs, js_pairs = [], []
    for k, r in enumerate(curves):
        for j, sib in enumerate(r["siblings"]):
            if len(sib) == 2:
                agree = bool(sib[0]) and sib[0] == sib[1]
                pairs.append(agree)
                s = r["scores"].get("probe_js", [None] * len(r["cuts"]))[j]
                if s is not None and not r.get("fallback", {}).get("probe_js"):  # midpoint ranks are no JS score
                    js_pairs.append((s, agree, r.get("prompt", k)))
    contrast = {"sibling_agreement": float(np.mean(pairs)) if pairs else math.nan, "pairs": len(pairs)}
    if len(js_pairs) >= 3:
        js_pairs.sort(key=lambda x: x[0])
        k = len(js_pairs) // 3
        terciles = {
            "bottom": js_pairs[:k],
            "middle": js_pairs[k : len(js_pairs) - k],
            "top": js_pairs[len(js_pairs) - k :],
        }
        intervals = {t: cluster_mean([1.0 - a for _, a, _ in xs], [c for _, _, c in xs]) for t, xs in terciles.items()}
        contrast["disagreement_by_js_tercile"] = {t: i.diff for t, i in intervals.items()}
        contrast["interval_by_js_tercile"] = {t: [i.low, i.high] for t, i in intervals.items()}
    return contrast
