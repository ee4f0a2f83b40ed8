"""A store's table beside the committed one: which cells differ, and by how much.

Both reports compare the same way. Each suite's task brings its pieces in a
:class:`ReportKind` (its case table, its summaries, the cells of its tables
and how it prints them); :func:`main_table` selects and aggregates a store by
the report's rules, and :func:`comparison_lines` sets this store's summary
beside the committed one's, then compares every number of the two tables
(each variant's summary and each case's metric and change at the table's
tau) exactly: equal means equal to the last bit, and each number that
differs is listed with both values and the difference, the largest first.
The run contexts are compared too, field by field (the CPU by name): that is
a fact about the two tables' runs; what ``eval`` did with them (computed or
copied) is said from the session records (:mod:`eval.paper.origins`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eval.errors import ReportError
from eval.markdown import markdown_table
from eval.paper.record import RunRecord
from eval.paper.reference import CommittedStore
from eval.paper.selection import one_run_per_case, planned_cases, select_context, short
from eval.paper.store import load_records

__all__ = [
    "CellComparison",
    "CellDifference",
    "MainTable",
    "ReportKind",
    "compare_cells",
    "comparison_lines",
    "main_table",
]

Cells = Mapping[tuple[str, str], "float | int | None"]
"""The numbers of a report's tables by (row, column)."""

_LISTED = 10
"""How many differing cells the comparison lists."""


@dataclass(frozen=True)
class ReportKind:
    """What a suite's task brings to the steps both reports share.

    Attributes:
        tabulate: Runs -> the case table (rows with ``run``, ``baseline``, ``paired``).
        summarise: (case table, planned cases) -> one summary per retrofit variant
            (each with ``mode``, ``tau``, ``support``, ``eps_den``).
        cells: (case table, summaries at tau, tau) -> the numbers of its tables.
        headline: (summaries at tau, tau) -> the summary table's lines.
        beside: (this store's summaries, the committed ones) -> the two side by side.
    """

    tabulate: Callable[[Sequence[RunRecord]], list[Any]]
    summarise: Callable[[Sequence[Any], Sequence[tuple[str, int]]], list[Any]]
    cells: Callable[[Sequence[Any], Sequence[Any], float], Cells]
    headline: Callable[[Sequence[Any], float], list[str]]
    beside: Callable[[Sequence[Any], Sequence[Any]], list[str]]


@dataclass(frozen=True)
class MainTable:
    """The runs a report of a store counts, their case table and the summaries at its tau."""

    runs: list[RunRecord]
    table: list[Any]
    summaries: list[Any]


def main_table(
    store: str | Path, suite: str, *, tau: float, checkpoint: str | None, kind: ReportKind
) -> MainTable:
    """The runs, case table and summaries at ``tau`` a report of ``store`` uses.

    Raises:
        ReportError: If the store has no matching runs, or holds a case twice.
    """
    runs, _ = select_context(load_records(store), suite, checkpoint, tau=tau)
    one_run_per_case(runs)
    table = kind.tabulate(runs)
    summaries = [s for s in kind.summarise(table, planned_cases(suite)) if s.tau == tau]
    return MainTable(runs=runs, table=table, summaries=summaries)


@dataclass(frozen=True)
class CellDifference:
    """One number of the two tables that differs.

    Attributes:
        row: The table row (a variant, or ``dataset/seed``).
        column: The column (``"mean delta"``, ``"RMSE Full-O"``...).
        yours: This store's value (``None``: not a number, e.g. a failed run).
        committed: The committed table's value.
    """

    row: str
    column: str
    yours: float | None
    committed: float | None

    @property
    def difference(self) -> float | None:
        """``yours - committed`` (``None`` unless both are numbers)."""
        if self.yours is None or self.committed is None:
            return None
        return self.yours - self.committed

    @property
    def relative(self) -> float | None:
        """The difference relative to the committed value (``None`` where that is 0 or none)."""
        difference = self.difference
        if difference is None or not self.committed:
            return None
        return difference / abs(self.committed)


@dataclass(frozen=True)
class CellComparison:
    """Every number two tables share, compared exactly.

    Attributes:
        compared: Cells in both tables.
        differing: Those that differ: a number against none first, then by
            relative difference, largest first; differences from zero last.
        only_yours: Cells of this store's table alone.
        only_committed: Cells of the committed table alone.
    """

    compared: int
    differing: tuple[CellDifference, ...]
    only_yours: tuple[tuple[str, str], ...]
    only_committed: tuple[tuple[str, str], ...]


