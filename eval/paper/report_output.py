"""What ``tabpfn-retrofit report`` prints, for either kind of suite.

After the files it wrote: what the selection left out, how many planned runs
are stored, what the store's eval sessions did with the table's runs
(computed or copied: :mod:`eval.paper.origins`), and the table beside the
committed one (:mod:`eval.paper.comparison`). Each line says what happened,
from the store's records.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from eval.paper.comparison import ReportKind, comparison_lines
from eval.paper.completeness import completeness, planned_taus
from eval.paper.origins import run_origins
from eval.paper.reference import CommittedStore
from eval.paper.selection import select_context
from eval.paper.store import load_records

__all__ = ["report_lines"]


def report_lines(
    *,
    store: Path,
    suite: str,
    tau: float,
    checkpoint: str | None,
    written: Mapping[str, Path],
    committed: CommittedStore,
    kind: ReportKind,
) -> list[str]:
    """The lines ``report`` prints once its files are written.

    Args:
        store: The store reported.
        suite: Suite name.
        tau: The main table's tau.
        checkpoint: The SHA-256 prefix reported, if one was chosen.
        written: The files written, by name.
        committed: The committed store to compare with (or why there is none).
        kind: The suite task's report pieces.
    """
    runs, notes = select_context(load_records(store), suite, checkpoint, tau=tau)
    lines = [f"wrote {path}" for path in written.values()]
    lines += [f"note: {note}" for note in notes]  # in summary.md too; said so nothing is unseen
    lines.append(completeness(suite, runs, tau, planned_taus(runs, tau, store)).line())
    lines.append(run_origins(store, runs).sentence())
    return [*lines, "", *comparison_lines(store, committed, suite, tau, checkpoint, kind)]
