"""Problems at a model's level ([Fork] App. D keeps problems a model sometimes solves): each candidate problem's pass
rate estimated from ``samples`` completions of its prompt, and the problems whose rate lies in a band kept. A problem
the model always or never solves gives a flat value curve, which no selector can be scored on.

The rates of a run are kept in ``screen.jsonl`` (one row a problem: its id, correct completions, samples), so a rerun
reads them instead of sampling again; a row that is not that is an error naming the line."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path


def pass_rates(
    gen, session, indices: Sequence[int], samples: int, temperature: float, max_response: int, seed: int
) -> dict[int, int]:
    """Correct completions of ``samples`` drawn from each problem ``indices`` of ``session`` (seeded by problem and
    draw), by index."""
    prompts = [session.prompts[i] for i in indices for _ in range(samples)]
    seeds = [seed + 7919 * i + j for i in indices for j in range(samples)]
    outs = gen.generate(
        prompts, max_new_tokens=max_response, temperature=temperature, seed=seeds, eos_token_id=session.eos
    )
    out = {}
    for k, i in enumerate(indices):
        problem = session.problems[i]
        out[i] = sum(
            session.task.verify(session.decode(r), problem).correct for r in outs[k * samples : (k + 1) * samples]
        )
    return out


def read_screen(path: Path, samples: int) -> dict[str, int]:
    """Correct completions by problem id from a run's ``screen.jsonl`` (empty when there is none)."""
    if not path.exists():
        return {}
    out = {}
    for n, line in enumerate(path.read_text().splitlines(), start=1):
        try:
            row = json.loads(line)
            ok = isinstance(row, dict) and isinstance(row.get("id"), str) and row.get("samples") == samples
            correct = row["correct"] if ok else None
            ok = ok and isinstance(correct, int) and not isinstance(correct, bool) and 0 <= correct <= samples
        except (json.JSONDecodeError, KeyError):
            ok = False
        if not ok:
            raise ValueError(
                f"{path}:{n}: not a screen row of {samples} samples ({{id, correct, samples}}); remove the file to "
                "screen again"
            )
        out[row["id"]] = row["correct"]
    return out


def in_band(correct: int, samples: int, band: Sequence[float]) -> bool:
    lo, hi = band
    return lo <= correct / samples <= hi
