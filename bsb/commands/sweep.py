"""``bsb sweep CONFIG... --seeds 0 1 2``: the paper's experiment protocol over several configs and seeds.

Each config × seed trains in its own process and folder (``OUT/<config name>-s<seed>``); a finished run is skipped,
a killed one resumes from its checkpoint. Before anything trains, every config is validated, no two runs may write
to one folder, and every run must validate on the same held-out problems with the same decoding (otherwise their
curves do not compare). Then one table and one figure ([Fork] §5–7, App. A):

* validation curves, raw (faint) and as a 3-point moving average (solid), mean over seeds;
* each config at its *single best-aggregate checkpoint* (the validation step with the best seed-mean accuracy; ties
  go to the earlier step) and at the final one, mean ± 95% t-interval over seeds;
* differences against a reference config (default: the first) with the two-level (seed × question) paired bootstrap,
  at the final checkpoint and at each one's best.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bsb.commands.flags import command_parser, from_args
from bsb.eval.bootstrap import two_level
from bsb.fields import help_field as _f

HELP = "several configs x seeds, each in its own process and folder (resumable); one table and figure"


@dataclass
class SweepConfig:
    configs: tuple[str, ...] = _f(
        (), "YAML configs (bsb train --config files); each run is named after its file", positional=True, nargs="+"
    )
    seeds: tuple[int, ...] = _f((0, 1, 2), "seeds of every config", nargs="+")
    out: str = _f("runs/sweep", "one folder per run inside, plus table.md and curves.png")
    reference: str | None = _f(None, "the config the others are compared with (default: the first)")
    set: tuple[str, ...] = _f((), "overrides applied to every config, e.g. --set steps=20")
    report_to: tuple[str, ...] = _f(
        (), "trackers of every run beside its metrics.jsonl: tensorboard, wandb (as bsb train's report_to)", nargs="+"
    )
    summarize_only: bool = _f(False, "write the table and figure from finished runs, train nothing")


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


# Fields that change where and how a run is written, not what it computes.
RUN_ONLY = ("out_dir", "save_every", "progress")
# What decides the evaluation: runs of one sweep must agree on these (and on the held-out problems themselves).
EVAL_FIELDS = (
    "val_problems",
    "val_temperature",
    "val_top_p",
    "val_samples",
    "max_response_len",
    "prompt_format",
    "prompt_template",
    "system_prompt",
    "chat_template_kwargs",
)


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


def finished(run: Run) -> bool:
    if not run.metrics.exists():
        return False
    rows = [json.loads(x) for x in run.metrics.read_text().splitlines() if x.strip()]
    return bool(rows) and rows[-1]["step"] >= run.config["steps"] and "val_accuracy" in rows[-1]


def execute(runs: list[Run], progress: bool = True) -> None:
    """Train every unfinished run in a fresh process (each starts its own engine); resumable."""
    import yaml
    from tqdm import tqdm

    todo = [r for r in runs if not finished(r)]
    for r in tqdm(todo, desc=f"sweep ({len(runs) - len(todo)} of {len(runs)} runs already done)", disable=not progress):
        r.dir.mkdir(parents=True, exist_ok=True)
        (r.dir / "run.yaml").write_text(yaml.safe_dump(r.config, sort_keys=False))
        subprocess.run([sys.executable, "-m", "bsb.cli", "train", "--config", str(r.dir / "run.yaml")], check=True)


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


def summarize(runs: list[Run], out: str | Path, reference: str | None = None, resamples: int = 4000) -> dict:
    """The sweep's table (``table.md``) and figure (``curves.png``) from its runs' metrics."""
    from bsb.eval.figures import sweep_curves
    from bsb.train.run_folder import weight_steps

    out = Path(out)
    names = list(dict.fromkeys(r.name for r in runs))
    reference = reference or names[0]
    if reference not in names:
        raise ValueError(f"reference {reference!r} is none of the sweep's configs: {', '.join(names)}")
    seeds = sorted({r.seed for r in runs})
    missing = [str(r.dir) for r in runs if not r.metrics.exists()]
    if missing:
        raise ValueError(f"{len(missing)} run(s) have no metrics yet (train them first): {', '.join(missing[:4])}")
    result, raw, smooth, best_at = {}, {}, {}, {}
    for name in names:
        vals = []
        for r in (r for r in runs if r.name == name):
            rows = [json.loads(x) for x in r.metrics.read_text().splitlines() if x.strip()]
            vals.append([x for x in rows if "val_accuracy" in x])
        steps = [x["step"] for x in vals[0]]
        if any([x["step"] for x in v] != steps for v in vals):
            raise ValueError(f"{name}: its seeds validated at different steps")
        acc = np.array([[x["val_accuracy"] for x in v] for v in vals])  # (seeds, checkpoints)
        mean = acc.mean(0)
        best = int(np.argmax(mean))  # the first maximum: ties go to the earlier step
        correct = np.array(
            [[np.asarray(x["val_correct"]) / x["val_samples"] for x in v] for v in vals]
        )  # (seeds, ckpt, questions)
        result[name] = {
            "best_weights": [  # each seed's weights of the best-aggregate step, where keep_last kept them
                str(r.dir / "weights" / f"step-{steps[best]}") if steps[best] in weight_steps(r.dir) else None
                for r in runs
                if r.name == name
            ],
            "steps": steps,
            "mean": mean.tolist(),
            "best_step": steps[best],
            "best": float(mean[best]),
            "best_hw": half_width(acc[:, best]),
            "final": float(mean[-1]),
            "final_hw": half_width(acc[:, -1]),
            "correct": correct,
            "best_index": best,
        }
        raw[name], smooth[name], best_at[name] = (
            (steps, mean.tolist()),
            (steps, moving_average(mean.tolist())),
            (steps[best], float(mean[best])),
        )
    ref = result[reference]
    lines = [
        f"# Sweep: {len(names)} configs × seeds {seeds}; reference {reference}",
        "",
        f"| config | start | best-aggregate (step) | final | final − {reference} [95% CI, two-level] "
        f"| best − {reference} best [95% CI] |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name in names:
        r = result[name]
        if name == reference:
            d_final = d_best = ""
        else:
            d_final = str(two_level(r["correct"][:, -1], ref["correct"][:, -1], resamples))
            d_best = str(two_level(r["correct"][:, r["best_index"]], ref["correct"][:, ref["best_index"]], resamples))
        r["diff_final"], r["diff_best"] = d_final, d_best
        lines.append(
            f"| {name} | {r['mean'][0]:.3f} | {r['best']:.3f} ± {r['best_hw']:.3f} ({r['best_step']}) | "
            f"{r['final']:.3f} ± {r['final_hw']:.3f} | {d_final} | {d_best} |"
        )
    lines += [
        "",
        "Accuracy on the held-out set at the validation decoding, mean over seeds ± 95% t-interval. Best-aggregate: "
        "the single validation step with the best seed-mean accuracy (ties: the earlier step); differences use the "
        "two-level (seed × question) paired bootstrap.",
        "",
        "Best-aggregate weights (`bsb export RUN --step S`):",
    ]
    for name in names:
        r, where = result[name], [w for w in result[name]["best_weights"] if w]
        lines.append(
            f"- {name}, step {r['best_step']}: kept in {len(where)} of {len(r['best_weights'])} runs"
            + (
                f" ({where[0]}, ...)"
                if where
                else " (train with keep_last: -1 to keep every validation step's weights)"
            )
        )
    out.mkdir(parents=True, exist_ok=True)
    (out / "table.md").write_text("\n".join(lines) + "\n")
    sweep_curves(
        out / "curves.png",
        raw,
        smooth,
        best_at,
        xlabel="training step",
        ylabel="held-out accuracy",
        title=f"{len(names)} configs, {len(seeds)} seeds: raw (faint), 3-point moving average (solid), "
        "★ best-aggregate",
    )
    for r in result.values():
        r.pop("correct")
    return {"table": "\n".join(lines), "configs": result}
