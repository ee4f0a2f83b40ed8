"""Benchmark of out-of-fold prediction (``python -m lab bench --leave-out``).

Out-of-fold predictions two ways, on the same estimator (the host patched in
Full-O, float32) and the same folds:

* ``sklearn_refits``: scikit-learn's ``cross_val_predict``, which fits a clone
  of the estimator on each fold's train rows and predicts its held-out rows
  (``k`` fits, ``k`` preprocessings, ``k`` forwards);
* ``per_fold``: :func:`retrofit.cross_val_predict` (``preprocessing="per_fold"``):
  each fold fitted and preprocessed on its own train rows, as a refit, and
  the ``k`` folds' ICL forwards as one ragged batch on the null-padded engine;
* ``transductive``: :func:`retrofit.cross_val_predict`'s default: the feature
  pipelines fitted once on all rows, each fold's target side on its train
  rows, the same ragged batch.

Cases: every number of train rows of ``rows`` under ``KFold(k)`` for every
``k`` of ``folds``, and leave-one-out at ``loo_rows``. A case times its
peers interleaved, in a fresh random order each round, and reports per peer
the median CPU seconds of the process over rounds (every thread counts; other
jobs on a shared machine do not), the per-round ratio to ``sklearn_refits``
with a bootstrap interval, the median peak resident memory a call adds
(``VmHWM``; Linux only, unknown where the probe read no growth), and the
out-of-fold RMSE of each peer's predictions and their largest distance from
the refits' (per-fold preprocessing: rounding only), so a fast peer that
predicts worse shows. How the cost grows with ``k`` and with rows is read from the
table (and ``bench_leave_out.png``). No test asserts a time.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from sklearn.model_selection import KFold, LeaveOneOut
from sklearn.model_selection import cross_val_predict as sklearn_cross_val_predict

from eval.locations import DEFAULT_OUTPUT_ROOT, default_output
from eval.paper.estimators import cpu_float32_estimator
from eval.provenance import provenance_dict
from lab.benchmarks.batched import ragged_datasets
from lab.benchmarks.machine import environment
from lab.benchmarks.timing import paired_ratio, process_rounds
from retrofit import OTabPFNRegressor, cross_val_predict
from retrofit.files import write_json_atomic, write_text_atomic

__all__ = [
    "BASELINE",
    "RETROFIT_PEERS",
    "bench_leave_out",
    "bench_leave_out_command",
    "render_leave_out_markdown",
]

#: The peer every ratio is taken to.
BASELINE = "sklearn_refits"

#: The peers of ``retrofit.cross_val_predict``, named by its ``preprocessing``.
RETROFIT_PEERS: tuple[str, ...] = ("transductive", "per_fold")

Splitter = KFold | LeaveOneOut


def _peers(
    make: Callable[[], OTabPFNRegressor],
    X: np.ndarray,
    y: np.ndarray,
    cv: Splitter,
    last: dict[str, np.ndarray],
) -> dict[str, Callable[[], None]]:
    def sklearn_refits() -> None:
        last[BASELINE] = sklearn_cross_val_predict(make(), X, y, cv=cv)

    peers = {BASELINE: sklearn_refits}
    for preprocessing in RETROFIT_PEERS:

        def retrofit_oof(preprocessing: str = preprocessing) -> None:
            last[preprocessing] = cross_val_predict(
                make(), X, y, cv=cv, preprocessing=preprocessing
            )

        peers[preprocessing] = retrofit_oof
    return peers


def _table(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The first ``n`` train rows of a synthetic table (``ragged_datasets``).

    One seed for every size, so every case has the same features. ``ragged_datasets``
    draws its rows log-uniformly and truncates (asked for 200 it may give 199), so it
    is asked for one row more and cut.
    """
    X, y, _ = ragged_datasets(1, min_rows=n + 1, max_rows=n + 1, seed=seed)[0]
    return X[:n], y[:n]


def _median_or_none(values: list[int | None]) -> float | None:
    known = [v for v in values if v is not None]
    return float(np.median(known)) if known else None


def _case(
    make: Callable[[], OTabPFNRegressor],
    X: np.ndarray,
    y: np.ndarray,
    cv: Splitter,
    *,
    repeats: int,
    seed: int,
    progress: Callable[[str], None] | None,
) -> dict[str, Any]:
    last: dict[str, np.ndarray] = {}
    peers = _peers(make, X, y, cv, last)
    rounds = process_rounds(peers, repeats=repeats, rng=random.Random(seed), progress=progress)
    rows = {}
    for name, got in rounds.items():
        pred = last[name]
        rows[name] = {
            "median_s": float(np.median(got["s"])),
            "s": got["s"],
            "ratio_to_sklearn_refits": None
            if name == BASELINE
            else paired_ratio(got["s"], rounds[BASELINE]["s"], seed=seed),
            "peak_extra_bytes": _median_or_none(got["peak"]),
            "median_minor_faults": int(np.median(got["faults"])),
            "oof_rmse": float(np.sqrt(np.mean((pred - y) ** 2))),
            "max_abs_diff_to_sklearn_refits": float(np.max(np.abs(pred - last[BASELINE]))),
        }
    folds = cv.get_n_splits(X)
    return {
        "rows": len(X),
        "features": X.shape[1],
        "cv": "LeaveOneOut" if isinstance(cv, LeaveOneOut) else f"KFold({folds})",
        "folds": folds,
        "peers": rows,
    }


