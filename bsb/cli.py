"""The ``bsb`` command line: one subcommand per module of :mod:`bsb.commands`."""

from __future__ import annotations

import argparse
import importlib
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
    args = build_parser().parse_args(argv)
    return args._main(args, args._parser)


if __name__ == "__main__":
    sys.exit(main())
