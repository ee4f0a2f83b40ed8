"""Cache-sized stage 0-2 chunks against tabpfn's default chunks (``bench``'s ``chunks`` part).

For a few synthetic datasets of 1,000-3,000 train rows, one fitted
:class:`retrofit.OTabPFNRegressor` (Full-O, embedded host, float32) predicts
each dataset twice per round, in a random order: as fitted (tabpfn's default
``inference_chunk_cells``) and inside :func:`retrofit.batching.chunks.cache_sized_chunks`
(the CPU's cache-sized chunks, what the ragged path and the evaluation use).
Time is CPU time of the process (``time.process_time``: every torch thread
counts, so a peer's time does not include other jobs on the machine), summed
over the datasets of a round; the ratio is the median of per-round ratios with
a bootstrap interval (:func:`lab.benchmarks.timing.paired_ratio`), at one
torch thread and at all of them. Wall time is recorded beside it: with several
threads, CPU time also counts the threads' spinning at each parallel region's
end (more regions with smaller chunks), while wall time is what a user waits
for; on a busy machine only CPU time is meaningful. Whether the two predictions
are bit-identical, and their largest difference in float32 ulps of the
predictions' scale, is recorded per dataset (a BLAS may block a chunk's
shorter matrix otherwise).
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from lab.benchmarks.batched import ragged_datasets
from lab.benchmarks.timing import paired_ratio
from retrofit import OTabPFNRegressor
from retrofit.batching.bounds import default_chunk_cells
from retrofit.batching.chunks import cache_sized_chunks

__all__ = ["bench_chunks"]


def _predict_seconds(estimator: Any, X_test: Any, chunked: bool) -> tuple[float, float, np.ndarray]:
    """CPU seconds, wall seconds and the prediction of one ``predict``."""
    t0, w0 = time.process_time(), time.perf_counter()
    if chunked:
        with cache_sized_chunks(estimator.models_, "cpu"):
            pred = estimator.predict(X_test)
    else:
        pred = estimator.predict(X_test)
    return time.process_time() - t0, time.perf_counter() - w0, np.asarray(pred)


def _deviation_in_float32_ulps(actual: np.ndarray, expected: np.ndarray) -> float:
    """``max|actual - expected|`` in float32 ulps of ``max(1, max|expected|)``."""
    scale = max(1.0, float(np.max(np.abs(expected), initial=0.0)))
    diff = float(np.max(np.abs(actual.astype(np.float64) - expected), initial=0.0))
    return diff / (float(np.finfo(np.float32).eps) * scale)


def bench_chunks(
    *,
    n_datasets: int = 4,
    min_rows: int = 1000,
    max_rows: int = 3000,
    rounds: int = 5,
    threads: Sequence[int] | None = None,
    model_path: str = "embedded",
    seed: int = 0,
) -> dict[str, Any]:
    """Times ``predict`` with cache-sized chunks against tabpfn's default chunks.

    Args:
        n_datasets: Datasets (:func:`lab.benchmarks.batched.ragged_datasets`).
        min_rows: Fewest train rows.
        max_rows: Most train rows.
        rounds: Timed rounds per thread count (one untimed round first).
        threads: torch thread counts (default: 1 and all the process has).
        model_path: The host.
        seed: Seed of the datasets, the estimator and the round orders.

    Returns:
        ``{"setup", "by_threads": [{"threads", "seconds", "ratio", "wall_seconds",
        "wall_ratio"}], "bit_identical", "ulps"}``.
    """
    all_threads = torch.get_num_threads()
    threads = list(threads or sorted({1, all_threads}))
    datasets = ragged_datasets(n_datasets, min_rows=min_rows, max_rows=max_rows, seed=seed)
    fitted = [
        OTabPFNRegressor(
            model_path=model_path,
            device="cpu",
            inference_precision=torch.float32,
            ignore_pretraining_limits=True,
            random_state=seed,
        ).fit(X, y)
        for X, y, _ in datasets
    ]
    identical, ulps = [], []
    for est, (_, _, X_test) in zip(fitted, datasets, strict=True):
        whole = _predict_seconds(est, X_test, False)[2]
        chunked = _predict_seconds(est, X_test, True)[2]
        identical.append(bool(np.array_equal(whole, chunked)))
        ulps.append(_deviation_in_float32_ulps(chunked, whole))
    rng = random.Random(seed)
    by_threads = []
    try:
        for n in threads:
            torch.set_num_threads(n)
            seconds: dict[str, list[float]] = {"default": [], "cache_sized": []}
            wall: dict[str, list[float]] = {"default": [], "cache_sized": []}
            for round_ in range(rounds + 1):
                spent = dict.fromkeys(seconds, 0.0)
                waited = dict.fromkeys(seconds, 0.0)
                for est, (_, _, X_test) in zip(fitted, datasets, strict=True):
                    order = list(seconds)
                    rng.shuffle(order)
                    for name in order:
                        cpu, elapsed, _ = _predict_seconds(est, X_test, name == "cache_sized")
                        spent[name] += cpu
                        waited[name] += elapsed
                if round_:  # the first round is warm-up
                    for name in seconds:
                        seconds[name].append(spent[name])
                        wall[name].append(waited[name])
            by_threads.append(
                {
                    "threads": n,
                    "seconds": seconds,
                    "ratio": paired_ratio(seconds["cache_sized"], seconds["default"], seed=seed),
                    "wall_seconds": wall,
                    "wall_ratio": paired_ratio(wall["cache_sized"], wall["default"], seed=seed),
                }
            )
    finally:
        torch.set_num_threads(all_threads)
    return {
        "setup": {
            "host": model_path,
            "mode": "full-o",
            "datasets": n_datasets,
            "train_rows": [len(d[0]) for d in datasets],
            "test_rows": [len(d[2]) for d in datasets],
            "features": [d[0].shape[1] for d in datasets],
            "cache_sized_cells": default_chunk_cells("cpu"),
            "default_cells": int(getattr(fitted[0].models_[0], "inference_chunk_cells", 0)),
            "clock": "time.process_time (CPU time of every thread of the process) and "
            "time.perf_counter (wall)",
            "rounds": rounds,
        },
        "by_threads": by_threads,
        "bit_identical": identical,
        "ulps": ulps,
    }
