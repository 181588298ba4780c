"""Command-line flags generated from a command's config dataclass (as TRL's ``HfArgumentParser`` does).

One flag per field made with :func:`bsb.fields.help_field`: ``--field-name`` (or the field's ``flag``), typed by the
field's annotation, with the field's default and help; ``positional=True`` fields are positional (optional unless
``nargs`` says otherwise); a ``dict`` field takes ``NAME=VALUE`` pairs (YAML values); a ``bool`` field is a switch; a
field's ``choices`` are the flag's. A config that rejects its values (its ``__post_init__``: the fields' facts through
:func:`bsb.fields.check_values`, then its rules across fields) is a usage error in one line, before anything loads.
"""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing


def _base(hint):
    """The non-None type of an annotation (``int | None`` -> ``int``)."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        return args[0] if len(args) == 1 else str
    return hint


def _flag(f: dataclasses.Field) -> str:
    return f.metadata.get("flag") or "--" + f.name.replace("_", "-")


def add_flags(parser: argparse.ArgumentParser, cls, skip: tuple[str, ...] = ()) -> None:
    """Add a flag for every field of the dataclass ``cls`` that has help text and is not in ``skip``."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        meta = f.metadata
        if "help" not in meta or not meta.get("cli", True) or f.name in skip:
            continue
        default = _default(f)
        hint, origin = _base(hints[f.name]), typing.get_origin(_base(hints[f.name]))
        kw: dict = {"help": meta["help"], "dest": f.name}
        if meta.get("choices"):
            kw["choices"] = list(meta["choices"])
        if hint is bool:
            kw["action"] = "store_true" if default is False else argparse.BooleanOptionalAction
            kw["default"] = default
        elif hint is dict or origin is dict:
            kw.update(nargs="*", default=[], metavar="NAME=VALUE")
        elif origin in (tuple, list) or hint in (tuple, list):
            item = (typing.get_args(hint) or (str,))[0]
            kw.update(nargs=meta.get("nargs", "*"), type=item if item in (int, float) else str, default=default)
        else:
            kw.update(type=hint if hint in (int, float) else str, default=default)
        if meta.get("positional"):
            kw.pop("dest")
            kw.setdefault("nargs", meta.get("nargs", "?"))
            parser.add_argument(f.name, **kw)
        else:
            parser.add_argument(_flag(f), **kw)


def command_parser(sub, name: str, help: str, cls, skip: tuple[str, ...] = ()) -> argparse.ArgumentParser:
    """The subcommand ``name`` with a flag for every field of its config dataclass ``cls`` (:func:`add_flags`)."""
    parser = sub.add_parser(name, help=help, description=help)
    add_flags(parser, cls, skip)
    return parser


def _default(f: dataclasses.Field):
    return f.default_factory() if f.default is dataclasses.MISSING else f.default


def from_args(cls, args: argparse.Namespace, parser: argparse.ArgumentParser, **values):
    """The ``cls`` config of parsed ``args`` (``values`` override them); a bad value is ``parser.error``'s one line."""
    from bsb.train.config import parse_overrides

    hints, given = typing.get_type_hints(cls), vars(args)
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name not in given:  # a field without a flag (cli=False, or skipped): its default
            continue
        value = given[f.name]
        hint = _base(hints[f.name])
        if hint is dict or typing.get_origin(hint) is dict:
            try:
                value = parse_overrides(value) if value else _default(f)
            except ValueError as err:
                parser.error(str(err))
        elif typing.get_origin(hint) is tuple and value is not None:
            value = tuple(value)
        kwargs[f.name] = value
    kwargs.update(values)
    try:
        return cls(**kwargs)
    except ValueError as err:
        parser.error(str(err))
