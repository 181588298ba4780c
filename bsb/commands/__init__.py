"""bsb.commands: one module a command of the ``bsb`` command line, each with ``add_parser(subparsers)`` and
``main(args, parser) -> exit code``; the offline commands' flags are generated from their config dataclasses
(:mod:`bsb.commands.flags`)."""

COMMANDS = ("demo", "train", "validate", "evaluate", "sweep", "report", "cost", "data", "export")
