"""Coverage of jackknife+, CV+ and split-conformal intervals on a regression suite.

``python -m lab intervals``: for every case of the suite (each dataset under
each split seed, :func:`eval.paper.datasets.split`), the retrofit regressor
(Full-O, float32) gives prediction intervals at ``alpha`` for the case's test
rows three ways through :func:`retrofit.prediction_intervals`: jackknife+
(leave-one-out), CV+ (``KFold(folds)``) and split conformal (half the train
rows fit, half calibrate). Each case records the empirical coverage of its
test rows and the mean and median width, also in units of the train target's
standard deviation so that datasets can be averaged. The train and test parts
are cut to their first ``max_train_rows`` / ``max_test_rows`` rows (the split
is shuffled by its seed, so a prefix is a seeded subsample): leave-one-out on
a CPU costs one fold per train row. A case that raises is recorded with its
error, never dropped. Output: ``interval_coverage.json`` (every case, with
provenance) and ``interval_coverage.md``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from scipy.stats import binomtest
from sklearn.model_selection import KFold

from eval.paper.datasets import Case
from eval.paper.estimators import cpu_float32_estimator, suite_task
from eval.provenance import provenance_dict
from lab.leave_out.case_loop import CaseSplit, measure_cases, selected_cases, write_report
from retrofit.leave_out.estimator_intervals import FOLD_MODELS, prediction_intervals
from retrofit.regressor import OTabPFNRegressor

__all__ = ["METHODS", "case_coverage", "interval_coverage", "render_coverage_markdown"]

#: The interval methods compared, in the order of the tables.
METHODS: tuple[str, ...] = ("jackknife+", "cv+", "split")


def case_coverage(
    X_train: np.ndarray,
    y_train: np.ndarray,
    X_test: np.ndarray,
    y_test: np.ndarray,
    *,
    make: Callable[[], OTabPFNRegressor],
    alpha: float,
    folds: int,
    seed: int,
) -> dict[str, Any]:
    """Coverage and widths of each method's intervals on one case's test rows."""
    scale = float(np.std(y_train))
    out: dict[str, Any] = {}
    for method in METHODS:
        t0 = time.process_time()
        cv = KFold(folds, shuffle=True, random_state=seed) if method == "cv+" else None
        intervals = prediction_intervals(
            make(), X_train, y_train, X_test, alpha=alpha, method=method, cv=cv, random_state=seed
        )
        width = intervals.width_Q
        out[method] = {
            "coverage": float(np.mean(intervals.covers(y_test))),
            "covered": int(np.sum(intervals.covers(y_test))),
            "mean_width": float(np.mean(width)),
            "median_width": float(np.median(width)),
            "mean_width_over_std": float(np.mean(width) / scale) if scale > 0 else None,
            "cpu_s": time.process_time() - t0,
        }
    return out


def interval_coverage(
    out_dir: str | os.PathLike[str],
    *,
    suite: str = "offline18",
    model_path: str = "embedded",
    alpha: float = 0.1,
    folds: int = 10,
    max_train_rows: int | None = 100,
    max_test_rows: int | None = 250,
    n_estimators: int | str = "auto",
    datasets: Sequence[str] | None = None,
    seeds: Sequence[int] | None = None,
    threads: int | None = None,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Measures every case of a regression suite; writes ``interval_coverage.{json,md}``.

    Args:
        out_dir: Output directory.
        suite: A regression suite (``offline18``; ``openml18`` online).
        model_path: The host, patched in Full-O.
        alpha: Miscoverage level of every method.
        folds: ``K`` of CV+.
        max_train_rows: Train rows kept per case (None: all).
        max_test_rows: Test rows kept per case (None: all).
        n_estimators: Ensemble size (``"auto"``: the checkpoint's).
        datasets: A subset of the suite's datasets (None: all).
        seeds: A subset of its seeds (None: all).
        threads: torch threads (default: keep).
        progress: Receives one line per case.

    Returns:
        The report written to ``interval_coverage.json``.
    """
    if suite_task(suite) != "regression":
        raise ValueError(f"suite {suite!r} classifies; intervals need a regression suite")
    if threads:
        torch.set_num_threads(threads)

    def measure(case: Case, data: CaseSplit) -> dict[str, Any]:
        X_train, X_test, y_train, y_test = data
        X_train, y_train = X_train[:max_train_rows], y_train[:max_train_rows]
        X_test, y_test = X_test[:max_test_rows], y_test[:max_test_rows]
        methods = case_coverage(
            X_train,
            y_train,
            X_test,
            y_test,
            make=lambda: cpu_float32_estimator(
                "regression", model_path, n_estimators=n_estimators, seed=case.seed
            ),
            alpha=alpha,
            folds=folds,
            seed=case.seed,
        )
        return {"train_rows": len(X_train), "test_rows": len(X_test), "methods": methods}

    cases = selected_cases(suite, datasets, seeds)
    rows = measure_cases(suite, cases, measure, progress_line=_progress_line, progress=progress)
    report: dict[str, Any] = {
        "suite": suite,
        "model_path": model_path,
        "mode": "full-o",
        "dtype": "float32",
        "device": "cpu",
        "alpha": alpha,
        "cv_plus_folds": folds,
        "split_calibration_fraction": 0.5,
        "fold_models": FOLD_MODELS,
        "max_train_rows": max_train_rows,
        "max_test_rows": max_test_rows,
        "n_estimators": n_estimators,
        "cases": rows,
        "summary": summarise(rows, alpha),
        "provenance": provenance_dict(
            command="python -m lab intervals", suite=suite, threads_set=threads
        ),
    }
    write_report(out_dir, "interval_coverage", report, render_coverage_markdown)
    return report


