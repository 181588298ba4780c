"""``bsb report RUN_OR_SWEEP_DIR``: one figure (``report.png``) and one Markdown table (``report.md``) of a training run
or a sweep, from its ``metrics.jsonl`` files alone: held-out accuracy and reward, fork yield and its split by
selector-score tercile, fork positions, ``probe_frac`` and the step's time split; for a sweep, its arms side by side
with their 95% intervals over seeds. It works on a run that is still going (a torn last row is dropped with a
warning) and on runs copied from a cluster."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from bsb.commands.flags import command_parser, from_args
from bsb.fields import check_values
from bsb.fields import help_field as _f

HELP = "a run's or a sweep's figure and table from its metrics.jsonl (fork yield, accuracy, time split)"


@dataclass
class ReportConfig:
    path: str = _f("", "a bsb train run folder (with metrics.jsonl) or a bsb sweep folder", positional=True)
    out: str | None = _f(None, "where report.png and report.md go (default: PATH)", path="folder")

    def __post_init__(self):
        check_values(self)
        if not self.path:
            raise ValueError("name a run folder (bsb train's out_dir) or a sweep folder (bsb sweep's --out)")


def add_parser(sub) -> argparse.ArgumentParser:
    return command_parser(sub, "report", HELP, ReportConfig)


def main(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    cfg = from_args(ReportConfig, args, parser)
    try:
        figure, table, lines = write_report(cfg.path, cfg.out)
    except ValueError as err:
        parser.error(str(err))
    print("\n".join(lines))
    print(f"figure: {figure}; table: {table}")
    return 0


def write_report(path: str | Path, out: str | Path | None = None) -> tuple[Path, Path, list[str]]:
    """``report.png`` and ``report.md`` of the run or sweep at ``path`` in ``out`` (default: ``path``), each a new
    regular file renamed onto its name (never written through a link); returns their paths and the table's lines."""
    from bsb.eval.report import read_runs, run_table, sweep_table
    from bsb.eval.report_figure import run_figure, sweep_figure
    from bsb.safe_io import write_text

    kind, runs = read_runs(path)
    out = Path(out) if out is not None else Path(path)
    out.mkdir(parents=True, exist_ok=True)
    if kind == "run":
        lines, figure = run_table(runs[0]), run_figure(out / "report.png", runs[0])
    else:
        lines, figure = sweep_table(runs), sweep_figure(out / "report.png", runs)
    table = out / "report.md"
    write_text(table, "\n".join(lines) + "\n")  # a regular file of its own: a link at the name is replaced
    return figure, table, lines
