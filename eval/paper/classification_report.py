"""The report of a classification suite, built only from stored results.

The paper's question for classifiers: does the active path move? The changes
of each retrofit against the unpatched run of its case are the data of
:mod:`eval.paper.classification_tables`. It writes ``cases.csv`` (one row per
case x variant x tau) and ``summary.md`` (mean and median change per variant,
per-case table) as one set. The rows of one context are reported and each
case once, by the rules both reports share (:mod:`eval.paper.selection`);
``report`` prints what the regression report prints
(:mod:`eval.paper.report_output`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from eval.locations import default_output
from eval.markdown import markdown_table
from eval.paper.classification_tables import (
    CLASSIFICATION_CASE_COLUMNS,
    MODE_LABEL,
    ClassificationCaseRow,
    ClassificationSummary,
    classification_aggregate,
    classification_case_table,
    classification_cells,
)
from eval.paper.comparison import ReportKind
from eval.paper.completeness import Completeness, completeness, planned_taus, require_complete
from eval.paper.record import RunRecord
from eval.paper.reference import committed_store
from eval.paper.report import csv_text
from eval.paper.report_output import report_lines
from eval.paper.selection import main_tau, one_run_per_case, planned_cases, select_context
from eval.paper.store import load_records
from retrofit.files import atomic_file_set, write_text_atomic

__all__ = [
    "CLASSIFICATION",
    "CLASSIFICATION_CASE_COLUMNS",
    "CLASSIFICATION_REPORT_FILES",
    "build_classification_report",
    "classification_report_command",
]

CLASSIFICATION_REPORT_FILES: tuple[str, ...] = ("cases.csv", "summary.md")
"""The files one classification report writes, replaced together."""

_MISSING_LISTED = 40
"""How many missing runs summary.md lists by name."""

_SUMMARY_HEADER = ("variant", "cases", "log loss mean", "log loss median", "accuracy mean",
                   "ROC AUC mean", "#worse (log loss)", "#failed", "#missing")  # fmt: skip
_PER_CASE_HEADER = ("dataset", "seed", "variant", "log loss", "unpatched", "change", "accuracy",
                    "change (pp)", "ROC AUC", "change (pp)")  # fmt: skip
_BESIDE_HEADER = ("variant", "cases (yours / committed)", "log loss mean (yours)",
                  "log loss mean (committed)", "accuracy mean (yours)",
                  "accuracy mean (committed)", "#worse (yours / committed)")  # fmt: skip


def _fmt(value: Any, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


def summary_lines(main: Sequence[ClassificationSummary], tau: float) -> list[str]:
    """The summary table (as in ``summary.md``); ``tau`` is in the text around it."""
    return markdown_table(
        _SUMMARY_HEADER,
        [
            [
                MODE_LABEL.get(s.mode, s.mode),
                s.n,
                _fmt(s.mean("log_loss"), "+.3f") + " %",
                _fmt(s.median("log_loss"), "+.3f") + " %",
                _fmt(s.mean("accuracy"), "+.3f") + " pp",
                _fmt(s.mean("roc_auc"), "+.4f") + " pp",
                s.worse,
                s.failed,
                s.missing,
            ]
            for s in main
        ],
    )


def beside_lines(
    mine: Sequence[ClassificationSummary], theirs: Sequence[ClassificationSummary]
) -> list[str]:
    """This store's headline numbers beside the committed table's, both to the same digits."""
    by_variant = {(s.mode, s.support, s.eps_den): s for s in theirs}
    rows = []
    for a in mine:
        b = by_variant.get((a.mode, a.support, a.eps_den))
        rows.append(
            [
                MODE_LABEL.get(a.mode, a.mode),
                f"{a.n} / {b.n if b else '-'}",
                _fmt(a.mean("log_loss"), "+.3f") + " %",
                _fmt(b.mean("log_loss") if b else None, "+.3f") + " %",
                _fmt(a.mean("accuracy"), "+.3f") + " pp",
                _fmt(b.mean("accuracy") if b else None, "+.3f") + " pp",
                f"{a.worse} / {b.worse if b else '-'}",
            ]
        )
    return markdown_table(_BESIDE_HEADER, rows)


CLASSIFICATION = ReportKind(
    tabulate=classification_case_table,
    summarise=classification_aggregate,
    cells=classification_cells,
    headline=summary_lines,
    beside=beside_lines,
)
"""The classification report's pieces, for the steps both reports share."""


def _per_case_rows(table: Sequence[ClassificationCaseRow], tau: float) -> list[list[object]]:
    return [
        [
            r.run.dataset,
            r.run.seed,
            MODE_LABEL.get(r.run.mode, r.run.mode),
            _fmt(r.run.log_loss, ".5f") if r.run.ok else r.run.status,
            _fmt(r.baseline_metric("log_loss"), ".5f"),
            _fmt(r.change("log_loss"), "+.3f") + " %",
            _fmt(r.run.accuracy, ".4f"),
            _fmt(r.change("accuracy"), "+.2f"),
            _fmt(r.run.roc_auc, ".5f"),
            _fmt(r.change("roc_auc"), "+.4f"),
        ]
        for r in table
        if r.run.mode != "none" and r.run.tau == tau
    ]


