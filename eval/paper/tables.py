"""The regression report's data: the case table, the per-variant summaries, and their cells.

Computed from selected runs (:mod:`eval.paper.selection`) only; the text
(:mod:`eval.paper.summary_text`), the figures (:mod:`eval.paper.figures`) and
the comparison with the committed table (:mod:`eval.paper.comparison`) read
these rows and never the runs' files.

* :func:`case_table`: one :class:`CaseRow` per stored run, paired with the
  unpatched run of its case, ``delta_pct = 100 * (rmse - rmse_none) / rmse_none``;
* :func:`aggregate`: one :class:`VariantSummary` per retrofit variant (mode,
  tau, support, eps_den): mean, median and #worse of the paired changes;
* :func:`table_cells`: the numbers of ``summary.md``'s two tables at a tau, by
  row and column, as the comparison sets them beside the committed ones.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from eval.paper.completeness import pair_counts
from eval.paper.datasets import OFFLINE18_DATASETS
from eval.paper.record import RunRecord

__all__ = [
    "CASE_COLUMNS",
    "MODE_LABEL",
    "SWEEP_COLUMNS",
    "CaseRow",
    "VariantSummary",
    "aggregate",
    "case_table",
    "per_case_at",
    "table_cells",
    "variant_label",
]

CASE_COLUMNS: tuple[str, ...] = (
    "dataset",
    "seed",
    "mode",
    "tau",
    "support",
    "eps_den",
    "status",
    "rmse",
    "rmse_none",
    "delta_pct",
    "mae",
    "n_train",
    "n_test",
    "n_features",
    "fit_s",
    "predict_s",
    "n_estimators",
    "checkpoint_sha256",
    "state_dict_sha256",
    "code_sha256",
    "tabpfn_retrofit_version",
    "tabpfn_version",
    "torch_version",
    "scikit_learn_version",
    "numpy_version",
    "device",
    "dtype",
    "resolved_dtype",
    "autocast",
    "threads",
    "executor",
    "patch_digest",
    "error",
    "finished_at",
    "key",
)
"""Columns of ``cases.csv``, in order (a run file's field names, and the pairing's two)."""

SWEEP_COLUMNS: tuple[str, ...] = ("mode", "tau", "support", "eps_den", "n", "mean_pct",
                                  "median_pct", "worse", "better", "failed", "missing", "fit_s",
                                  "predict_s")  # fmt: skip
"""Columns of ``tau_sweep.csv``: the fields of :class:`VariantSummary`."""

MODE_LABEL = {"none": "unpatched", "oattention": "OAttention", "full-o": "Full-O"}
"""How the tables name each mode."""

_MODE_ORDER = {"none": 0, "oattention": 1, "full-o": 2}


@dataclass(frozen=True)
class CaseRow:
    """One stored run beside the unpatched run of its case.

    Attributes:
        run: The run.
        baseline: The unpatched run of its case (``None``: never stored; itself
            for an unpatched run).
        delta_pct: ``100 * (rmse - rmse_none) / rmse_none`` when both are ``ok``.
    """

    run: RunRecord
    baseline: RunRecord | None
    delta_pct: float | None

    @property
    def rmse_none(self) -> float | None:
        """The baseline's RMSE (``None`` without a stored baseline)."""
        return self.baseline.rmse if self.baseline is not None else None

    @property
    def paired(self) -> bool:
        """Whether the run and its baseline give a change."""
        return self.delta_pct is not None

    def csv_fields(self) -> dict[str, Any]:
        """The run's fields by name, with ``rmse_none`` and ``delta_pct``."""
        return {**self.run.to_json(), "rmse_none": self.rmse_none, "delta_pct": self.delta_pct}


def _sort_key(run: RunRecord) -> tuple[Any, ...]:
    order = {name: i for i, name in enumerate(OFFLINE18_DATASETS)}
    return (
        order.get(run.dataset, len(order)),
        str(run.dataset),
        int(run.seed),
        _MODE_ORDER.get(run.mode, 9),
        run.tau if run.tau is not None else -1.0,
        str(run.support),
        run.eps_den if run.eps_den is not None else -1.0,
    )


def case_table(runs: Sequence[RunRecord]) -> list[CaseRow]:
    """One row per stored run with its paired baseline and ``delta_pct``.

    Returns:
        The rows sorted by dataset (suite order), seed, mode, tau, support, eps_den.
    """
    by_key = {r.key: r for r in runs}
    table = []
    for run in runs:
        base = by_key.get(run.baseline_key)
        rmse, rmse_none = run.rmse, base.rmse if base else None
        delta = None
        if run.ok and base and base.ok and rmse_none:
            delta = 100.0 * (rmse - rmse_none) / rmse_none
        table.append(CaseRow(run=run, baseline=base, delta_pct=delta))
    table.sort(key=lambda row: _sort_key(row.run))
    return table


