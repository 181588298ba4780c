"""``bsb cost``: the probe's FLOP overhead, analytical (Eq. 8, App. B) and, given a run, as measured.

The analytical rows are :mod:`bsb.engine.cost` applied to the paper's math and code arms (reproducing App. B), plus
one row for any step shape given on the command line. With a run's ``metrics.jsonl`` the measured shares are
printed beside them: probe token-forwards over tokens generated, the FLOP share of the step, and the wall-clock
share of the step spent selecting.
"""

from __future__ import annotations

import json
from pathlib import Path

from bsb.engine import cost


def cost_report(shape: cost.StepShape | None = None, metrics: str | Path | None = None, console=None) -> dict:
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    table = Table(title="Probe-JS overhead: F_probe / F_roll (Eq. 8) and F_probe / F_step (App. B)")
    for col in ("arm", "T̄", "T_train", "L", "T_probe", "F_probe/F_roll", "F_probe/F_step"):
        table.add_column(col, justify="left" if col == "arm" else "right")
    rows = {}
    arms = [(f"{d} {m} (paper)", cost.StepShape(mean_chain_len=t, train_tokens=tr, read_len=reads)) for d, m, t, tr, reads in cost.PAPER_ARMS]
    if shape is not None:
        arms.append(("your shape", shape))
    for name, s in arms:
        roll, step = cost.probe_over_rollout(s), cost.probe_over_step(s)
        rows[name] = {"probe_over_rollout": roll, "probe_over_step": step}
        table.add_row(name, f"{s.mean_chain_len:,.0f}", f"{s.train_tokens:,.0f}", str(s.read_len), f"{cost.probe_tokens(s):,.0f}",
                      f"{100 * roll:.2f}%", f"{100 * step:.2f}%")
    if metrics is not None:
        path = Path(metrics)
        if not path.exists():
            raise FileNotFoundError(f"no metrics file at {path} (bsb train writes out_dir/metrics.jsonl)")
        m = cost.measured_shares([json.loads(line) for line in path.read_text().splitlines() if line.strip()])
        rows["measured"] = m
        table.add_row(f"measured: {path} ({m['steps']} steps)", "", "", "", "", f"{100 * m['probe_over_rollout']:.2f}%",
                      f"{100 * m['probe_over_step']:.2f}% (wall clock {100 * m['time_share']:.1f}%)")
    console.print(table)
    console.print("Token-forwards: a forward costs 2N FLOPs per token, forward + backward 6N (N cancels). Measured shares count "
                  "the engine's probe tokens (prefix-cache misses plus reads) against the tokens generated and trained.")
    return rows
