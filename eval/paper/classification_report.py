"""The report of a classification suite, built only from stored results.

The paper's question for classifiers: does the active path move? Each
retrofit run is paired with the unpatched run of its case (same split, seed,
checkpoint and ensemble) and three changes are measured:

* log loss, relative: ``100 * (log_loss - log_loss_none) / log_loss_none`` (%),
  as RMSE is for regression;
* accuracy, absolute: ``100 * (accuracy - accuracy_none)`` (percentage points);
* ROC AUC (macro one-vs-rest), absolute: ``100 * (roc_auc - roc_auc_none)`` (points).

It writes ``cases.csv`` (one row per case x variant x tau) and ``summary.md``
(mean and median change per variant, per-case table) as one set. The rows of
one context are reported and each case once, by the regression report's rules
(:func:`eval.paper.report.select_context`, :func:`~eval.paper.report.one_run_per_case`);
the regression report itself is not touched by classification suites.
"""

from __future__ import annotations

import csv
import io
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from eval.errors import ReportError
from eval.locations import default_output
from eval.markdown import markdown_table
from eval.paper.completeness import (
    Completeness,
    completeness,
    pair_counts,
    planned_taus,
    require_complete,
)
from eval.paper.datasets import SUITE_DATASETS
from eval.paper.reference import committed_store
from eval.paper.report import (
    main_table,
    main_tau,
    one_run_per_case,
    planned_cases,
    select_context,
)
from eval.paper.store import load_rows
from retrofit.files import atomic_file_set, write_text_atomic

__all__ = [
    "CLASSIFICATION_CASE_COLUMNS",
    "CLASSIFICATION_REPORT_FILES",
    "build_classification_report",
    "classification_aggregate",
    "classification_case_table",
    "classification_report_command",
]

CLASSIFICATION_CASE_COLUMNS: tuple[str, ...] = (
    "dataset",
    "seed",
    "mode",
    "tau",
    "support",
    "eps_den",
    "status",
    "log_loss",
    "log_loss_none",
    "log_loss_delta_pct",
    "accuracy",
    "accuracy_none",
    "accuracy_delta_pp",
    "roc_auc",
    "roc_auc_none",
    "roc_auc_delta_pts",
    "n_train",
    "n_test",
    "n_features",
    "fit_s",
    "predict_s",
    "n_estimators",
    "checkpoint_sha256",
    "code_sha256",
    "dtype",
    "resolved_dtype",
    "patch_digest",
    "error",
    "key",
)
"""Columns of a classification suite's ``cases.csv``, in order."""

CLASSIFICATION_REPORT_FILES: tuple[str, ...] = ("cases.csv", "summary.md")
"""The files one classification report writes, replaced together."""

_MODE_ORDER = {"none": 0, "oattention": 1, "full-o": 2}
_MODE_LABEL = {"oattention": "OAttention", "full-o": "Full-O"}
_DELTAS = ("log_loss_delta_pct", "accuracy_delta_pp", "roc_auc_delta_pts")
_MISSING_LISTED = 40
"""How many missing runs summary.md lists by name."""


def _delta(row: dict[str, Any], base: dict[str, Any] | None, metric: str) -> float | None:
    value, reference = row.get(metric), (base or {}).get(metric)
    if row.get("status") != "ok" or not base or base.get("status") != "ok":
        return None
    if value is None or reference is None:
        return None
    if metric == "log_loss":
        return 100.0 * (value - reference) / reference if reference else None
    return 100.0 * (value - reference)