def _progress_line(row: dict[str, Any]) -> str:
    parts = [
        f"{m} {r['coverage']:.3f} cover, width {r['mean_width']:.3g}"
        for m, r in row["methods"].items()
    ]
    return "; ".join(parts)


def summarise(rows: list[dict[str, Any]], alpha: float) -> dict[str, Any]:
    """Per method: pooled coverage with an exact binomial interval, mean width over std."""
    ok = [r for r in rows if r["status"] == "ok"]
    summary: dict[str, Any] = {"cases": len(rows), "failed": len(rows) - len(ok)}
    for method in METHODS:
        covered = sum(r["methods"][method]["covered"] for r in ok)
        total = sum(r["test_rows"] for r in ok)
        if total == 0:
            summary[method] = None
            continue
        ci = binomtest(covered, total).proportion_ci(0.95)
        widths = [r["methods"][method]["mean_width_over_std"] for r in ok]
        widths = [w for w in widths if w is not None]
        summary[method] = {
            "pooled_coverage": covered / total,
            "pooled_ci95": [float(ci.low), float(ci.high)],
            "test_rows": total,
            "min_case_coverage": min(r["methods"][method]["coverage"] for r in ok),
            "mean_case_coverage": float(np.mean([r["methods"][method]["coverage"] for r in ok])),
            "mean_width_over_std": float(np.mean(widths)) if widths else None,
            "cpu_s": float(sum(r["methods"][method]["cpu_s"] for r in ok)),
        }
    summary["target"] = 1 - alpha
    return summary


def render_coverage_markdown(report: dict[str, Any]) -> str:
    """The summary and the per-case table as Markdown."""
    s = report["summary"]
    limits = (
        f"train rows cut to the first {report['max_train_rows']}"
        if report["max_train_rows"]
        else "all train rows"
    )
    if report["max_test_rows"]:
        limits += f", test rows to the first {report['max_test_rows']}"
    lines = [
        f"# Prediction-interval coverage on {report['suite']} (alpha {report['alpha']:g})",
        "",
        f"Host `{report['model_path']}` ({report['mode']}, {report['dtype']}, "
        f"{report['device']}); {s['cases']} cases ({s['failed']} failed); {limits} "
        "(the split is shuffled by its seed: a seeded subsample). jackknife+ is "
        f"leave-one-out, CV+ is KFold({report['cv_plus_folds']}), split conformal fits "
        "on half the train rows and calibrates on the other half; all from "
        f"`retrofit.prediction_intervals` (fold models: {report['fold_models']}). Target "
        f"coverage {s['target']:.2f}; guaranteed, marginally over draws of the train and "
        f"test rows: split conformal >= {s['target']:.2f}, jackknife+ >= "
        f"{1 - 2 * report['alpha']:.2f}, CV+ a little less. The 95% interval is the exact "
        "binomial one over the pooled test rows as if they were independent; the test rows "
        "of a case share one train set, so coverage varies between cases more than that "
        "interval says (min case coverage). Width / std: mean interval width in units of "
        "the train target's standard deviation, averaged over cases.",
        "",
        "| method | pooled coverage [95% CI] | test rows | mean case coverage "
        "| min case coverage | width / std | CPU s |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for method in METHODS:
        m = s.get(method)
        if m is None:
            lines.append(f"| {method} | n/a | 0 | | | | |")
            continue
        width = "n/a" if m["mean_width_over_std"] is None else f"{m['mean_width_over_std']:.3f}"
        lines.append(
            f"| {method} | {m['pooled_coverage']:.3f} [{m['pooled_ci95'][0]:.3f}, "
            f"{m['pooled_ci95'][1]:.3f}] | {m['test_rows']} | {m['mean_case_coverage']:.3f} "
            f"| {m['min_case_coverage']:.3f} | {width} | {m['cpu_s']:.1f} |"
        )
    lines += [
        "",
        "## Cases",
        "",
        "| dataset | seed | train | test | "
        + " | ".join(f"{m} coverage | {m} width" for m in METHODS)
        + " |",
        "|---|---:|---:|---:|" + "---:|---:|" * len(METHODS),
    ]
    for row in report["cases"]:
        if row["status"] != "ok":
            lines.append(f"| {row['dataset']} | {row['seed']} | failed: {row['error']} |")
            continue
        cells = " | ".join(
            f"{row['methods'][m]['coverage']:.3f} | {row['methods'][m]['mean_width']:.3g}"
            for m in METHODS
        )
        lines.append(
            f"| {row['dataset']} | {row['seed']} | {row['train_rows']} | {row['test_rows']} "
            f"| {cells} |"
        )
    return "\n".join(lines) + "\n"
