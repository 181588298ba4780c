"""Config fields that carry their help text and how the command line shows them.

Every option of bsb is a field of a config dataclass (``TrainConfig``, ``ProbeConfig``, each command's config), made
with :func:`help_field`; ``bsb <command> --help`` and the flags of the offline commands are generated from them
(:mod:`bsb.commands.flags`), so a default or a help text is written once.
"""

from __future__ import annotations

from dataclasses import field


def help_field(default, help: str, **cli):
    """A config field with its help text. ``cli``: how the command line shows it (``flag="--out"`` for a flag name
    other than ``--field-name``; ``positional=True``; ``choices=(...)``; ``nargs``; ``cli=False`` to keep it off)."""
    meta = {"help": help, **cli}
    if isinstance(default, (dict, list)):
        return field(default_factory=lambda: type(default)(default), metadata=meta)
    return field(default=default, metadata=meta)
