"""The regression report, built only from stored results: cases.csv, summary.md, figures.

Reads the runs of a suite's store (``runs/*.json``, :mod:`eval.paper.store`),
the carrier statistics (``carriers/``, :mod:`eval.paper.carriers`) and the
session records (``sessions/``), and writes, as one set that replaces the
previous set whole (``retrofit.files.atomic_file_set``):

* ``cases.csv``: one row per case x variant x tau, with its paired baseline
  RMSE, ``delta_pct = 100 * (rmse - rmse_none) / rmse_none`` and provenance;
* ``summary.md``: per-case table at the default tau, mean / median / #worse
  beside the paper's numbers, times, the tau sweep and the carrier scale;
* ``deltas.png``: per-case deltas, both retrofits, grouped bars, zero line;
* ``tau_sweep.csv`` and ``tau_sweep.png``: mean delta vs tau (when swept).

Nothing is recomputed here, and nothing is written unless the store holds runs.
The steps are modules of their own: which runs count
(:mod:`eval.paper.selection`), the data (:mod:`eval.paper.tables`), the
figures (:mod:`eval.paper.figures`), the text (:mod:`eval.paper.summary_text`)
and what ``report`` prints (:mod:`eval.paper.report_output`).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from eval.errors import ReportError
from eval.locations import default_output
from eval.paper.comparison import ReportKind
from eval.paper.completeness import completeness, planned_taus, require_complete
from eval.paper.figures import plot_deltas, plot_sweep
from eval.paper.reference import committed_store
from eval.paper.report_output import report_lines
from eval.paper.selection import main_tau, one_run_per_case, planned_cases, select_context
from eval.paper.store import iter_sessions, load_carriers, load_records
from eval.paper.summary_text import SummaryInputs, beside_lines, summary_lines, summary_text
from eval.paper.tables import CASE_COLUMNS, SWEEP_COLUMNS, aggregate, case_table, table_cells
from retrofit.files import atomic_file_set, write_text_atomic

__all__ = ["REGRESSION", "REPORT_FILES", "build_report", "csv_text", "report_command"]

REPORT_FILES: tuple[str, ...] = (
    "cases.csv",
    "summary.md",
    "deltas.png",
    "tau_sweep.csv",
    "tau_sweep.png",
)
"""The files one report writes, replaced together (``retrofit.files.atomic_file_set``)."""

REGRESSION = ReportKind(
    tabulate=case_table,
    summarise=aggregate,
    cells=table_cells,
    headline=summary_lines,
    beside=beside_lines,
)
"""The regression report's pieces, for the steps both reports share."""


def csv_text(rows: Iterable[dict[str, Any]], columns: Sequence[str]) -> str:
    """CSV of ``rows`` (each a field -> value mapping) with ``columns``; ``None`` is empty."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(columns), lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({c: "" if row.get(c) is None else row.get(c) for c in columns})
    return buf.getvalue()


def build_report(
    store: str | Path,
    suite: str,
    *,
    out_dir: str | Path | None = None,
    tau: float | None = None,
    checkpoint: str | None = None,
    partial: bool = False,
) -> dict[str, Path]:
    """Build every report file of a suite from its stored results.

    Args:
        store: The suite's results directory (holds ``runs/``).
        suite: Suite name.
        out_dir: Where to write (default: ``store``).
        tau: The tau of the main table and figure (None: :func:`main_tau`).
        checkpoint: SHA-256 prefix to report (default: the latest context).
        partial: Report a store that lacks some of the suite's planned runs
            at ``tau`` (``summary.md`` names them); else such a store is refused.

    Returns:
        Paths written, by name.

    Raises:
        ReportError: If the store has no matching runs, or lacks planned runs
            and ``partial`` is false (nothing is written then).
    """
    store = Path(store)
    out = Path(out_dir) if out_dir is not None else store
    tau = main_tau(store, suite, checkpoint, tau)
    runs, notes = select_context(load_records(store), suite, checkpoint, tau=tau)
    one_run_per_case(runs)
    table = case_table(runs)
    summaries = aggregate(table, planned_cases(suite))
    stored_taus = sorted({s.tau for s in summaries if s.tau is not None})
    if stored_taus and tau not in stored_taus:
        # Without this, an empty table would replace the store's summary.
        raise ReportError(
            f"no stored runs at tau {tau:g}; the store has tau "
            + ", ".join(f"{t:g}" for t in stored_taus)
        )
    state = completeness(suite, runs, tau, planned_taus(runs, tau, store))
    require_complete(state, store, partial=partial)
    checkpoint_sha256 = runs[0].checkpoint_sha256
    carriers = load_carriers(store, checkpoint_sha256)
    main = [s for s in summaries if s.tau == tau]
    sweep_taus = sorted({s.tau for s in summaries})
    sweep = [s for s in summaries if s.support == (main[0].support if main else s.support)]
    sessions = [s for s in iter_sessions(store) if s.checkpoint_sha256 == checkpoint_sha256]
    names: list[str] = []
    # The files are one set: a report killed or failing half-way leaves the
    # previous set whole (summary.md always describes the cases.csv beside it).
    with atomic_file_set(out, REPORT_FILES) as staging:
        cases = csv_text((row.csv_fields() for row in table), CASE_COLUMNS)
        write_text_atomic(staging / "cases.csv", cases)
        names.append("cases.csv")
        if len(sweep_taus) > 1:
            swept = csv_text((s.csv_fields() for s in sweep), SWEEP_COLUMNS)
            write_text_atomic(staging / "tau_sweep.csv", swept)
            plot_sweep(sweep, carriers, tau, staging / "tau_sweep.png")
            names += ["tau_sweep.csv", "tau_sweep.png"]
        if plot_deltas(table, tau, staging / "deltas.png"):
            names.append("deltas.png")
        inputs = SummaryInputs(store=store, suite=suite, runs=runs, table=table, main=main,
                               sweep=sweep, sweep_taus=sweep_taus, carriers=carriers, tau=tau,
                               notes=notes, state=state, sessions=sessions)  # fmt: skip
        write_text_atomic(staging / "summary.md", summary_text(inputs))
        names.append("summary.md")
    return {name: out / name for name in names}


def report_command(args: Any) -> int:
    """Run ``tabpfn-retrofit report`` for a regression suite; returns the exit status.

    Raises:
        ReportError: Nothing to report (the command line makes it one line, exit 2).
        StoreError: A run file is unreadable.
        CommandError: ``--committed`` names no committed store.
    """
    store = Path(args.store) if args.store else default_output(args.suite)
    committed = committed_store(getattr(args, "committed", None), args.suite, store)
    tau = main_tau(store, args.suite, args.checkpoint, args.tau)
    written = build_report(
        store,
        args.suite,
        out_dir=args.out,
        tau=tau,
        checkpoint=args.checkpoint,
        partial=getattr(args, "partial", False),
    )
    print("\n".join(report_lines(store=store, suite=args.suite, tau=tau,
                                 checkpoint=args.checkpoint, written=written,
                                 committed=committed, kind=REGRESSION)))  # fmt: skip
    return 0
