"""Problem files: JSONL (also gzipped, ``.jsonl.gz``), JSON, Parquet or CSV, in any schema of
:mod:`bsb.tasks.data.schemas`, or a Hugging Face data set named ``hf://owner/name[:split]`` (through ``datasets``;
``hf:///a/dir[:split]`` is one saved with ``save_to_disk``), read with the same schema checks.

The schema is recognised from the first row's columns, or named (``format=``); every row must be of that schema
(a file mixing schemas is an error). A malformed row is an error that names the file, the line (or row) and the
field; a gold answer is never guessed from a field it cannot be read from.

Every file has limits, checked as it is read, before its rows become Python objects where the format allows:
``MAX_ROWS`` rows (a Parquet file's from its footer; a text file's counted as they are read, a row past the limit
refused before it is parsed), ``MAX_FILE_BYTES`` of decoded rows in all (the file's size for text formats, the
footer's sizes and then the decoded Arrow cells, a batch at a time, for Parquet; a gzipped file's inflated text, as
it inflates), ``MAX_CELL_BYTES`` a cell
(``MAX_LINE_BYTES`` a JSONL line), and ``MAX_INFLATED_BYTES`` held by the file's answers in all: what a reader
inflates compressed cells to (LiveCodeBench's hidden tests), counted as each problem is read. ``BSB_DATA_<NAME>`` in
the environment sets one for a run (``BSB_DATA_MAX_ROWS=4_000_000``). An integer of more digits than Python reads
is a row error. Whatever makes a file unreadable (a row, a limit, the csv, json or pyarrow library's own error) is
one :class:`DataFileError` naming the file.
"""

from __future__ import annotations

import csv
import dataclasses
import gzip
import json
import os
import re
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from bsb.tasks.base import Problem
from bsb.tasks.data.arrow_rows import FIXED, check_rows, check_table, over_cell, parquet_rows
from bsb.tasks.data.schemas import LIMIT_ENV, SCHEMAS, DataFileError, RowError, detect, over, read_int

SUFFIXES = (".jsonl", ".json", ".parquet", ".csv")
# A problem file's limits; BSB_DATA_<NAME> in the environment sets one for a run (read by limit(), each load)
MAX_ROWS = 2 << 20  # rows (DAPO-Math-17k's parquet has 1,791,700, 17.9k problems repeated; a row loaded costs ~1 KB)
MAX_FILE_BYTES = 8 << 30  # a file's rows, decoded (a text file's size; a Parquet file's decoded cells)
MAX_CELL_BYTES = 256 << 20  # one cell, decoded (LiveCodeBench's largest compressed hidden tests are far smaller)
MAX_LINE_BYTES = 64 << 20  # one JSONL problem (hidden tests included); a longer line is refused before it is parsed
MAX_INFLATED_BYTES = 16 << 30  # a file's answers in all, inflated (a full LiveCodeBench release's tests: ~12 GB)
# and at most this many times the file's own size (+ INFLATION_FLOOR): a real file's compressed hidden tests inflate
# a few times over; a zlib bomb a thousand times (6.5 MB to 4.8 GB), past any small machine's memory
MAX_INFLATION = 100
INFLATION_FLOOR = 64 << 20


def limit(name: str) -> int:
    """The limit ``name`` (``MAX_ROWS``, ...): ``BSB_DATA_<name>`` from the environment where set, else the constant."""
    raw = os.environ.get(LIMIT_ENV + name, "").strip()
    if not raw:
        return globals()[name]
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(f"{LIMIT_ENV}{name}={raw!r}: expected a positive whole number (e.g. 16_000_000_000)")
    return value


@dataclass(frozen=True)
class ProblemSet:
    path: Path | str
    schema: str  # the schema name (bsb.tasks.data.schemas.SCHEMAS)
    problems: list[Problem]
    columns: list[str]  # the first row's columns, as found


HUB = "hf://"


class HubDataset(str):
    """``hf://owner/name[:split]``: a data set on the Hugging Face hub (or in its local cache), or ``hf:///a/dir[:split]``
    saved with ``datasets``' ``save_to_disk``; the split defaults to ``train``."""

    @property
    def name(self) -> str:
        return self._parts()[0]

    @property
    def split(self) -> str:
        return self._parts()[1]

    @property
    def stem(self) -> str:  # the id prefix of rows without an id, as a file's stem
        return f"{Path(self.name).name}-{self.split}"

    def _parts(self) -> tuple[str, str]:
        m = re.fullmatch(r"(.*?/?[^/:]+)(?::(.+))?", self[len(HUB) :])  # the split: after the first ':' past the name
        if not m or not m.group(1).strip("/"):
            raise ValueError(f"{self}: name a data set, hf://owner/name[:split]")
        return m.group(1), m.group(2) or "train"


