"""The classification report's data: the case table, the per-variant summaries, and their cells.

Each retrofit run is paired with the unpatched run of its case (same split,
seed, checkpoint and ensemble) and three changes are measured:

* log loss, relative: ``100 * (log_loss - log_loss_none) / log_loss_none`` (%),
  as RMSE is for regression;
* accuracy, absolute: ``100 * (accuracy - accuracy_none)`` (percentage points);
* ROC AUC (macro one-vs-rest), absolute: ``100 * (roc_auc - roc_auc_none)`` (points).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from eval.paper.completeness import pair_counts
from eval.paper.datasets import SUITE_DATASETS
from eval.paper.record import RunRecord

__all__ = [
    "CHANGES",
    "CLASSIFICATION_CASE_COLUMNS",
    "MODE_LABEL",
    "ClassificationCaseRow",
    "ClassificationSummary",
    "classification_aggregate",
    "classification_case_table",
    "classification_cells",
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

CHANGES: dict[str, str] = {
    "log_loss": "log_loss_delta_pct",
    "accuracy": "accuracy_delta_pp",
    "roc_auc": "roc_auc_delta_pts",
}
"""Each metric and the name of its change."""

MODE_LABEL = {"oattention": "OAttention", "full-o": "Full-O"}
"""How the tables name each retrofit."""

_MODE_ORDER = {"none": 0, "oattention": 1, "full-o": 2}


def _change(run: RunRecord, base: RunRecord | None, metric: str) -> float | None:
    if not run.ok or base is None or not base.ok:
        return None
    value, reference = run.metric(metric), base.metric(metric)
    if value is None or reference is None:
        return None
    if metric == "log_loss":
        return 100.0 * (value - reference) / reference if reference else None
    return 100.0 * (value - reference)


@dataclass(frozen=True)
class ClassificationCaseRow:
    """One stored run beside the unpatched run of its case, and the three changes.

    Attributes:
        run: The run.
        baseline: The unpatched run of its case (``None``: never stored).
        changes: ``{change name: value}`` of :data:`CHANGES` (``None``: no pair).
    """

    run: RunRecord
    baseline: RunRecord | None
    changes: dict[str, float | None]

    def change(self, metric: str) -> float | None:
        """The change of ``metric`` (``"log_loss"``, ``"accuracy"``, ``"roc_auc"``)."""
        return self.changes[CHANGES[metric]]

    def baseline_metric(self, metric: str) -> float | None:
        """The baseline's ``metric`` (``None`` without a stored baseline)."""
        return self.baseline.metric(metric) if self.baseline is not None else None

    @property
    def paired(self) -> bool:
        """Whether the run and its baseline give a log-loss change."""
        return self.change("log_loss") is not None

    def csv_fields(self) -> dict[str, Any]:
        """The run's fields by name, with each baseline metric and change."""
        fields = self.run.to_json()
        for metric, change in CHANGES.items():
            fields[f"{metric}_none"] = self.baseline_metric(metric)
            fields[change] = self.changes[change]
        return fields


def classification_case_table(runs: Sequence[RunRecord]) -> list[ClassificationCaseRow]:
    """One row per stored run with its paired baseline's metrics and the changes.

    Returns:
        Rows sorted by suite order, seed, variant and tau.
    """
    by_key = {r.key: r for r in runs}
    table = []
    for run in runs:
        base = by_key.get(run.baseline_key)
        changes = {change: _change(run, base, metric) for metric, change in CHANGES.items()}
        table.append(ClassificationCaseRow(run=run, baseline=base, changes=changes))
    names = [name for suite_names in SUITE_DATASETS.values() for name in suite_names]
    order = {name: i for i, name in enumerate(dict.fromkeys(names))}
    table.sort(
        key=lambda r: (
            order.get(r.run.dataset, len(order)),
            int(r.run.seed),
            _MODE_ORDER.get(r.run.mode, 9),
            r.run.tau if r.run.tau is not None else -1.0,
        )
    )
    return table