def _same(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return a == b or (math.isnan(a) and math.isnan(b))


def _size(d: CellDifference) -> tuple[int, float]:
    if d.difference is None:
        return (2, math.inf)
    if d.relative is None:
        return (0, abs(d.difference))
    return (1, abs(d.relative))


def compare_cells(mine: Cells, theirs: Cells) -> CellComparison:
    """Compares two tables' numbers by (row, column), exactly."""
    shared = [cell for cell in mine if cell in theirs]
    differing = [
        CellDifference(row, column, mine[row, column], theirs[row, column])
        for row, column in shared
        if not _same(mine[row, column], theirs[row, column])
    ]
    return CellComparison(
        compared=len(shared),
        differing=tuple(sorted(differing, key=_size, reverse=True)),
        only_yours=tuple(cell for cell in mine if cell not in theirs),
        only_committed=tuple(cell for cell in theirs if cell not in mine),
    )


def _number(value: float | None, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


def _difference_cells(d: CellDifference) -> list[object]:
    return [d.row, d.column, _number(d.yours, ".10g"), _number(d.committed, ".10g"),
            _number(d.difference, "+.3g"), _number(d.relative, "+.2e")]  # fmt: skip


def _largest_by_column(differing: Sequence[CellDifference]) -> str:
    """``"RMSE unpatched 2.1e-07 (abalone/1), ..."``: each column's largest relative difference."""
    largest: dict[str, CellDifference] = {}
    for d in differing:
        if d.relative is not None and (
            d.column not in largest or abs(d.relative) > abs(largest[d.column].relative)
        ):
            largest[d.column] = d
    return ", ".join(f"{c} {abs(d.relative):.2e} ({d.row})" for c, d in largest.items())


def _cell_lines(comparison: CellComparison) -> list[str]:
    n, differing = comparison.compared, comparison.differing
    if not differing:
        lines = [f"All {n} numbers of the two tables (summary and per case) are equal, to the "
                 "last bit."]  # fmt: skip
    else:
        lines = [
            f"{len(differing)} of the {n} numbers of the two tables (summary and per case) "
            f"differ; the other {n - len(differing)} are equal to the last bit. "
            + ("The largest:" if len(differing) > _LISTED else "They are:"),
            "",
            *markdown_table(
                ("row", "column", "yours", "committed", "difference", "relative"),
                [_difference_cells(d) for d in differing[:_LISTED]],
            ),
        ]
        if len(differing) > _LISTED:
            lines.append(f"... and {len(differing) - _LISTED} more (cases.csv of each store).")
        by_column = _largest_by_column(differing)
        if by_column:
            lines += ["", "The largest relative difference in each column: " + by_column + "."]
    for cells, whose in ((comparison.only_yours, "this store's table"),
                         (comparison.only_committed, "the committed table")):  # fmt: skip
        if cells:
            shown = ", ".join(f"{row} {column}" for row, column in cells[:3])
            more = f" and {len(cells) - 3} more" if len(cells) > 3 else ""
            lines.append(f"{len(cells)} numbers are in {whose} alone: {shown}{more}.")
    return lines


def _context_line(mine: RunRecord, theirs: RunRecord) -> str:
    differ = mine.context.differences(theirs.context)
    if not differ:
        return (
            "The two tables' runs share one run context (checkpoint, settings, code, packages "
            "and CPU)."
        )
    named = ", ".join(
        f"{name} (yours: {short(a)!r}; committed: {short(b)!r})" for name, (a, b) in differ.items()
    )
    return f"The two tables' runs were made in different run contexts: {named}."


def comparison_lines(
    store: str | Path,
    committed: CommittedStore,
    suite: str,
    tau: float,
    checkpoint: str | None,
    kind: ReportKind,
) -> list[str]:
    """This store's table beside the committed one, the numbers that differ, and the contexts.

    Args:
        store: The store just reported.
        committed: The committed store (or why there is none).
        suite: Suite name.
        tau: The tau of the main table.
        checkpoint: The SHA-256 prefix reported (``report --checkpoint``): its
            table alone, as a chosen checkpoint has no committed counterpart.
        kind: The suite task's pieces.

    Returns:
        Lines to print: without a committed table, this store's table alone
        and why; else the two summaries side by side (each number of both to
        the same digits), the numbers that differ and by how much, and the
        run-context fields in which the two tables' runs differ.
    """
    mine = main_table(store, suite, tau=tau, checkpoint=checkpoint, kind=kind)
    alone = [f"tau = {tau:g}: this store ({store})", "", *kind.headline(mine.summaries, tau), ""]
    if checkpoint:
        return [*alone, f"(checkpoint {checkpoint} chosen: not compared with a committed table)"]
    if committed.path is None:
        return [*alone, f"(not compared with a committed table: {committed.absent_because})"]
    try:
        theirs = main_table(committed.path, suite, tau=tau,
                            checkpoint=mine.runs[0].checkpoint_sha256, kind=kind)  # fmt: skip
    except ReportError as exc:
        return [*alone, f"(not compared: the committed store {committed.path} has no table of "
                f"this checkpoint at tau {tau:g}: {exc})"]  # fmt: skip
    lines = [f"tau = {tau:g}: this store ({store}) beside the committed table ({committed.path})",
             "", *kind.beside(mine.summaries, theirs.summaries), ""]  # fmt: skip
    cells = kind.cells(mine.table, mine.summaries, tau)
    lines += _cell_lines(compare_cells(cells, kind.cells(theirs.table, theirs.summaries, tau)))
    return [*lines, "", _context_line(mine.runs[0], theirs.runs[0])]