def as_source(path: str | Path) -> Path | HubDataset:
    """A problem source: a :class:`HubDataset` for ``hf://...``, else a file path."""
    return HubDataset(path) if isinstance(path, str) and path.startswith(HUB) else Path(path)


def hub_rows(source: HubDataset) -> list[tuple[str, object]]:
    """``(row N, row)`` of a data set split, through ``datasets`` (``HF_HOME`` and ``HF_HUB_OFFLINE`` honoured)."""
    try:
        import datasets
    except ImportError as err:
        raise ImportError(
            f"{source}: hf:// data sets need datasets (pip install 'belief-shift-branching[hub]')"
        ) from err
    local = Path(source.name)
    try:
        if local.is_dir():
            data = datasets.load_from_disk(str(local))
            if isinstance(data, datasets.DatasetDict):
                if source.split not in data:
                    raise ValueError(f"{source}: no split {source.split!r}; the data set has {', '.join(data)}")
                data = data[source.split]
            elif ":" in source[len(HUB) :].rsplit("/", 1)[-1]:
                raise ValueError(f"{source}: the saved data set at {local} has no splits; drop the ':split'")
        else:
            try:
                data = datasets.load_dataset(source.name, split=source.split)
            except ValueError as err:  # a config name missing, an unknown split: datasets' own words
                raise ValueError(f"{source}: {str(err).splitlines()[0]}") from None
    except (FileNotFoundError, ConnectionError, datasets.exceptions.DatasetNotFoundError) as err:
        raise FileNotFoundError(f"{source}: {str(err).splitlines()[0] if str(err) else type(err).__name__}") from None
    check_rows(source, data.num_rows, limit("MAX_ROWS"))  # before any row becomes Python
    check_table(data.data.table, source, 0, limit("MAX_CELL_BYTES"), limit("MAX_FILE_BYTES"), 0)
    return [(f"row {i}", dict(r)) for i, r in enumerate(data)]


def read_rows(path: str | Path) -> list[tuple[str, object]]:
    """``(where, row)`` of every record: where is ``line N`` (JSONL) or ``row N``."""
    path = as_source(path)
    if isinstance(path, HubDataset):
        return hub_rows(path)
    if not path.exists():
        raise FileNotFoundError(f"no problem file at {path}")
    if path.name.endswith(".jsonl.gz"):  # read as it inflates: MAX_FILE_BYTES bounds the inflated text
        return _jsonl_rows(path)
    if path.suffix not in SUFFIXES:
        raise DataFileError(f"{path}: unknown problem file type {path.suffix!r}; use {', '.join(SUFFIXES)}")
    if path.suffix == ".parquet":
        return parquet_rows(path, limit("MAX_FILE_BYTES"), limit("MAX_CELL_BYTES"), limit("MAX_ROWS"))
    size, max_file = path.stat().st_size, limit("MAX_FILE_BYTES")  # a text file decodes to at most its size
    if size > max_file:
        raise DataFileError(f"{path}: {size:,} bytes, {over(max_file, 'byte', 'MAX_FILE_BYTES')}")
    return {".csv": _csv_rows, ".json": _json_rows}.get(path.suffix, _jsonl_rows)(path)


def _jsonl_rows(path: Path) -> list[tuple[str, object]]:
    """A JSONL file's rows (gzipped where it ends ``.jsonl.gz``), a line at a time: a line over ``MAX_LINE_BYTES``, a
    row past ``MAX_ROWS``, or inflated text past ``MAX_FILE_BYTES``, is refused before it is parsed."""
    rows, max_line, max_rows, max_file = [], limit("MAX_LINE_BYTES"), limit("MAX_ROWS"), limit("MAX_FILE_BYTES")
    gz, read = path.suffix == ".gz", 0
    with gzip.open(path, "rb") if gz else path.open("rb") as f:
        for n, raw in enumerate(iter(lambda: _line(f, path, max_line), b""), start=1):
            read += len(raw)
            if gz and read > max_file:
                raise DataFileError(f"{path}: inflates to {over(max_file, 'byte', 'MAX_FILE_BYTES')}")
            if len(raw) > max_line:
                raise DataFileError(
                    f"{path}:{n}: a line {over(max_line, 'byte', 'MAX_LINE_BYTES')}; one problem per line, "
                    "each a JSON object"
                )
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise DataFileError(f"{path}:{n}: not UTF-8 text") from None
            if line.strip():
                check_rows(path, len(rows) + 1, max_rows)
                rows.append((f"line {n}", _json(line, f"{path}:{n}")))
    return rows