@dataclass(frozen=True)
class ClassificationSummary:
    """One retrofit variant's changes over the planned cases.

    Attributes:
        mode, tau, support, eps_den: The variant.
        n: Cases with every change.
        worse: Cases whose log loss went up.
        failed: The run or its baseline stored with a failure.
        missing: The run or its baseline never stored.
        means, medians: ``{change name: value}`` of :data:`CHANGES` (``None``: no pair).
    """

    mode: str
    tau: float
    support: str | None
    eps_den: float | None
    n: int
    worse: int
    failed: int
    missing: int
    means: dict[str, float | None]
    medians: dict[str, float | None]

    def mean(self, metric: str) -> float | None:
        """The mean change of ``metric``."""
        return self.means[CHANGES[metric]]

    def median(self, metric: str) -> float | None:
        """The median change of ``metric``."""
        return self.medians[CHANGES[metric]]


def classification_aggregate(
    table: Sequence[ClassificationCaseRow], cases: Sequence[tuple[str, int]] | None = None
) -> list[ClassificationSummary]:
    """Per retrofit variant: paired cases, mean and median of each change, #worse.

    Args:
        table: :func:`classification_case_table` rows.
        cases: The planned (dataset, seed) cases (default: those in ``table``).

    Returns:
        One summary per (mode, tau, support, eps_den).
    """
    if cases is None:
        cases = [(r.run.dataset, r.run.seed) for r in table]
    groups: dict[tuple[Any, ...], list[ClassificationCaseRow]] = {}
    for row in table:
        run = row.run
        if run.mode != "none":
            groups.setdefault((run.mode, run.tau, run.support, run.eps_den), []).append(row)
    out = []
    for (mode, tau, support, eps_den), rows in sorted(
        groups.items(), key=lambda kv: (_MODE_ORDER.get(kv[0][0], 9), kv[0][1])
    ):
        paired = [r for r in rows if r.paired]
        counts = pair_counts(rows, cases)
        means, medians = {}, {}
        for change in CHANGES.values():
            values = [r.changes[change] for r in paired if r.changes[change] is not None]
            means[change] = statistics.fmean(values) if values else None
            medians[change] = statistics.median(values) if values else None
        out.append(
            ClassificationSummary(
                mode=mode,
                tau=tau,
                support=support,
                eps_den=eps_den,
                n=len(paired),
                worse=sum(r.change("log_loss") > 0 for r in paired),
                failed=counts.failed,
                missing=counts.missing,
                means=means,
                medians=medians,
            )
        )
    return out


def classification_cells(
    table: Sequence[ClassificationCaseRow], main: Sequence[ClassificationSummary], tau: float
) -> dict[tuple[str, str], float | None]:
    """The numbers of the classification ``summary.md``'s two tables at ``tau``.

    Returns:
        ``{(row, column): value}``: each variant's cases, mean and median
        log-loss change, mean accuracy and ROC AUC change, #worse, #failed and
        #missing; each case's metrics of every variant and their changes.
    """
    cells: dict[tuple[str, str], float | None] = {}
    for s in main:
        label = MODE_LABEL.get(s.mode, s.mode)
        cells.update(
            {
                (label, "cases"): s.n,
                (label, "log loss mean"): s.mean("log_loss"),
                (label, "log loss median"): s.median("log_loss"),
                (label, "accuracy mean"): s.mean("accuracy"),
                (label, "ROC AUC mean"): s.mean("roc_auc"),
                (label, "#worse (log loss)"): s.worse,
                (label, "#failed"): s.failed,
                (label, "#missing"): s.missing,
            }
        )
    for row in table:
        run = row.run
        if run.mode != "none" and run.tau != tau:
            continue
        name = f"{run.dataset}/{run.seed}"
        label = MODE_LABEL.get(run.mode, "unpatched")
        for metric in CHANGES:
            cells[(name, f"{metric} {label}")] = run.metric(metric)
            if run.mode != "none":
                cells[(name, f"{metric} change {label}")] = row.change(metric)
    return cells