def bench_leave_out(
    out_dir: str | os.PathLike[str] = DEFAULT_OUTPUT_ROOT / "bench_leave_out",
    *,
    rows: Sequence[int] = (200, 500, 1000),
    folds: Sequence[int] = (5, 10),
    loo_rows: int | None = 200,
    repeats: int = 3,
    model_path: str = "embedded",
    n_estimators: int | str = "auto",
    threads: int | None = None,
    seed: int = 0,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Runs the leave-out benchmark and writes ``bench_leave_out.{json,md}`` to ``out_dir``.

    Args:
        out_dir: Output directory.
        rows: Train rows of the k-fold cases.
        folds: The ``k`` of the k-fold cases.
        loo_rows: Train rows of the leave-one-out case (None: no such case).
        repeats: Timed rounds per case.
        model_path: The host (patched in Full-O).
        n_estimators: Ensemble size (``"auto"``: the checkpoint's).
        threads: torch threads (default: keep).
        seed: Seed of the data, the folds and the round orders.
        progress: Receives one line per case and round.

    Returns:
        The report written to ``bench_leave_out.json``.
    """
    if threads:
        torch.set_num_threads(threads)
    env_start = environment()

    def make() -> OTabPFNRegressor:
        return cpu_float32_estimator("regression", model_path, n_estimators=n_estimators, seed=seed)

    plan: list[tuple[int, Splitter]] = [
        (n, KFold(k, shuffle=True, random_state=seed)) for n in rows for k in folds
    ]
    if loo_rows:
        plan.append((loo_rows, LeaveOneOut()))
    # One untimed round on a small table first: thread pools, kernel tables, the load.
    X0, y0, _ = ragged_datasets(1, min_rows=30, max_rows=30, seed=seed)[0]
    for peer in _peers(make, X0, y0, KFold(2), {}).values():
        peer()
    report: dict[str, Any] = {
        "model_path": model_path,
        "device": "cpu",
        "dtype": "float32",
        "mode": "full-o",
        "n_estimators": int(make().fit(X0, y0).n_estimators_),
        "repeats": repeats,
        "threads": torch.get_num_threads(),
        "clock": "time.process_time (CPU time of every thread of the process)",
        "cases": [],
    }
    for n, cv in plan:
        X, y = _table(n, seed)
        if progress:
            progress(f"{n} rows x {X.shape[1]} features, {type(cv).__name__}")
        report["cases"].append(_case(make, X, y, cv, repeats=repeats, seed=seed, progress=progress))
    report["environment"] = {"start": env_start, "end": environment()}
    report["provenance"] = provenance_dict(
        benchmark="lab.benchmarks.leave_out",
        seed=seed,
        rows=list(rows),
        folds=list(folds),
        loo_rows=loo_rows,
    )
    out = Path(out_dir)
    write_json_atomic(out / "bench_leave_out.json", report)
    write_text_atomic(out / "bench_leave_out.md", render_leave_out_markdown(report))
    return report


def _mib(b: float | None) -> str:
    return "n/a" if b is None else f"{b / 2**20:.0f}"


def render_leave_out_markdown(report: dict[str, Any]) -> str:
    """The report as a Markdown table, one row per case and peer."""
    lines = [
        "# Out-of-fold predictions: the folds as one ragged batch vs k refits",
        "",
        f"Host `{report['model_path']}` ({report['mode']}, {report['n_estimators']} estimators), "
        f"{report['device']}, {report['dtype']}, {report['threads']} torch threads; medians of "
        f"{report['repeats']} interleaved rounds; clock: {report['clock']}. `sklearn_refits` is "
        "scikit-learn's `cross_val_predict` (a clone fitted per fold); `per_fold` and "
        "`transductive` are `retrofit.cross_val_predict` with that `preprocessing` (each "
        "fold fitted on its own rows, or the feature pipelines fitted once on all rows and "
        "each fold's target side on its own), the folds' ICL forwards as one ragged batch. "
        "Ratio: per-round time / `sklearn_refits` time (median, 95% bootstrap interval); "
        "below 1 is faster. Synthetic tables (`lab.benchmarks.batched.ragged_datasets`).",
        "",
    ]
    lines += [
        "| rows | features | cv | peer | s | ratio to sklearn_refits | peak MiB | OOF RMSE "
        "| max abs diff to refits |",
        "|---:|---:|---|---|---:|---|---:|---:|---:|",
    ]
    for case in report["cases"]:
        for name, row in case["peers"].items():
            r = row["ratio_to_sklearn_refits"]
            ratio = (
                "1" if r is None else f"{r['ratio']:.2f} [{r['ci_low']:.2f}, {r['ci_high']:.2f}]"
            )
            lines.append(
                f"| {case['rows']} | {case['features']} | {case['cv']} | {name} "
                f"| {row['median_s']:.2f} | {ratio} | {_mib(row['peak_extra_bytes'])} "
                f"| {row['oof_rmse']:.4g} | {row['max_abs_diff_to_sklearn_refits']:.3g} |"
            )
    return "\n".join(lines) + "\n"


def bench_leave_out_command(args: Any) -> int:
    """``python -m lab bench --leave-out``."""
    out = args.out or str(default_output("bench_leave_out", quick=args.quick))
    bench_leave_out(
        out,
        rows=[24, 40] if args.quick else args.leave_out_rows,
        folds=[2, 3] if args.quick else args.leave_out_folds,
        loo_rows=12 if args.quick else (args.leave_out_loo_rows or None),
        repeats=1 if args.quick else args.leave_out_repeats,
        model_path=args.model,
        n_estimators=1 if args.quick else "auto",
        threads=args.threads,
        seed=args.seed,
        progress=lambda line: print(line, flush=True),
    )
    print(f"wrote {out}/bench_leave_out.json and bench_leave_out.md")
    return 0
