"""``bsb sweep CONFIG... --seeds 0 1 2``: the paper's experiment protocol over several configs and seeds.

Each config × seed trains in its own process and folder (``OUT/<config name>-s<seed>``); a finished run is skipped,
a killed one resumes from its checkpoint. Before anything trains, every config is validated, no two runs may write
to one folder, and every run must validate on the same held-out problems with the same decoding (otherwise their
curves do not compare). Then one table and one figure ([Fork] §5–7, App. A):

* validation curves, raw (faint) and as a 3-point moving average (solid), mean over seeds;
* each config at its *single best-aggregate checkpoint* (the validation step with the best seed-mean accuracy; ties
  go to the earlier step) and at the final one, mean ± 95% t-interval over seeds;
* differences against a reference config (default: the first) with the two-level (seed × question) paired bootstrap,
  at the final checkpoint and at each one's best;
* each config's mean fork yield beside its accuracy (the share of forks whose leaves disagree,
  :mod:`bsb.train.fork_stats`), mean ± 95% t-interval over seeds. ``bsb report OUT`` draws the rest of the fork
  statistics.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from bsb.commands.flags import command_parser, from_args
from bsb.eval.sweep_summary import (
    add_differences,
    config_summary,
    figure_series,
    run_lines,
    seed_interval,
    step_mean,
    table_lines,
)
from bsb.fields import check_values
from bsb.fields import help_field as _f
from bsb.run_storage import best_weights, metric_rows, weight_steps, write_whole
from bsb.train.config import EVAL_FIELDS, RUN_ONLY

HELP = "several configs x seeds, each in its own process and folder (resumable); one table and figure"


@dataclass
class SweepConfig:
    configs: tuple[str, ...] = _f(
        (), "YAML configs (bsb train --config files); each run is named after its file", positional=True, nargs="+"
    )
    seeds: tuple[int, ...] = _f((0, 1, 2), "seeds of every config", nargs="+")
    out: str = _f("runs/sweep", "one folder per run inside, plus table.md and curves.png", path="folder")
    reference: str | None = _f(None, "the config the others are compared with (default: the first)")
    set: tuple[str, ...] = _f((), "overrides applied to every config, e.g. --set steps=20")
    report_to: tuple[str, ...] = _f(
        (), "trackers of every run beside its metrics.jsonl: tensorboard, wandb (as bsb train's report_to)", nargs="+"
    )
    summarize_only: bool = _f(False, "write the table and figure from finished runs, train nothing")

    def __post_init__(self):
        check_values(self)


def add_parser(sub) -> argparse.ArgumentParser:
    return command_parser(sub, "sweep", HELP, SweepConfig)


def main(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from bsb.train.config import parse_overrides

    cfg = from_args(SweepConfig, args, parser)
    try:  # everything is checked before anything trains
        overrides = parse_overrides(list(cfg.set))
        if cfg.report_to:
            overrides["report_to"] = ["jsonl", *cfg.report_to]
        runs = plan(list(cfg.configs), list(cfg.seeds), cfg.out, overrides)
        names = list(dict.fromkeys(r.name for r in runs))
        if cfg.reference is not None and cfg.reference not in names:
            raise ValueError(f"--reference {cfg.reference!r} is none of the sweep's configs: {', '.join(names)}")
    except (ValueError, FileNotFoundError) as err:
        parser.error(str(err))
    if not cfg.summarize_only:
        execute(runs)
    try:
        result = summarize(runs, cfg.out, cfg.reference)
    except ValueError as err:
        parser.error(str(err))
    print(result["table"])
    print(f"table: {Path(cfg.out) / 'table.md'}; figure: {Path(cfg.out) / 'curves.png'}")
    return 0


@dataclass
class Run:
    name: str  # the config's name (its file stem)
    seed: int
    dir: Path
    config: dict  # the TrainConfig fields of this run

    @property
    def metrics(self) -> Path:
        return self.dir / "metrics.jsonl"


def _cfg(data: dict):
    from bsb.train.config import TrainConfig

    return TrainConfig.from_dict(data)


def plan(configs: list[str | Path], seeds: list[int], out: str | Path, overrides: dict | None = None) -> list[Run]:
    """Every run of the sweep, checked: configs valid, one folder per run, one evaluation set, and no folder that
    already holds a different run."""
    import yaml

    from bsb.tasks.registry import make_task
    from bsb.train.config import TrainConfig

    if not configs or not seeds:
        raise ValueError("a sweep needs at least one config and one seed")
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds repeat: {seeds}")
    names: dict[str, Path] = {}
    for c in map(Path, configs):
        if c.stem in names:
            raise ValueError(f"two runs would write to one folder: {names[c.stem]} and {c} are both named {c.stem!r}")
        names[c.stem] = c
    out = Path(out)
    runs, evals = [], {}
    for name, path in names.items():
        try:
            base = TrainConfig.from_yaml(path).to_dict()
        except (ValueError, FileNotFoundError) as err:
            raise ValueError(f"{path}: {err}") from None
        base.update(overrides or {})
        for seed in seeds:
            data = {**base, "seed": seed, "out_dir": str(out / f"{name}-s{seed}")}
            try:
                config = _cfg(data).to_dict()
            except ValueError as err:
                raise ValueError(f"{path} (seed {seed}): {err}") from None
            runs.append(Run(name, seed, Path(config["out_dir"]), config))
        task = make_task(base["task"], base["task_options"])
        held = [(p.id, p.prompt, str(p.answer)) for p in task.held_out(base["val_problems"])]
        evals[name] = (base["task"], held, tuple(base[f] for f in EVAL_FIELDS))
    first = next(iter(evals))
    for name, e in evals.items():
        if e[0] != evals[first][0] or e[1] != evals[first][1]:
            raise ValueError(
                f"the sweep's runs disagree on the evaluation set: {names[name]} holds out other problems than "
                f"{names[first]} (task, task_options or val_problems)"
            )
        bad = [f for f, a, b in zip(EVAL_FIELDS, e[2], evals[first][2]) if a != b]
        if bad:
            raise ValueError(
                f"the sweep's runs disagree on the evaluation: {names[name]} and {names[first]} "
                f"differ in {', '.join(bad)}"
            )
    runs.sort(
        key=lambda r: seeds.index(r.seed)
    )  # seed by seed (stable: configs in order): a sweep cut short is balanced
    for r in runs:
        saved = r.dir / "config.yaml"
        if saved.exists():
            old = _cfg(yaml.safe_load(saved.read_text()) or {}).to_dict()
            diff = [k for k in r.config if k not in RUN_ONLY and old.get(k) != r.config[k]]
            if diff:
                raise ValueError(
                    f"{r.dir} already holds a run of another config (differs in {', '.join(diff)}); "
                    "choose another --out"
                )
    return runs


def _rows(run: Run) -> list[dict]:
    return [json.loads(x) for x in metric_rows(run.metrics)]  # a run still writing: its torn last row is dropped


def finished(run: Run) -> bool:
    if not run.metrics.exists():
        return False
    rows = _rows(run)
    return bool(rows) and rows[-1]["step"] >= run.config["steps"] and "val_accuracy" in rows[-1]


def execute(runs: list[Run], progress: bool = True) -> None:
    """Train every unfinished run in a fresh process (each starts its own engine); resumable."""
    import yaml
    from tqdm import tqdm

    todo = [r for r in runs if not finished(r)]
    for r in tqdm(todo, desc=f"sweep ({len(runs) - len(todo)} of {len(runs)} runs already done)", disable=not progress):
        r.dir.mkdir(parents=True, exist_ok=True)
        write_whole(r.dir / "run.yaml", yaml.safe_dump(r.config, sort_keys=False))
        subprocess.run([sys.executable, "-m", "bsb.cli", "train", "--config", str(r.dir / "run.yaml")], check=True)


def _kept_at(run: Path, step: int) -> str | None:
    """The folder of ``run``'s weights at validation step ``step``: kept by keep_last (``weights/step-S``) or by
    keep_best when its best is that step (``best/``); None when neither kept them."""
    if step in weight_steps(run):
        return str(run / "weights" / f"step-{step}")
    best = best_weights(run)
    return str(run / "best") if best is not None and best["step"] == step else None


def summarize(runs: list[Run], out: str | Path, reference: str | None = None, resamples: int = 4000) -> dict:
    """The sweep's table (``table.md``) and figure (``curves.png``) from its runs' metrics
    (:mod:`bsb.eval.sweep_summary`)."""
    from bsb.eval.figures import sweep_curves

    out = Path(out)
    names = list(dict.fromkeys(r.name for r in runs))
    reference = reference or names[0]
    if reference not in names:
        raise ValueError(f"reference {reference!r} is none of the sweep's configs: {', '.join(names)}")
    seeds = sorted({r.seed for r in runs})
    missing = [str(r.dir) for r in runs if not r.metrics.exists()]
    if missing:
        raise ValueError(f"{len(missing)} run(s) have no metrics yet (train them first): {', '.join(missing[:4])}")
    configs = {}
    for name in names:
        mine = [r for r in runs if r.name == name]
        rows = [_rows(r) for r in mine]
        summary = config_summary(name, [[x for x in rs if "val_accuracy" in x] for rs in rows])
        best = summary["best_step"]
        kept = [_kept_at(r.dir, best) for r in mine]
        fork_yield, fork_yield_hw = seed_interval([step_mean(rs, "fork_yield") for rs in rows])
        configs[name] = {"best_weights": kept, "fork_yield": fork_yield, "fork_yield_hw": fork_yield_hw, **summary}
    add_differences(configs, reference, resamples)
    lines = table_lines(configs, reference, seeds)
    lines += ["", "Each run (its own best: the first step at its maximum):", ""]
    lines += run_lines([(r.name, r.seed, _rows(r)) for r in runs])
    out.mkdir(parents=True, exist_ok=True)
    write_whole(out / "table.md", "\n".join(lines) + "\n")
    sweep_curves(
        out / "curves.png",
        *figure_series(configs),
        xlabel="training step",
        ylabel="held-out accuracy",
        title=f"{len(names)} configs, {len(seeds)} seeds: raw (faint), 3-point moving average (solid), "
        "★ best-aggregate",
    )
    for r in configs.values():
        r.pop("correct")
    return {"table": "\n".join(lines), "configs": configs}