def _line(f, path: Path, max_line: int) -> bytes:
    try:
        return f.readline(max_line + 1)
    except (OSError, EOFError, zlib.error) as err:  # gzip: not a gzip file, a truncated or corrupt stream
        raise DataFileError(f"{path}: not a readable gzip file ({err})") from None


_OPEN = re.compile(r"[ \t\n\r]*\[[ \t\n\r]*")  # a JSON list's start, and the whitespace either side
_NEXT = re.compile(r"[ \t\n\r]*([,\]])[ \t\n\r]*")  # what follows one of its values: ',' or its end


def _json_rows(path: Path) -> list[tuple[str, object]]:
    """A .json file's list, parsed a row at a time: a row past ``MAX_ROWS`` is refused before it is parsed, and each
    row's cells are checked as it is."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise DataFileError(f"{path}: not UTF-8 text (byte {err.start})") from None
    start = _OPEN.match(text)
    if not start:
        raise DataFileError(f"{path}: a .json problem file holds a list of objects")
    rows, max_rows, max_cell, i = [], limit("MAX_ROWS"), limit("MAX_CELL_BYTES"), start.end()
    more = text[i : i + 1] != "]"
    if not more:
        i += 1
    while more:
        check_rows(path, len(rows) + 1, max_rows)
        where = f"row {len(rows)}"
        value, i = _json(text, str(path), i, where)
        _check_cells(path, where, value, max_cell)
        rows.append((where, value))
        after = _NEXT.match(text, i)
        if not after:
            raise DataFileError(f"{path}: not a JSON object (',' or ']' expected at character {i:,}, after {where})")
        i, more = after.end(), after.group(1) == ","
    if text[i:].strip(" \t\n\r"):
        raise DataFileError(f"{path}: not a JSON object (extra data at character {i:,})")
    return rows


def _csv_rows(path: Path) -> list[tuple[str, object]]:
    """A CSV file's rows, a cell over ``MAX_CELL_BYTES`` refused by the parser as it reads it, a row past
    ``MAX_ROWS`` as it is read. The csv module's field limit is process-wide: set for this read only (the loaders run
    on one thread)."""
    rows, max_cell, max_rows = [], limit("MAX_CELL_BYTES"), limit("MAX_ROWS")
    previous = csv.field_size_limit(max_cell)
    try:
        with path.open(newline="", encoding="utf-8") as f:
            for i, r in enumerate(csv.DictReader(f)):
                check_rows(path, i + 1, max_rows)
                rows.append((f"row {i}", dict(r)))
    except csv.Error as err:
        big = "field larger than field limit" in str(err)
        why = f"a cell {over_cell(max_cell)}" if big else None
        raise DataFileError(f"{path}, row {len(rows)}: {why or f'not a readable CSV file ({err})'}") from None
    except UnicodeDecodeError as err:
        raise DataFileError(f"{path}: not UTF-8 text (byte {err.start})") from None
    finally:
        csv.field_size_limit(previous)
    return rows


def held_bytes(value, stop: int) -> int:
    """What ``value`` holds: text and bytes at their length, anything else at ``FIXED`` and its parts (a mapping's
    keys and values, a list's, a tuple's or a set's items, a dataclass's fields); counting stops once past ``stop``."""
    size, stack = 0, [value]
    while stack and size <= stop:
        v = stack.pop()
        if isinstance(v, str | bytes):
            size += len(v)
            continue
        size += FIXED
        if isinstance(v, list | tuple | set | frozenset):
            stack.extend(v)
        elif isinstance(v, dict) or isinstance(v, Mapping):
            stack.extend(v.keys())
            stack.extend(v.values())
        elif dataclasses.is_dataclass(v) and not isinstance(v, type):  # a Problem, its CodeTests
            stack.extend(getattr(v, name) for name in v.__dataclass_fields__)
    return size


def _check_cells(path: Path, where: str, row, max_cell: int) -> None:
    """A parsed JSON row's cells under ``max_cell`` bytes (:func:`held_bytes`)."""
    if not isinstance(row, dict):
        return
    for name, value in row.items():
        if held_bytes(value, max_cell) > max_cell:
            raise DataFileError(f"{path}, {where}: column {name!r} holds {over_cell(max_cell)}")


_DECODER = json.JSONDecoder(parse_int=read_int)  # an integer too long for Python: a RowError, not Python's message


