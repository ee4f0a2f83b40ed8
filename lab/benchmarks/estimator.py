"""The estimator part of ``bench``: ``fit`` + ``predict`` per mode against ``mode="none"``.

:class:`retrofit.OTabPFNRegressor` on a few offline datasets and split seeds,
each mode timed interleaved with ``"none"`` (:mod:`lab.benchmarks.timing`),
in float32 on CPU.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from eval.paper.datasets import load_dataset, split
from eval.paper.estimators import cpu_float32_estimator
from lab.benchmarks import TARGETS
from lab.benchmarks.timing import paired_ratio, time_interleaved
from retrofit.settings import MODES

__all__ = ["DEFAULT_ESTIMATOR_CASES", "bench_estimator"]

DEFAULT_ESTIMATOR_CASES: tuple[tuple[str, int], ...] = (
    ("qsar_fish", 0),
    ("airfoil", 0),
    ("red_wine", 1),
    ("abalone", 2),
)


def _fit_predict(
    mode: str, data: tuple[Any, Any, Any], *, seed: int, model_path: str, n_estimators: int | str
) -> Any:
    X_train, y_train, X_test = data
    est = cpu_float32_estimator(
        "regression", model_path, mode=mode, n_estimators=n_estimators, seed=seed
    )
    return est.fit(X_train, y_train).predict(X_test)


def bench_estimator(
    cases: Sequence[tuple[str, int]],
    *,
    repeats: int,
    model_path: str = "embedded",
    n_estimators: int | str = "auto",
    max_train: int | None = None,
    modes: Sequence[str] = MODES,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """``fit`` + ``predict`` per mode against ``mode="none"``, interleaved per case.

    Runs in float32 (``inference_precision=torch.float32``) on CPU.

    Args:
        cases: ``(dataset, split seed)`` pairs of the offline suite.
        repeats: Timed rounds per case.
        model_path: The host checkpoint.
        n_estimators: Passed to the estimator.
        max_train: Keep at most this many training rows (smoke runs).
        modes: Modes timed; must include ``"none"``.
        progress: Receives one line per case.

    Returns:
        Per case and mode the median seconds and the ratio to ``"none"`` with
        its CI; the ratio pooled over all rounds of all cases; the target.
    """
    per_case = []
    pooled: dict[str, list[float]] = {m: [] for m in modes}
    for ci, (name, seed) in enumerate(cases):
        X_train, X_test, y_train, _ = split(load_dataset(name), seed)
        if max_train is not None:
            X_train, y_train = X_train[:max_train], y_train[:max_train]
            X_test = X_test[: max(1, max_train // 3)]

        peers = {
            m: functools.partial(
                _fit_predict,
                m,
                (X_train, y_train, X_test),
                seed=seed,
                model_path=model_path,
                n_estimators=n_estimators,
            )
            for m in modes
        }
        times, _ = time_interleaved(peers, repeats=repeats, warmup=1, min_time_s=0.0, seed=ci)
        for m in modes:
            pooled[m].extend(times[m])
        row = {
            "dataset": name,
            "seed": seed,
            "n_train": len(X_train),
            "n_test": len(X_test),
            "median_s": {m: float(np.median(t)) for m, t in times.items()},
            "ratios": {
                m: paired_ratio(t, times["none"], seed=ci) for m, t in times.items() if m != "none"
            },
        }
        per_case.append(row)
        if progress:
            progress(
                f"estimator {name} seed {seed}: none {row['median_s']['none']:.2f} s, "
                + ", ".join(f"{m} x{r['ratio']:.3f}" for m, r in row["ratios"].items())
            )
    overall = {m: paired_ratio(pooled[m], pooled["none"]) for m in modes if m != "none"}
    target = TARGETS["estimator"]
    return {
        "model_path": model_path,
        "n_estimators": n_estimators,
        "inference_precision": "float32",
        "rounds_per_case": repeats,
        "cases": per_case,
        "pooled": overall,
        "target": target,
        "met": {m: r["ci_high"] <= target for m, r in overall.items()},
        "met_point": {m: r["ratio"] <= target for m, r in overall.items()},
    }
