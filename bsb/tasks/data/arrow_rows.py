"""Parquet and Arrow rows under a size budget (:mod:`bsb.tasks.data.files`): a file's total and any one cell.

A Parquet file says in its footer how much each column chunk holds before decoding, so a file too big in all, or a
row group of one row whose cell is too big, is refused before any of it is decoded. What the footer cannot bound is a
value repeated through a dictionary (20 kB on disk, gigabytes as rows): byte arrays are therefore decoded into
Arrow dictionaries, which stay the size of the file's own pages, and every cell's decoded size is counted there, a
string at its length and a list or a struct at the sum of its parts, before any row becomes Python objects.

The footer also holds the row count (in all and for each row group): a file of more rows than the limit is refused
from it, before anything is decoded. The rows are then decoded ``BATCH_ROWS`` at a time, each batch counted against
the limits before it becomes Python objects and the next is read.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from bsb.tasks.data.schemas import LIMIT_ENV, DataFileError, over

FIXED = 8  # what a number, a bool, a null or a list's entry counts
BATCH_ROWS = 1 << 16  # rows decoded at a time (pyarrow's default; smaller batches of nested columns decode far slower)


def cell_bytes(array) -> np.ndarray:
    """The decoded size of each value of an Arrow array: text and binary at their length, a dictionary entry at its
    value's, a list at its values' sum (plus ``FIXED`` each), a struct at its fields' sum, anything else ``FIXED``."""
    import pyarrow as pa
    import pyarrow.compute as pc

    t = array.type
    n = len(array)
    if pa.types.is_dictionary(t):
        values = cell_bytes(array.dictionary)
        if not len(values):
            return np.zeros(n, dtype=np.int64)
        idx = array.indices.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
        return np.where(array.is_null().to_numpy(zero_copy_only=False), 0, values[idx])
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return pc.binary_length(array).fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_map(t) or pa.types.is_fixed_size_list(t):
        child = cell_bytes(array.flatten()) + FIXED
        parents = pc.list_parent_indices(array).to_numpy(zero_copy_only=False)
        return np.bincount(parents, weights=child, minlength=n).astype(np.int64)
    if pa.types.is_struct(t):
        total = np.full(n, FIXED, dtype=np.int64)
        for field in array.flatten():
            total += cell_bytes(field)
        return total
    if n and array.nbytes > FIXED * n:  # another layout (a union, an extension): its buffers shared out
        return np.full(n, -(-array.nbytes // n), dtype=np.int64)
    return np.full(n, FIXED, dtype=np.int64)


def check_table(table, source: Path | str, first_row: int, max_cell: int, max_file: int, used: int) -> int:
    """Refuse a cell of ``table`` over ``max_cell`` (naming its row, counted from ``first_row``, and column) or a
    running total over ``max_file``; returns the total with this table counted."""
    for name, column in zip(table.column_names, table.columns):
        chunks = [cell_bytes(chunk) for chunk in column.chunks]
        sizes = np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.int64)
        big = np.flatnonzero(sizes > max_cell)
        if big.size:
            raise DataFileError(f"{source}, row {first_row + int(big[0])}: column {name!r} holds {over_cell(max_cell)}")
        used += int(sizes.sum())
        if used > max_file:
            raise DataFileError(f"{source}: its rows decode to {over(max_file, 'byte', 'MAX_FILE_BYTES')}")
    return used


def over_cell(max_cell: int) -> str:
    """A cell over the limit, and how to raise it."""
    return f"over {max_cell:,} bytes ({LIMIT_ENV}MAX_CELL_BYTES raises it)"


def check_rows(source: Path | str, rows: int, max_rows: int) -> None:
    """Refuse ``rows`` rows over ``max_rows``."""
    if rows > max_rows:
        raise DataFileError(f"{source}: at least {rows:,} rows, {over(max_rows, 'row', 'MAX_ROWS')}")


def parquet_rows(path: Path, max_file: int, max_cell: int, max_rows: int) -> list[tuple[str, object]]:
    """``(row N, row)`` of a Parquet file, under the limits (see the module docstring)."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError as err:
        raise ImportError("reading Parquet needs pyarrow (pip install pyarrow)") from err
    try:
        footer = pq.ParquetFile(path)
        _check_footer(footer.metadata, path, max_file, max_cell, max_rows)
        schema = footer.schema
        text = [
            schema.column(i).path
            for i in range(len(schema))
            if schema.column(i).physical_type == "BYTE_ARRAY" and schema.column(i).logical_type.type != "DECIMAL"
        ]
        pf = pq.ParquetFile(path, read_dictionary=text)
        rows, used = [], 0
        for batch in pf.iter_batches(batch_size=BATCH_ROWS):
            table = pa.Table.from_batches([batch])
            check_rows(path, len(rows) + table.num_rows, max_rows)  # a footer may undercount
            used = check_table(table, path, len(rows), max_cell, max_file, used)
            rows += table.cast(footer.schema_arrow).to_pylist()  # checked: expanded now, Python reads dense faster
    except (pa.ArrowException, OSError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise DataFileError(f"{path}: not a readable Parquet file ({first})") from None
    return [(f"row {i}", r) for i, r in enumerate(rows)]


def _check_footer(meta, path: Path, max_file: int, max_cell: int, max_rows: int) -> None:
    """The limits as far as the footer tells: its row count, and each column chunk holds at least its pages'
    uncompressed size and 8 bytes a value (what run-length-encoded values expand to)."""
    check_rows(path, max(meta.num_rows, sum(meta.row_group(g).num_rows for g in range(meta.num_row_groups))), max_rows)
    total, first_row = 0, 0
    for g in range(meta.num_row_groups):
        group = meta.row_group(g)
        per_column: dict[str, int] = {}
        for c in range(group.num_columns):
            chunk = group.column(c)
            size = max(chunk.total_uncompressed_size, chunk.num_values * FIXED)
            top = chunk.path_in_schema.split(".")[0]
            per_column[top] = per_column.get(top, 0) + size
        for name, size in per_column.items():
            if group.num_rows == 1 and size > max_cell:
                raise DataFileError(f"{path}, row {first_row}: column {name!r} holds {over_cell(max_cell)}")
        total += sum(per_column.values())
        if total > max_file:
            raise DataFileError(f"{path}: its rows decode to {over(max_file, 'byte', 'MAX_FILE_BYTES')}")
        first_row += group.num_rows