def _json(text: str, where: str, start: int | None = None, row: str = ""):
    """The JSON value of the JSONL line ``text``, or ``(value, end)`` of the .json list's ``row`` at ``start``. A
    syntax error, a nesting too deep for the parser or an integer too long to read is an error naming ``where``."""
    named = f"{where}, {row}" if row else where
    try:
        return _DECODER.decode(text) if start is None else _DECODER.raw_decode(text, start)
    except json.JSONDecodeError as err:
        at = f"at character {err.pos:,}, {row}" if row else "one problem per line"
        raise DataFileError(f"{where}: not a JSON object ({err.msg}); {at}") from None
    except RecursionError:
        raise DataFileError(f"{named}: JSON nested too deeply to be a problem") from None
    except RowError as err:
        raise DataFileError(f"{named}: {err}") from None


def _inflation_limit(path) -> tuple[int, str]:
    """What a file's answers may hold, inflated, and the limit's name: ``MAX_INFLATED_BYTES``, or for a local file
    ``MAX_INFLATION`` times its size (+ ``INFLATION_FLOOR``) where that is less."""
    most = limit("MAX_INFLATED_BYTES")
    if isinstance(path, str | Path) and Path(path).is_file():
        relative = limit("MAX_INFLATION") * Path(path).stat().st_size + INFLATION_FLOOR
        if relative < most:
            return relative, "MAX_INFLATION"
    return most, "MAX_INFLATED_BYTES"


def rows_to_problems(
    path: Path | str,
    rows: list[tuple[str, object]],
    read: Callable[[dict, int], Problem],
    what: str = "an object with prompt and answer fields",
) -> list[Problem]:
    """Every row through ``read(row, index)``: no rows, a row that is not an object, a :class:`RowError` or Python's
    own ``ValueError`` on a value of the row (an integer too long to read; either re-raised naming the file and the
    row), a duplicate id, or answers holding over ``MAX_INFLATED_BYTES`` in all is an error. The answers are counted
    (:func:`held_bytes`) as each problem is read, so a reader that inflates compressed cells (a code problem's hidden
    tests) stops at the limit; all else a problem holds comes from its row's cells, under ``MAX_FILE_BYTES``."""
    if not rows:
        raise DataFileError(f"{path} holds no problems")
    problems, seen, held = [], set(), 0
    max_held, name = _inflation_limit(path)
    for i, (where, row) in enumerate(rows):
        if not isinstance(row, dict):
            raise DataFileError(f"{path}, {where}: expected {what}")
        try:
            problem = read(row, i)
        except ValueError as err:  # a RowError, or Python's own (int("9" * 5000))
            raise DataFileError(f"{path}, {where}: {err}") from None
        held += held_bytes(problem.answer, max_held - held)
        if held > max_held:
            raise DataFileError(
                f"{path}, {where}: the answers read so far (hidden tests inflated from compressed cells) hold "
                f"{over(max_held, 'byte', name)}"
            )
        if problem.id in seen:
            raise DataFileError(f"{path}, {where}: duplicate id {problem.id!r}")
        seen.add(problem.id)
        problems.append(problem)
    return problems


def load_problem_set(path: str | Path, format: str | None = None, seed: int = 0) -> ProblemSet:
    """Every problem of ``path`` in schema ``format`` (None: recognised from the first row). ``seed`` fixes the
    per-question option order of multiple-choice sets."""
    path = as_source(path)
    if format is not None and format not in SCHEMAS:
        raise ValueError(f"unknown problem format {format!r}; the recognised schemas are {', '.join(SCHEMAS)}")
    rows = read_rows(path)
    schema = [format]  # recognised from the first row when not named

    def read(row: dict, i: int) -> Problem:
        found = detect(row)
        if schema[0] is None:
            if found is None:
                raise RowError(
                    f"unknown schema; recognised: {', '.join(SCHEMAS)}; columns found: {', '.join(map(str, row))}"
                )
            schema[0] = found
        elif format is None and found != schema[0]:
            raise RowError(
                f"a {found or 'unknown'}-schema row in a {schema[0]} file (columns: {', '.join(map(str, row))}); "
                "one schema per file"
            )
        return SCHEMAS[schema[0]][0](row, i, path.stem, seed)

    problems = rows_to_problems(path, rows, read)
    return ProblemSet(path, schema[0], problems, [str(c) for c in rows[0][1]])  # rows is not empty here


def load_problems(path: str | Path, format: str | None = None, seed: int = 0) -> list[Problem]:
    return load_problem_set(path, format, seed).problems