def classification_case_table(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One record per stored run with its paired baseline's metrics and the changes.

    Returns:
        Records with :data:`CLASSIFICATION_CASE_COLUMNS`, sorted by suite order,
        seed, variant and tau.
    """
    by_key = {r["key"]: r for r in rows}
    table = []
    for row in rows:
        base = by_key.get(row.get("baseline_key"))
        record = {c: row.get(c) for c in CLASSIFICATION_CASE_COLUMNS}
        for metric, delta in zip(("log_loss", "accuracy", "roc_auc"), _DELTAS, strict=True):
            record[f"{metric}_none"] = base.get(metric) if base else None
            record[delta] = _delta(row, base, metric)
        # status_none (not a column): the baseline's status, None if it was never stored.
        record["status_none"] = base.get("status") if base else None
        table.append(record)
    names = [name for suite_names in SUITE_DATASETS.values() for name in suite_names]
    order = {name: i for i, name in enumerate(dict.fromkeys(names))}
    table.sort(
        key=lambda r: (
            order.get(r["dataset"], len(order)),
            int(r["seed"]),
            _MODE_ORDER.get(r["mode"], 9),
            r["tau"] if r["tau"] is not None else -1.0,
        )
    )
    return table


def classification_aggregate(
    table: Sequence[dict[str, Any]], cases: Sequence[tuple[str, int]] | None = None
) -> list[dict[str, Any]]:
    """Per retrofit variant: paired cases, mean and median of each change, #worse.

    Args:
        table: :func:`classification_case_table` records.
        cases: The planned (dataset, seed) cases (default: those in ``table``).

    Returns:
        One record per (mode, tau, support, eps_den): ``n`` (cases with every
        change), ``mean_<delta>`` and ``median_<delta>`` for each change,
        ``worse`` (log loss up), ``failed`` (the run or its baseline stored
        with a failure), ``missing`` (the run or its baseline never stored).
    """
    if cases is None:
        cases = [(r["dataset"], r["seed"]) for r in table]
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for rec in table:
        if rec["mode"] != "none":
            key = (rec["mode"], rec["tau"], rec["support"], rec["eps_den"])
            groups.setdefault(key, []).append(rec)
    out = []
    for (mode, tau, support, eps_den), recs in sorted(
        groups.items(), key=lambda kv: (_MODE_ORDER.get(kv[0][0], 9), kv[0][1])
    ):
        paired = [r for r in recs if r["log_loss_delta_pct"] is not None]
        counts = pair_counts(recs, cases, "log_loss_delta_pct")
        record: dict[str, Any] = {
            "mode": mode,
            "tau": tau,
            "support": support,
            "eps_den": eps_den,
            "n": len(paired),
            "worse": sum(r["log_loss_delta_pct"] > 0 for r in paired),
            "failed": counts["failed"],
            "missing": counts["missing"],
        }
        for delta in _DELTAS:
            values = [r[delta] for r in paired if r[delta] is not None]
            record[f"mean_{delta}"] = statistics.fmean(values) if values else None
            record[f"median_{delta}"] = statistics.median(values) if values else None
        out.append(record)
    return out


def _fmt(value: Any, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


def _summary_text(
    suite: str, rows: Sequence[dict[str, Any]], table: Sequence[dict[str, Any]],
    main: Sequence[dict[str, Any]], tau: float, notes: Sequence[str], state: Completeness,
) -> str:  # fmt: skip
    first = rows[0]
    lines = [
        f"# {suite}: how far the retrofit moves a classifier's active path",
        "",
        f"Checkpoint `{str(first.get('checkpoint_sha256'))[:12]}` ({first.get('model')}), "
        f"n_estimators {first.get('n_estimators')}, dtype {first.get('dtype')}, tau {tau:g}, "
        f"tabpfn {first.get('tabpfn_version')}, torch {first.get('torch_version')}. Changes "
        "against the unpatched host on the same split and seed: log loss relative (%), "
        "accuracy and macro one-vs-rest ROC AUC absolute (points of 100).",
        "",
        f"Planned runs {state.where}: {len(state.planned)}; stored "
        f"{len(state.planned) - len(state.missing)} ({len(state.failed)} failed); missing "
        f"(never stored): {len(state.missing)}"
        + (" (**a partial report**)." if state.missing else "."),
        "",
        *markdown_table(
            (
                "variant",
                "cases",
                "log loss mean",
                "log loss median",
                "accuracy mean",
                "ROC AUC mean",
                "#worse (log loss)",
                "#failed",
                "#missing",
            ),
            [
                [
                    _MODE_LABEL.get(a["mode"], a["mode"]),
                    a["n"],
                    _fmt(a["mean_log_loss_delta_pct"], "+.3f") + " %",
                    _fmt(a["median_log_loss_delta_pct"], "+.3f") + " %",
                    _fmt(a["mean_accuracy_delta_pp"], "+.3f") + " pp",
                    _fmt(a["mean_roc_auc_delta_pts"], "+.4f") + " pp",
                    a["worse"],
                    a["failed"],
                    a["missing"],
                ]
                for a in main
            ],
        ),
        "",
        "## Per case",
        "",
        *markdown_table(
            (
                "dataset",
                "seed",
                "variant",
                "log loss",
                "unpatched",
                "change",
                "accuracy",
                "change (pp)",
                "ROC AUC",
                "change (pp)",
            ),
            [
                [
                    r["dataset"],
                    r["seed"],
                    _MODE_LABEL.get(r["mode"], r["mode"]),
                    _fmt(r["log_loss"], ".5f") if r["status"] == "ok" else r["status"],
                    _fmt(r["log_loss_none"], ".5f"),
                    _fmt(r["log_loss_delta_pct"], "+.3f") + " %",
                    _fmt(r["accuracy"], ".4f"),
                    _fmt(r["accuracy_delta_pp"], "+.2f"),
                    _fmt(r["roc_auc"], ".5f"),
                    _fmt(r["roc_auc_delta_pts"], "+.4f"),
                ]
                for r in table
                if r["mode"] != "none" and r["tau"] == tau
            ],
        ),
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


def _csv_text(records: Sequence[dict[str, Any]]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=CLASSIFICATION_CASE_COLUMNS, lineterminator="\n")
    writer.writeheader()
    for rec in records:
        writer.writerow({c: "" if rec.get(c) is None else rec.get(c) for c in writer.fieldnames})
    return buffer.getvalue()


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
        ReportError: If the store has no matching rows, holds a case twice, or
            lacks planned runs and ``partial`` is false (nothing is written then).
    """
    store = Path(store)
    out = Path(out_dir) if out_dir is not None else store
    tau = main_tau(store, suite, checkpoint, tau)
    rows, notes = select_context(load_rows(store), suite, checkpoint, tau=tau)
    one_run_per_case(rows)
    state = completeness(suite, rows, tau, planned_taus(rows, tau, store))
    require_complete(state, store, partial=partial)
    table = classification_case_table(rows)
    aggregated = classification_aggregate(table, planned_cases(suite))
    main = [a for a in aggregated if a["tau"] == tau]
    with atomic_file_set(out, CLASSIFICATION_REPORT_FILES) as staging:
        write_text_atomic(staging / "cases.csv", _csv_text(table))
        text = _summary_text(suite, rows, table, main, tau, notes, state)
        write_text_atomic(staging / "summary.md", text)
    return {name: out / name for name in CLASSIFICATION_REPORT_FILES}


def classification_comparison_lines(
    store: Path, committed: Path | None, suite: str, tau: float, checkpoint: str | None = None
) -> list[str]:
    """This store's headline numbers beside the committed store's, as the regression report's.

    Args:
        store: The store just reported.
        committed: The committed store (``None``: outside a checkout, or ``--committed none``).
        suite: A classification suite.
        tau: The table's tau.
        checkpoint: The SHA-256 prefix reported: a chosen checkpoint is not compared.

    Returns:
        Lines to print: a table with a column per number for each store (both
        to the same digits) and whether the run contexts agree; else why not.
    """
    if checkpoint:
        return [f"(checkpoint {checkpoint} chosen: not compared with a committed table)"]
    if committed is None:
        return ["(no committed table to compare with: outside a checkout, or --committed none)"]
    by_kind = {"tabulate": classification_case_table, "summarise": classification_aggregate}
    rows, mine = main_table(store, suite, tau=tau, **by_kind)
    try:
        theirs_rows, theirs = main_table(
            committed, suite, tau=tau, checkpoint=str(rows[0].get("checkpoint_sha256")), **by_kind
        )
    except ReportError as exc:
        return [f"(the committed store {committed} has no table to compare with: {exc})"]
    by_variant = {(a["mode"], a["support"], a["eps_den"]): a for a in theirs}
    table = []
    for a in mine:
        b = by_variant.get((a["mode"], a["support"], a["eps_den"]), {})
        table.append(
            [
                _MODE_LABEL.get(a["mode"], a["mode"]),
                f"{a['n']} / {b.get('n', '-')}",
                _fmt(a["mean_log_loss_delta_pct"], "+.3f") + " %",
                _fmt(b.get("mean_log_loss_delta_pct"), "+.3f") + " %",
                _fmt(a["mean_accuracy_delta_pp"], "+.3f") + " pp",
                _fmt(b.get("mean_accuracy_delta_pp"), "+.3f") + " pp",
                f"{a['worse']} / {b.get('worse', '-')}",
            ]
        )
    header = ("variant", "cases (yours / committed)", "log loss mean (yours)",
              "log loss mean (committed)", "accuracy mean (yours)", "accuracy mean (committed)",
              "#worse (yours / committed)")  # fmt: skip
    lines = [f"tau = {tau:g}: this store ({store}) beside the committed table ({committed})", ""]
    lines += [*markdown_table(header, table), ""]
    differ = sorted(k for k in _COMPARED if rows[0].get(k) != theirs_rows[0].get(k))
    lines.append(
        "Same run context as the committed table."
        if not differ
        else "Run context differs from the committed table in " + ", ".join(differ) + "."
    )
    return lines


_COMPARED = ("checkpoint_sha256", "code_sha256", "n_estimators", "dtype", "device", "cpu",
             "tabpfn_version", "torch_version", "max_train_rows", "max_test_rows")  # fmt: skip
"""Run-context fields the comparison names when they differ."""


def classification_report_command(args: Any) -> int:
    """``tabpfn-retrofit report`` for a classification suite; returns the exit status.

    Prints the headline table and, as the regression report does, the table
    beside the committed store's (``--committed``: a folder, ``none``, or the
    checkout's ``results/SUITE`` by default; never the store itself).
    """
    store = Path(args.store) if args.store else default_output(args.suite)
    written = build_classification_report(
        store,
        args.suite,
        out_dir=args.out,
        tau=args.tau,
        checkpoint=args.checkpoint,
        partial=getattr(args, "partial", False),
    )
    for path in written.values():
        print(f"wrote {path}")
    tau = main_tau(store, args.suite, args.checkpoint, args.tau)
    rows, _ = select_context(load_rows(store), args.suite, args.checkpoint, tau=tau)
    print(completeness(args.suite, rows, tau, planned_taus(rows, tau, store)).line())
    summary = written["summary.md"].read_text(encoding="utf-8")
    print(summary.split("## Per case")[0].rstrip())  # the headline table; the rest is in the file
    committed = committed_store(getattr(args, "committed", None), args.suite, store)
    print("\n".join(["", *classification_comparison_lines(store, committed, args.suite, tau,
                                                           args.checkpoint)]))  # fmt: skip
    return 0