def _summary_text(
    suite: str, runs: Sequence[RunRecord], table: Sequence[ClassificationCaseRow],
    main: Sequence[ClassificationSummary], tau: float, notes: Sequence[str], state: Completeness,
) -> str:  # fmt: skip
    first = runs[0]
    lines = [
        f"# {suite}: how far the retrofit moves a classifier's active path",
        "",
        f"Checkpoint `{str(first.checkpoint_sha256)[:12]}` ({first.model}), "
        f"n_estimators {first.n_estimators}, dtype {first.dtype}, tau {tau:g}, "
        f"tabpfn {first.version('tabpfn')}, torch {first.version('torch')}. Changes "
        "against the unpatched host on the same split and seed: log loss relative (%), "
        "accuracy and macro one-vs-rest ROC AUC absolute (points of 100).",
        "",
        f"Planned runs {state.where}: {len(state.planned)}; stored "
        f"{len(state.planned) - len(state.missing)} ({len(state.failed)} failed); missing "
        f"(never stored): {len(state.missing)}"
        + (" (**a partial report**)." if state.missing else "."),
        "",
        *summary_lines(main, tau),
        "",
        "## Per case",
        "",
        *markdown_table(_PER_CASE_HEADER, _per_case_rows(table, tau)),
        "",
    ]
    if state.missing:
        lines += ["## Missing runs (planned, never stored)", ""]
        lines += [f"- {run.label}" for run in state.missing[:_MISSING_LISTED]]
        if len(state.missing) > _MISSING_LISTED:
            lines.append(f"- and {len(state.missing) - _MISSING_LISTED} more")
        lines.append("")
    if notes:
        lines += ["## Left out", "", *(f"- {n}" for n in notes), ""]
    return "\n".join(lines)


def build_classification_report(
    store: str | Path,
    suite: str,
    *,
    out_dir: str | Path | None = None,
    tau: float | None = None,
    checkpoint: str | None = None,
    partial: bool = False,
) -> dict[str, Path]:
    """Build ``cases.csv`` and ``summary.md`` of a classification suite from its store.

    Args:
        store: The suite's results directory (holds ``runs/``).
        suite: A classification suite.
        out_dir: Where to write (default: ``store``).
        tau: The tau of the main table (None: the host's default, as recorded by eval).
        checkpoint: SHA-256 prefix to report (default: the fullest context).
        partial: Report a store that lacks some of the suite's planned runs
            (``summary.md`` names them); else such a store is refused.

    Returns:
        Paths written, by name.

    Raises:
        ReportError: If the store has no matching runs, holds a case twice, or
            lacks planned runs and ``partial`` is false (nothing is written then).
    """
    store = Path(store)
    out = Path(out_dir) if out_dir is not None else store
    tau = main_tau(store, suite, checkpoint, tau)
    runs, notes = select_context(load_records(store), suite, checkpoint, tau=tau)
    one_run_per_case(runs)
    state = completeness(suite, runs, tau, planned_taus(runs, tau, store))
    require_complete(state, store, partial=partial)
    table = classification_case_table(runs)
    main = [s for s in classification_aggregate(table, planned_cases(suite)) if s.tau == tau]
    with atomic_file_set(out, CLASSIFICATION_REPORT_FILES) as staging:
        cases = csv_text((row.csv_fields() for row in table), CLASSIFICATION_CASE_COLUMNS)
        write_text_atomic(staging / "cases.csv", cases)
        text = _summary_text(suite, runs, table, main, tau, notes, state)
        write_text_atomic(staging / "summary.md", text)
    return {name: out / name for name in CLASSIFICATION_REPORT_FILES}


def classification_report_command(args: Any) -> int:
    """``tabpfn-retrofit report`` for a classification suite; returns the exit status.

    Prints what the regression report prints: the files, the planned runs,
    what the eval sessions did with them, and the table beside the committed
    store's (``--committed``: a folder, ``none``, or the checkout's
    ``results/SUITE`` by default; never the store itself).

    Raises:
        ReportError: Nothing to report (the command line makes it one line, exit 2).
        CommandError: ``--committed`` names no committed store.
    """
    store = Path(args.store) if args.store else default_output(args.suite)
    committed = committed_store(getattr(args, "committed", None), args.suite, store)
    tau = main_tau(store, args.suite, args.checkpoint, args.tau)
    written = build_classification_report(
        store,
        args.suite,
        out_dir=args.out,
        tau=tau,
        checkpoint=args.checkpoint,
        partial=getattr(args, "partial", False),
    )
    print("\n".join(report_lines(store=store, suite=args.suite, tau=tau,
                                 checkpoint=args.checkpoint, written=written,
                                 committed=committed, kind=CLASSIFICATION)))  # fmt: skip
    return 0
