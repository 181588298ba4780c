"""A table as rows of text cells, built once and shown twice: a rich table on the console and Markdown in a file. The
first ``left`` columns are left-aligned (names), the rest right-aligned (numbers)."""

from __future__ import annotations

from collections.abc import Sequence


def rich_table(columns: Sequence[str], rows: Sequence[Sequence[str]], title: str | None = None, left: int = 1):
    from rich.table import Table

    table = Table(title=title)
    for i, col in enumerate(columns):
        table.add_column(col, justify="left" if i < left else "right")
    for row in rows:
        table.add_row(*row)
    return table


def markdown(columns: Sequence[str], rows: Sequence[Sequence[str]], left: int = 1) -> list[str]:
    """The Markdown lines: the header, the alignment row, then one line per row."""
    align = "|" + "---|" * left + "---:|" * (len(columns) - left)
    return [_line(columns), align, *map(_line, rows)]


def _line(cells: Sequence[str]) -> str:
    return "| " + " | ".join(cells) + " |"
