"""How far transductive out-of-fold predictions are from k true refits, on a suite.

``python -m lab oof-gap``: for every case of a suite (each dataset under
each split seed, :func:`eval.paper.datasets.split`; the whole train part,
or its first ``max_train_rows`` rows, a seeded subsample since the split is
shuffled), the out-of-fold predictions of the case's train rows under one
splitter (``KFold(folds)`` shuffled by the seed; ``StratifiedKFold`` for a
classification suite) four ways, the retrofit estimators in Full-O, float32:

* ``transductive``: :func:`retrofit.cross_val_predict`, X side fitted once on
  all rows, each fold's y side on its train rows (the default);
* ``per_fold``: :func:`retrofit.cross_val_predict` with
  ``preprocessing="per_fold"``;
* ``sklearn_refits``: scikit-learn's ``cross_val_predict``, ``k`` clones of
  the same estimator each fitted on a fold's train rows (the reference);
* ``tabpfn``: scikit-learn's ``cross_val_predict`` of the unpatched host
  (``mode="none"``, tabpfn's own fit and predict), ``k`` times.

Per case and pair of peers: the largest difference of their predictions, in
units of the train target's standard deviation (regression) or in
probability (classification); per peer the out-of-fold RMSE or log loss and
its change against the refits (percent for RMSE, absolute for log loss), and
its CPU seconds. A case that raises is recorded with its error, never
dropped. Output: ``oof_gap.json`` (every case, with provenance) and
``oof_gap.md``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from sklearn.metrics import log_loss
from sklearn.model_selection import KFold, StratifiedKFold
from sklearn.model_selection import cross_val_predict as sklearn_cross_val_predict

from eval.markdown import markdown_table
from eval.paper.datasets import Case
from eval.paper.estimators import cpu_float32_estimator, suite_task
from eval.provenance import provenance_dict
from lab.leave_out.case_loop import CaseSplit, measure_cases, selected_cases, write_report
from retrofit.leave_out.cross_val import cross_val_predict

__all__ = ["PAIRS", "PEERS", "case_gap", "oof_gap", "render_gap_markdown", "summarise"]

#: The four ways to the out-of-fold predictions, in the order of the tables.
PEERS: tuple[str, ...] = ("transductive", "per_fold", "sklearn_refits", "tabpfn")

#: The distances reported: (peer, reference).
PAIRS: tuple[tuple[str, str], ...] = (
    ("transductive", "sklearn_refits"),
    ("per_fold", "sklearn_refits"),
    ("transductive", "tabpfn"),
    ("sklearn_refits", "tabpfn"),
)

#: The reference of every metric change.
REFERENCE = "sklearn_refits"


def _peer_predictions(
    peer: str, make: Callable[[str], Any], X: np.ndarray, y: np.ndarray, cv: Any, method: str
) -> np.ndarray:
    """One peer's out-of-fold predictions of every row."""
    if peer in ("transductive", "per_fold"):
        return cross_val_predict(make("full-o"), X, y, cv=cv, method=method, preprocessing=peer)
    mode = "none" if peer == "tabpfn" else "full-o"
    return sklearn_cross_val_predict(make(mode), X, y, cv=cv, method=method)