@dataclass(frozen=True)
class VariantSummary:
    """One retrofit variant's paired changes over the planned cases.

    Attributes:
        mode, tau, support, eps_den: The variant.
        n: Paired cases.
        mean_pct, median_pct: Of ``delta_pct`` (``None`` without a pair).
        worse, better: Cases with ``delta_pct`` above, below zero.
        failed: The run or its baseline stored with a failure.
        missing: The run or its baseline never stored
            (:func:`eval.paper.completeness.pair_counts`).
        fit_s, predict_s: Seconds summed over its runs.
    """

    mode: str
    tau: float
    support: str | None
    eps_den: float | None
    n: int
    mean_pct: float | None
    median_pct: float | None
    worse: int
    better: int
    failed: int
    missing: int
    fit_s: float
    predict_s: float

    def csv_fields(self) -> dict[str, Any]:
        """Every field by name (``tau_sweep.csv``)."""
        return dataclasses.asdict(self)


def aggregate(
    table: Sequence[CaseRow], cases: Sequence[tuple[str, int]] | None = None
) -> list[VariantSummary]:
    """Per retrofit variant (mode, tau, support, eps_den): mean, median, #worse of delta_pct.

    Args:
        table: :func:`case_table` rows.
        cases: The planned (dataset, seed) cases (default: those in ``table``).

    Returns:
        One summary per retrofit variant, OAttention first, then by tau.
    """
    if cases is None:
        cases = [(r.run.dataset, r.run.seed) for r in table]
    groups: dict[tuple[Any, ...], list[CaseRow]] = {}
    for row in table:
        run = row.run
        if run.mode != "none":
            groups.setdefault((run.mode, run.tau, run.support, run.eps_den), []).append(row)
    out = []
    for (mode, tau, support, eps_den), rows in sorted(
        groups.items(), key=lambda kv: (kv[0][0] != "oattention", kv[0][1], str(kv[0][2]))
    ):
        deltas = [r.delta_pct for r in rows if r.delta_pct is not None]
        counts = pair_counts(rows, cases)
        out.append(
            VariantSummary(
                mode=mode,
                tau=tau,
                support=support,
                eps_den=eps_den,
                n=len(deltas),
                mean_pct=statistics.fmean(deltas) if deltas else None,
                median_pct=statistics.median(deltas) if deltas else None,
                worse=sum(d > 0 for d in deltas),
                better=sum(d < 0 for d in deltas),
                failed=counts.failed,
                missing=counts.missing,
                fit_s=sum(r.run.fit_s or 0.0 for r in rows),
                predict_s=sum(r.run.predict_s or 0.0 for r in rows),
            )
        )
    return out


def variant_label(summary: VariantSummary) -> str:
    """``"Full-O (support=count, eps_den=1e-06)"``: a summary table's row name."""
    return f"{MODE_LABEL[summary.mode]} (support={summary.support}, eps_den={summary.eps_den:g})"


def per_case_at(table: Sequence[CaseRow], tau: float) -> dict[tuple[str, int], dict[str, CaseRow]]:
    """``{(dataset, seed): {mode: row}}`` of the baselines and the retrofits at ``tau``."""
    by_case: dict[tuple[str, int], dict[str, CaseRow]] = {}
    for row in table:
        if row.run.mode == "none" or row.run.tau == tau:
            by_case.setdefault((row.run.dataset, row.run.seed), {})[row.run.mode] = row
    return by_case


def table_cells(
    table: Sequence[CaseRow], main: Sequence[VariantSummary], tau: float
) -> dict[tuple[str, str], float | None]:
    """The numbers of ``summary.md``'s summary and per-case tables at ``tau``.

    Returns:
        ``{(row, column): value}``, named as the tables name them: a variant's
        cases, mean and median delta, #worse, #failed and #missing; each case's
        RMSE of every variant (``None`` for a run that failed) and the deltas.
    """
    cells: dict[tuple[str, str], float | None] = {}
    for s in main:
        label = variant_label(s)
        cells.update(
            {
                (label, "cases"): s.n,
                (label, "mean delta"): s.mean_pct,
                (label, "median delta"): s.median_pct,
                (label, "#worse"): s.worse,
                (label, "#failed"): s.failed,
                (label, "#missing"): s.missing,
            }
        )
    for (dataset, seed), rows in per_case_at(table, tau).items():
        for mode, row in rows.items():
            cells[(f"{dataset}/{seed}", f"RMSE {MODE_LABEL[mode]}")] = row.run.rmse
            if mode != "none":
                cells[(f"{dataset}/{seed}", f"delta {MODE_LABEL[mode]}")] = row.delta_pct
    return cells
