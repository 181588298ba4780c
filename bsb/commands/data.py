"""``bsb data FILE``: check a problem file before a long run (the report: :func:`bsb.tasks.math.report.data_report`);
``bsb data --dataset NAME``: the problems task=reasoning_gym holds out from that reasoning-gym dataset, as drawn;
``--write FILE`` writes the first ``--count`` of them as a held-out file (``task_options.val_file``), checked on
load."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from bsb.commands.flags import command_parser, from_args
from bsb.fields import MAX_COUNT, check_values
from bsb.fields import help_field as _f
from bsb.tasks.data.schemas import SCHEMAS
from bsb.tasks.prompting import PromptConfig

HELP = "check a problem file (or a reasoning-gym dataset as drawn): its schema, rows and prompts as the model sees them"


@dataclass
class DataConfig(PromptConfig):
    """``bsb data``'s options: the prompt options of :class:`~bsb.tasks.prompting.PromptConfig` (the prompts are
    shown as ``bsb train`` renders them) and the fields below."""

    file: str | None = _f(None, "a JSONL / JSON / Parquet / CSV problem file", positional=True, nargs="?")
    dataset: str | None = _f(
        None,
        "a reasoning-gym dataset (e.g. gsm_symbolic) instead of a file: its held-out problems as task=reasoning_gym "
        "draws them",
    )
    format: str | None = _f(None, "name the schema (default: recognised from the columns)", choices=tuple(SCHEMAS))
    rows: int = _f(3, "rows to show", ge=0, size_limit=MAX_COUNT)
    write: str | None = _f(
        None,
        "with --dataset: write its first --count held-out problems to this JSONL file with their provenance (the "
        "task option val_file reads it back, each problem regenerated and checked)",
        path="file",
    )
    count: int = _f(256, "held-out problems --write writes", ge=1, size_limit=MAX_COUNT)
    model: str | None = _f(
        None, "a local model directory whose tokenizer renders the prompts (needed for --prompt-format chat)"
    )
    choice_seed: int = _f(0, "the seed of multiple-choice option orders")

    def __post_init__(self):
        check_values(self)
        problems = self.prompt_problems()
        if problems:
            raise ValueError(f"invalid config: {'; '.join(problems)}")
        if (self.file is None) == (self.dataset is None):
            raise ValueError("give a problem file or --dataset NAME (a reasoning-gym dataset), not both or neither")
        if self.write and not self.dataset:
            raise ValueError("--write writes a reasoning-gym dataset's held-out problems: give --dataset NAME")
        if self.prompt_format == "chat" and not self.model:
            raise ValueError("--prompt-format chat renders through a tokenizer's chat template: pass --model PATH")


def add_parser(sub) -> argparse.ArgumentParser:
    return command_parser(sub, "data", HELP, DataConfig)


def main(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from bsb.tasks.math.report import data_report

    cfg = from_args(DataConfig, args, parser)
    try:
        tok = None
        if cfg.model:
            import transformers

            from bsb.embedded.model import resolve_model

            tok = transformers.AutoTokenizer.from_pretrained(resolve_model(cfg.model))
        if cfg.dataset:
            gym_report(cfg.dataset, cfg.rows, tok, cfg)
            if cfg.write:
                from bsb.safe_io import write_text
                from bsb.tasks.reasoning_gym import gym_version, held_out_file

                write_text(cfg.write, held_out_file(cfg.dataset, cfg.count))  # whole or not at all
                print(
                    f"wrote {cfg.count} held-out {cfg.dataset} problems to {cfg.write} (reasoning-gym "
                    f"{gym_version()}); train or score on them with --set task_options.val_file={cfg.write}"
                )
        else:
            data_report(cfg.file, cfg.format, cfg.rows, tok, cfg, cfg.choice_seed)
    except (ValueError, FileNotFoundError, ImportError) as err:
        parser.error(str(err))
    return 0


def gym_report(dataset: str, rows: int, tokenizer, prompt: PromptConfig, console=None) -> dict:
    """The first ``rows`` held-out problems of reasoning-gym's ``dataset`` as ``task=reasoning_gym`` draws them: the
    prompt as the model sees it, the gold answer and where the problem came from."""
    from rich.console import Console
    from rich.panel import Panel

    from bsb.tasks.reasoning_gym import HELD_OUT_SEED, ReasoningGymTask

    console = console or Console()
    task = ReasoningGymTask(dataset=dataset)
    problems = task.held_out(rows)
    console.print(
        f"[bold]reasoning-gym {dataset}[/bold]: held-out problems from seed {HELD_OUT_SEED} (training draws seeds "
        f"below 2**30); answer read from \\boxed{{}}, reward 1 where score_answer gives 1.0; prompt format: "
        f"{prompt.prompt_format}"
    )
    shown = []
    for p in problems:
        text = prompt.render(task, p, tokenizer)
        meta = p.meta["entry"].get("metadata", {})
        console.print(Panel(text, title=f"{p.id}: the prompt as the model sees it", title_align="left"))
        source = {k: meta[k] for k in ("source_dataset", "source_index", "difficulty") if k in meta}
        console.print(f"  gold: {p.answer}   {source}")
        shown.append({"id": p.id, "prompt": text, "gold": p.answer})
    return {"dataset": dataset, "shown": shown}