def case_gap(
    X: np.ndarray, y: np.ndarray, *, task: str, make: Callable[[str], Any], cv: Any
) -> dict[str, Any]:
    """Every peer's out-of-fold metric and CPU seconds, and every pair's largest difference.

    Args:
        X: The case's train rows, ``(N, F)``.
        y: Their targets or labels, ``(N,)``.
        task: ``"regression"`` or ``"classification"``.
        make: Builds the estimator in a mode (``"full-o"`` or ``"none"``).
        cv: The splitter every peer uses.
    """
    classify = task == "classification"
    method = "predict_proba" if classify else "predict"
    predictions: dict[str, np.ndarray] = {}
    peers: dict[str, dict[str, float]] = {}
    classes = np.unique(y)
    scale = 1.0 if classify else float(np.std(y))
    for peer in PEERS:
        t0 = time.process_time()
        prediction = np.asarray(_peer_predictions(peer, make, X, y, cv, method), np.float64)
        seconds = time.process_time() - t0
        predictions[peer] = prediction
        if classify:
            metric = float(log_loss(y, prediction, labels=classes))
        else:
            metric = float(np.sqrt(np.mean((prediction - y) ** 2)))
        peers[peer] = {"metric": metric, "cpu_s": seconds}
    reference = peers[REFERENCE]["metric"]
    for values in peers.values():
        change = values["metric"] - reference
        values["change"] = change if classify else 100 * change / reference
    distances = {
        f"{a} - {b}": float(np.max(np.abs(predictions[a] - predictions[b]))) / scale
        for a, b in PAIRS
    }
    return {"peers": peers, "largest_difference": distances}


