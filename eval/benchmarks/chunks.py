"""Cache-sized stage 0-2 chunks against tabpfn's default chunks (``bench``'s ``chunks`` part).

For a few synthetic datasets of 1,000-3,000 train rows, one fitted
:class:`retrofit.OTabPFNRegressor` (Full-O, embedded host, float32) predicts
each dataset twice per round, in a random order: as fitted (tabpfn's default
``inference_chunk_cells``) and inside :func:`retrofit.batching.chunks.cache_sized_chunks`
(the CPU's cache-sized chunks, what the ragged path and the evaluation use).
Time is CPU time of the process (``time.process_time``: every torch thread
counts, so a peer's time does not include other jobs on the machine), summed
over the datasets of a round; the ratio is the median of per-round ratios with
a bootstrap interval (:func:`eval.benchmarks.timing.paired_ratio`), at one
torch thread and at all of them. Whether the two predictions are bit-identical
is recorded per dataset.
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from eval.benchmarks.batched import ragged_datasets
from eval.benchmarks.timing import paired_ratio
from retrofit import OTabPFNRegressor
from retrofit.batching.chunks import cache_sized_chunks
from retrofit.settings import default_chunk_cells

__all__ = ["bench_chunks"]


def _predict_seconds(estimator: Any, X_test: Any, chunked: bool) -> tuple[float, np.ndarray]:
    t0 = time.process_time()
    if chunked:
        with cache_sized_chunks(estimator.models_, "cpu"):
            pred = estimator.predict(X_test)
    else:
        pred = estimator.predict(X_test)
    return time.process_time() - t0, np.asarray(pred)


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
        n_datasets: Datasets (:func:`eval.benchmarks.batched.ragged_datasets`).
        min_rows: Fewest train rows.
        max_rows: Most train rows.
        rounds: Timed rounds per thread count (one untimed round first).
        threads: torch thread counts (default: 1 and all the process has).
        model_path: The host.
        seed: Seed of the datasets, the estimator and the round orders.

    Returns:
        ``{"setup", "by_threads": [{"threads", "seconds", "ratio"}], "bit_identical"}``.
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
    identical = []
    for est, (_, _, X_test) in zip(fitted, datasets, strict=True):
        identical.append(
            bool(
                np.array_equal(
                    _predict_seconds(est, X_test, False)[1], _predict_seconds(est, X_test, True)[1]
                )
            )
        )
    rng = random.Random(seed)
    by_threads = []
    try:
        for n in threads:
            torch.set_num_threads(n)
            seconds: dict[str, list[float]] = {"default": [], "cache_sized": []}
            for round_ in range(rounds + 1):
                spent = dict.fromkeys(seconds, 0.0)
                for est, (_, _, X_test) in zip(fitted, datasets, strict=True):
                    order = list(seconds)
                    rng.shuffle(order)
                    for name in order:
                        spent[name] += _predict_seconds(est, X_test, name == "cache_sized")[0]
                if round_:  # the first round is warm-up
                    for name, s in spent.items():
                        seconds[name].append(s)
            by_threads.append(
                {
                    "threads": n,
                    "seconds": seconds,
                    "ratio": paired_ratio(seconds["cache_sized"], seconds["default"], seed=seed),
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
            "clock": "time.process_time (CPU time of every thread of the process)",
            "rounds": rounds,
        },
        "by_threads": by_threads,
        "bit_identical": identical,
    }
