"""Command-line flags generated from a command's config dataclass (as TRL's ``HfArgumentParser`` does).

One flag per field made with :func:`bsb.fields.help_field`: ``--field-name`` (or the field's ``flag``), typed by the
field's annotation, with the field's default and help; ``positional=True`` fields are positional (optional unless
``nargs`` says otherwise); a ``dict`` field takes ``NAME=VALUE`` pairs (YAML values); a ``bool`` field is a switch. A
config that rejects its values (``__post_init__``) is a usage error in one line, before anything loads.
"""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing

from bsb.fields import check_values


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
        default = f.default_factory() if f.default is dataclasses.MISSING else f.default
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


def from_args(cls, args: argparse.Namespace, parser: argparse.ArgumentParser, **values):
    """The ``cls`` config of parsed ``args`` (``values`` override them); a bad value is ``parser.error``'s one line."""
    from bsb.train.config import parse_overrides

    hints = typing.get_type_hints(cls)
    kwargs = {}
    for f in dataclasses.fields(cls):
        if not hasattr(args, f.name):
            continue
        value = getattr(args, f.name)
        hint = _base(hints[f.name])
        if hint is dict or typing.get_origin(hint) is dict:
            try:
                value = parse_overrides(value) if value else None
            except ValueError as err:
                parser.error(str(err))
        elif typing.get_origin(hint) is tuple and value is not None:
            value = tuple(value)
        kwargs[f.name] = value
    kwargs.update(values)
    try:
        cfg = cls(**kwargs)
        check_values(cfg)  # NaN, infinities, bools where numbers belong
        too_big = [f.name for f in dataclasses.fields(cfg) if _is_size(f.name) and _over(getattr(cfg, f.name))]
        if too_big:
            raise ValueError(f"{', '.join(too_big)} beyond any run (at most {MAX_SIZE:,}): a typo?")
        return cfg
    except ValueError as err:
        parser.error(str(err))


MAX_SIZE = (
    10_000_000  # problems, chains, samples, tokens: a count beyond this is a typo that would hang or exhaust memory
)


def _is_size(name: str) -> bool:
    return "seed" not in name


def _over(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > MAX_SIZE
