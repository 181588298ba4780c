"""Config fields that carry their help text, the facts about their values, and how the command line shows them.

Every option of bsb is a field of a config dataclass (``TrainConfig``, ``ProbeConfig``, each command's config), made
with :func:`help_field`; ``bsb <command> --help`` and the flags of the offline commands are generated from them
(:mod:`bsb.commands.flags`), so a default or a help text is written once. So are the facts about a field's values:
its choices, bounds and size limit are checked for every config by :func:`check_values` (a config's
``__post_init__`` keeps the rules across fields), and a fact such as ``resume_safe`` is read back with :func:`named`.
"""

from __future__ import annotations

from dataclasses import field

# problems, chains, samples, tokens: a count beyond this is a typo that would hang or exhaust memory
MAX_COUNT = 10_000_000


def help_field(
    default,
    help: str,
    *,
    choices: tuple | None = None,
    ge=None,
    gt=None,
    le=None,
    lt=None,
    size_limit: int | None = None,
    resume_safe: bool = False,
    **meta,
):
    """A config field with its help text and the facts about its values: ``choices`` (the values it takes; also the
    command line's), bounds (``ge`` >=, ``gt`` >, ``le`` <=, ``lt`` <), ``size_limit`` (a count above it is a typo:
    nothing runs that large), ``resume_safe`` (a resumed run may change it without a word). ``meta``: how the command
    line shows it (``flag="--out"`` for a flag name other than ``--field-name``; ``positional=True``; ``nargs``;
    ``cli=False`` to keep it off), a path's kind (``path="folder"`` or ``path="file"``: the help says which, and a
    path of the other kind is refused before any work), or a fact a module reads with :func:`named`
    (``evaluation=True``)."""
    facts = dict(choices=choices, ge=ge, gt=gt, le=le, lt=lt, size_limit=size_limit, resume_safe=resume_safe)
    if meta.get("path") not in (None, "folder", "file"):
        raise ValueError(f"path must be 'folder' or 'file', got {meta['path']!r}")
    if meta.get("path"):
        help = f"{help} (a {meta['path']})"
    meta = {"help": help, **{k: v for k, v in facts.items() if v is not None and v is not False}, **meta}
    if isinstance(default, (dict, list)):
        return field(default_factory=lambda: type(default)(default), metadata=meta)
    return field(default=default, metadata=meta)


def with_default(cls, name: str, default):
    """The field ``name`` of the dataclass ``cls`` with another default and the same help and facts: a subclass that
    needs its own default redeclares nothing else."""
    import dataclasses

    meta = next(f for f in dataclasses.fields(cls) if f.name == name).metadata
    return field(default=default, metadata=meta)


def named(cls, fact: str) -> tuple[str, ...]:
    """The names of the fields of the dataclass ``cls`` that carry ``fact`` (e.g. ``resume_safe``), in field order."""
    import dataclasses

    return tuple(f.name for f in dataclasses.fields(cls) if f.metadata.get(fact))


def value_problems(obj) -> list[str]:
    """Every value of the dataclass ``obj`` that breaks a fact of its field, one message each (empty: none): the
    declared kind (a float field a finite number: NaN and infinities are typos, never settings; an int field an
    integer that is not a bool), the field's ``choices`` and bounds, and its ``size_limit`` (one message naming
    every count beyond it). None passes (an optional field left unset)."""
    import dataclasses
    import math
    import types
    import typing

    hints = typing.get_type_hints(type(obj))
    out, too_big = [], []
    for f in dataclasses.fields(obj):
        hint, value, meta = hints.get(f.name), getattr(obj, f.name), f.metadata
        if value is None:
            continue
        name = f"{f.name} ({meta['flag']})" if meta.get("flag") else f.name
        kinds = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)
        kinds = [k for k in kinds if k is not type(None)]
        if kinds == [float] and (
            isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value)
        ):
            out.append(f"{name} must be a finite number, got {value!r}")
            continue
        if kinds == [int] and (isinstance(value, bool) or not isinstance(value, int)):
            out.append(f"{name} must be an integer, got {value!r}")
            continue
        if meta.get("path") and isinstance(value, str):
            out.extend(_path_problems(name, value, meta["path"]))
        if "choices" in meta and not isinstance(value, (list, tuple)) and value not in meta["choices"]:
            out.append(f"{name} must be one of {', '.join(map(str, meta['choices']))}, got {value!r}")
        if not isinstance(value, int | float) or isinstance(value, bool):
            continue
        if not _within(value, meta):
            out.append(f"{name} must be {_bounds(meta)}, got {value!r}")
        elif value > meta.get("size_limit", math.inf):
            too_big.append((name, value, meta["size_limit"]))
    if too_big:
        sizes = "; ".join(f"{name} = {value} (at most {limit})" for name, value, limit in too_big)
        out.append(f"{', '.join(name for name, _, _ in too_big)} beyond any run (a typo?): {sizes}")
    return out


def check_values(obj) -> None:
    """:func:`value_problems` as one ``ValueError`` (``invalid config: ...``) naming every value that breaks a fact."""
    problems = value_problems(obj)
    if problems:
        raise ValueError(f"invalid config: {'; '.join(problems)}")


# names that say "a file" (a folder of the offline commands called report.png is a typo)
FILE_SUFFIXES = (".png", ".pdf", ".svg", ".jpg", ".jpeg", ".md", ".json", ".jsonl", ".csv", ".txt", ".yaml", ".yml")


def _path_problems(name: str, value: str, kind: str) -> list[str]:
    """Why ``value`` is not a path of ``kind`` (``folder`` or ``file``): an existing path of the other kind, a folder
    named like a file, or a file named like a folder (a trailing separator)."""
    from pathlib import Path

    path = Path(value)
    if kind == "folder" and path.exists() and not path.is_dir():
        return [f"{name} is a folder the command writes into, but {value} is an existing file"]
    if kind == "folder" and path.suffix.lower() in FILE_SUFFIXES:
        return [f"{name} is a folder the command writes into, not a file: {value} (e.g. {path.with_suffix('')})"]
    if kind == "file" and (path.is_dir() or value.endswith(("/", "\\"))):
        return [f"{name} names a file, but {value} is a folder: name a file (in it, or elsewhere)"]
    return []


def _within(value, meta) -> bool:
    lo_ok = ("ge" not in meta or value >= meta["ge"]) and ("gt" not in meta or value > meta["gt"])
    return lo_ok and ("le" not in meta or value <= meta["le"]) and ("lt" not in meta or value < meta["lt"])


def _bounds(meta) -> str:
    """``>= 1``, ``> 0``, ``in (0, 1]``: the bounds of a field as its error message says them."""
    lo = ("[", meta["ge"]) if "ge" in meta else ("(", meta["gt"]) if "gt" in meta else None
    hi = ("]", meta["le"]) if "le" in meta else (")", meta["lt"]) if "lt" in meta else None
    if lo and hi:
        return f"in {lo[0]}{lo[1]}, {hi[1]}{hi[0]}"
    if lo:
        return f"{'>=' if lo[0] == '[' else '>'} {lo[1]}"
    return f"{'<=' if hi[0] == ']' else '<'} {hi[1]}"
