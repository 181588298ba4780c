"""The ``bsb`` command line: one subcommand per module of :mod:`bsb.commands`."""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from bsb.commands import COMMANDS


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="bsb", description="Belief-shift branching for tree-structured RLVR")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in COMMANDS:
        module = importlib.import_module(f"bsb.commands.{name}")
        module.add_parser(sub).set_defaults(_main=module.main, _parser=sub.choices[name])
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one command. Bad input (a value, a file, YAML or JSON, a path that is a folder, an input too big to hold) is
    one usage line and exit 2, whatever raised it; ``BSB_DEBUG=1`` shows the traceback instead."""
    try:
        parser = build_parser()  # imports every command: an old torch is one line here too (bsb.min_versions)
    except ImportError as err:
        if os.environ.get("BSB_DEBUG"):
            raise
        argparse.ArgumentParser(prog="bsb").error(_one_line(err))
    args = parser.parse_args(argv)
    try:
        return args._main(args, args._parser)
    except INPUT_ERRORS as err:
        if os.environ.get("BSB_DEBUG"):
            raise
        args._parser.error(_one_line(err))


def _input_errors() -> tuple[type[BaseException], ...]:
    import json

    import yaml

    return (ValueError, OSError, yaml.YAMLError, json.JSONDecodeError, UnicodeError, RecursionError, MemoryError)


def _one_line(err: BaseException) -> str:
    if isinstance(err, RecursionError):
        return "an input is nested too deeply to read"
    if isinstance(err, MemoryError):
        return "an input or a size is too large to hold in memory"
    text = " ".join(str(err).split()) or type(err).__name__
    if isinstance(err, OSError) and err.filename is not None and str(err.filename) not in text:
        text = f"{err.filename}: {text}"
    return text[:2000]


INPUT_ERRORS = _input_errors()


if __name__ == "__main__":
    sys.exit(main())