def oof_gap(
    out_dir: str | os.PathLike[str],
    *,
    suite: str = "offline18",
    model_path: str = "embedded",
    folds: int = 5,
    max_train_rows: int | None = None,
    n_estimators: int | str = "auto",
    datasets: Sequence[str] | None = None,
    seeds: Sequence[int] | None = None,
    max_cases: int | None = None,
    threads: int | None = None,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Measures every case of a suite; writes ``oof_gap.{json,md}``.

    Args:
        out_dir: Output directory.
        suite: A regression or classification suite.
        model_path: The host (a classifier checkpoint for a classification suite).
        folds: ``k`` of the splitter.
        max_train_rows: Train rows kept per case (None: all).
        n_estimators: Ensemble size (``"auto"``: the checkpoint's).
        datasets: A subset of the suite's datasets (None: all).
        seeds: A subset of its seeds (None: all).
        max_cases: At most this many cases, in suite order (None: all).
        threads: torch threads (default: keep).
        progress: Receives one line per case.

    Returns:
        The report written to ``oof_gap.json``.
    """
    task = suite_task(suite)
    if threads:
        torch.set_num_threads(threads)
    splitter = StratifiedKFold if task == "classification" else KFold

    def measure(case: Case, data: CaseSplit) -> dict[str, Any]:
        X, _, y, _ = data
        X, y = X[:max_train_rows], y[:max_train_rows]
        gap = case_gap(
            X,
            y,
            task=task,
            make=lambda mode: cpu_float32_estimator(
                task, model_path, mode=mode, n_estimators=n_estimators, seed=case.seed
            ),
            cv=splitter(folds, shuffle=True, random_state=case.seed),
        )
        return {"train_rows": len(X), **gap}

    cases = selected_cases(suite, datasets, seeds, max_cases)
    rows = measure_cases(suite, cases, measure, progress_line=_progress_line, progress=progress)
    report: dict[str, Any] = {
        "suite": suite,
        "task": task,
        "model_path": model_path,
        "mode": "full-o",
        "dtype": "float32",
        "device": "cpu",
        "folds": folds,
        "splitter": "StratifiedKFold" if task == "classification" else "KFold",
        "max_train_rows": max_train_rows,
        "max_cases": max_cases,
        "n_estimators": n_estimators,
        "cases": rows,
        "summary": summarise(rows, task),
        "provenance": provenance_dict(
            command="python -m lab oof-gap", suite=suite, threads_set=threads
        ),
    }
    write_report(out_dir, "oof_gap", report, render_gap_markdown)
    return report


def _progress_line(row: dict[str, Any]) -> str:
    gaps = "; ".join(f"{pair} {d:.3g}" for pair, d in row["largest_difference"].items())
    return f"largest difference {gaps}"


def summarise(rows: list[dict[str, Any]], task: str) -> dict[str, Any]:
    """Per pair the mean and largest per-case difference; per peer the mean metric change."""
    ok = [r for r in rows if r["status"] == "ok"]
    summary: dict[str, Any] = {"cases": len(rows), "failed": len(rows) - len(ok)}
    if not ok:
        return summary
    summary["largest_difference"] = {
        f"{a} - {b}": {
            "mean": float(np.mean([r["largest_difference"][f"{a} - {b}"] for r in ok])),
            "max": float(np.max([r["largest_difference"][f"{a} - {b}"] for r in ok])),
        }
        for a, b in PAIRS
    }
    summary["peers"] = {
        peer: {
            "mean_metric": float(np.mean([r["peers"][peer]["metric"] for r in ok])),
            "mean_change": float(np.mean([r["peers"][peer]["change"] for r in ok])),
            "cpu_s": float(sum(r["peers"][peer]["cpu_s"] for r in ok)),
        }
        for peer in PEERS
    }
    return summary


def render_gap_markdown(report: dict[str, Any]) -> str:
    """The summary and the per-case table as Markdown."""
    s = report["summary"]
    classify = report["task"] == "classification"
    unit = "in probability" if classify else "in units of the train target's std"
    metric = "log loss" if classify else "RMSE"
    change = "change (absolute)" if classify else "change (%)"
    limits = (
        f"train rows cut to the first {report['max_train_rows']} (a seeded subsample)"
        if report["max_train_rows"]
        else "all train rows"
    )
    if report["max_cases"]:
        limits += f", the first {report['max_cases']} cases"
    lines = [
        f"# Out-of-fold predictions on {report['suite']}: transductive, per fold, refits, tabpfn",
        "",
        f"Host `{report['model_path']}` ({report['mode']}, {report['dtype']}, "
        f"{report['device']}); {s['cases']} cases ({s['failed']} failed); {limits}; "
        f"{report['splitter']}({report['folds']}) shuffled by the case's seed, the same "
        "folds for every peer. transductive: `retrofit.cross_val_predict` (X side fitted "
        "once on all rows, no label; y side per fold); per_fold: the same with "
        "`preprocessing='per_fold'`; sklearn_refits: scikit-learn's `cross_val_predict`, k "
        "refits of the same estimator (the reference of every change); tabpfn: the same with "
        "the unpatched host (`mode='none'`), k times. Largest difference: per case the "
        f"largest absolute difference of two peers' predictions, {unit}.",
        "",
    ]
    if "peers" in s:
        lines += markdown_table(
            ["pair", "mean per-case largest difference", "largest"],
            (
                [pair, f"{d['mean']:.3g}", f"{d['max']:.3g}"]
                for pair, d in s["largest_difference"].items()
            ),
            align="lrr",
        )
        lines.append("")
        lines += markdown_table(
            ["peer", f"mean {metric}", f"mean {change} vs sklearn_refits", "CPU s"],
            (
                [peer, f"{p['mean_metric']:.5g}", f"{p['mean_change']:+.4g}", f"{p['cpu_s']:.1f}"]
                for peer, p in s["peers"].items()
            ),
            align="lrrr",
        )
    else:
        lines.append("No case finished.")
    lines += ["", "## Cases", ""]
    pairs = [f"{a} - {b}" for a, b in PAIRS]
    header = ["dataset", "seed", "train", *(f"{p} {metric}" for p in PEERS), *pairs]
    case_rows = []
    for row in report["cases"]:
        if row["status"] != "ok":
            cells = [row["dataset"], row["seed"], f"failed: {row['error']}"]
            case_rows.append(cells + [""] * (len(header) - len(cells)))
            continue
        case_rows.append(
            [
                row["dataset"],
                row["seed"],
                row["train_rows"],
                *(f"{row['peers'][p]['metric']:.5g}" for p in PEERS),
                *(f"{row['largest_difference'][p]:.3g}" for p in pairs),
            ]
        )
    lines += markdown_table(header, case_rows, align="lrr" + "r" * (len(header) - 3))
    return "\n".join(lines) + "\n"
