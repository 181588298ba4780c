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


def check_values(obj) -> None:
    """Every field of the dataclass ``obj`` holds a value of its declared kind: a float field a finite number (NaN and
    infinities are typos, never settings), an int field an integer that is not a bool; one ``ValueError`` naming the
    field otherwise."""
    import dataclasses
    import math
    import types
    import typing

    hints = typing.get_type_hints(type(obj))
    for f in dataclasses.fields(obj):
        hint, value = hints.get(f.name), getattr(obj, f.name)
        if value is None:
            continue
        kinds = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)
        kinds = [k for k in kinds if k is not type(None)]
        if kinds == [float] and (
            isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value)
        ):
            raise ValueError(f"invalid config: {f.name} must be a finite number, got {value!r}")
        if kinds == [int] and (isinstance(value, bool) or not isinstance(value, int)):
            raise ValueError(f"invalid config: {f.name} must be an integer, got {value!r}")
