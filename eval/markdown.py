"""The one Markdown table renderer of the reports.

A report function computes its table as data (a header and rows of cells) and
renders it here, so that selection and formatting never interleave with
``"|---|"`` lines. tabulate is not a dependency, so ``DataFrame.to_markdown``
is not available; this is the small helper instead.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

_SEPARATORS = {"l": "---", "r": "---:", "c": ":---:"}
"""Alignment letter to separator cell. Left is Markdown's default, written ``---``."""


def _cell(value: object) -> str:
    """One cell's text: ``str(value)`` on one line, with ``|`` escaped."""
    text = str(value).replace("\r\n", " ").replace("\n", " ").replace("\r", " ")
    return text.replace("|", "\\|")


def _line(cells: Sequence[object]) -> str:
    # An empty cell is written "| |", not "|  |", as the hand-written tables did.
    return "|" + "|".join(f" {c} " if c else " " for c in map(_cell, cells)) + "|"


def markdown_table(
    header: Sequence[str],
    rows: Iterable[Sequence[object]],
    *,
    align: Sequence[str] | None = None,
) -> list[str]:
    """Render a table as Markdown lines (header, separator, one line per row).

    Args:
        header: Column titles.
        rows: One sequence of cells per row, as many cells as ``header`` has;
            each cell is written as ``str(cell)``, with ``|`` escaped and line
            breaks turned into spaces so that a cell cannot break the table.
        align: One letter per column: ``"l"`` (left, written ``---``), ``"r"``
            (``---:``) or ``"c"`` (``:---:``); a string such as ``"llr"`` works.
            Default: every column left.

    Returns:
        The table's lines, without a trailing blank line.

    Raises:
        ValueError: If a row or ``align`` does not have one entry per column,
            or ``align`` holds a letter other than ``l``, ``r`` and ``c``.
    """
    n = len(header)
    letters = "l" * n if align is None else align
    if len(letters) != n:
        raise ValueError(f"align has {len(letters)} entries for {n} columns")
    bad = sorted({a for a in letters if a not in _SEPARATORS})
    if bad:
        raise ValueError(f"unknown alignment {bad}; use 'l', 'r' or 'c'")
    lines = [_line(header), "|" + "|".join(_SEPARATORS[a] for a in letters) + "|"]
    for i, row in enumerate(rows):
        cells = list(row)
        if len(cells) != n:
            raise ValueError(f"row {i} has {len(cells)} cells for {n} columns: {cells!r}")
        lines.append(_line(cells))
    return lines
