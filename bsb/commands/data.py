"""``bsb data FILE``: check a problem file before a long run (the report: :func:`bsb.tasks.math.report.data_report`)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from bsb.commands.flags import command_parser, from_args
from bsb.fields import MAX_COUNT, check_values
from bsb.fields import help_field as _f
from bsb.tasks.data.schemas import SCHEMAS
from bsb.tasks.prompting import PromptConfig

HELP = "check a problem file: its schema, row count and first rows as the model sees them"


@dataclass
class DataConfig(PromptConfig):
    """``bsb data``'s options: the prompt options of :class:`~bsb.tasks.prompting.PromptConfig` (the prompts are
    shown as ``bsb train`` renders them) and the fields below."""

    file: str = _f(None, "a JSONL / JSON / Parquet / CSV problem file", positional=True, nargs=None)
    format: str | None = _f(None, "name the schema (default: recognised from the columns)", choices=tuple(SCHEMAS))
    rows: int = _f(3, "rows to show", ge=0, size_limit=MAX_COUNT)
    model: str | None = _f(
        None, "a local model directory whose tokenizer renders the prompts (needed for --prompt-format chat)"
    )
    choice_seed: int = _f(0, "the seed of multiple-choice option orders")

    def __post_init__(self):
        check_values(self)
        problems = self.prompt_problems()
        if problems:
            raise ValueError(f"invalid config: {'; '.join(problems)}")
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
        data_report(cfg.file, cfg.format, cfg.rows, tok, cfg, cfg.choice_seed)
    except (ValueError, FileNotFoundError, ImportError) as err:
        parser.error(str(err))
    return 0
