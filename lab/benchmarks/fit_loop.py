"""A loop of ``fit`` + ``predict`` over many small datasets, against plain tabpfn's loop.

The way TabPFN is used per group, per series or per fold: one estimator,
refitted on each dataset in turn. Three peers run the same loop on the
embedded host: ``tabpfn.TabPFNRegressor`` (the baseline),
:class:`retrofit.OTabPFNRegressor` with ``mode="none"`` and with
``mode="full-o"``, each its own estimator refitted on every dataset. A round
walks the datasets once; at each dataset every peer fits and predicts, in a
fresh random order, so load drift on a shared machine (which moves a whole
loop by 20-50 % here) hits the peers alike. Time is CPU time of the calling
thread (``time.thread_time``) on one torch thread, summed per peer over the
round; a ratio is the median of the per-round ratios
(:func:`lab.benchmarks.timing.paired_ratio`).

``python -m lab.benchmarks.fit_loop`` prints the result as JSON.
"""

from __future__ import annotations

import json
import random
import time
from typing import Any

import numpy as np
import torch
from tabpfn import TabPFNRegressor

from lab.benchmarks.batched import ragged_datasets
from lab.benchmarks.timing import paired_ratio
from retrofit import OTabPFNRegressor
from retrofit.models.loading import resolve_model

__all__ = ["FIT_LOOP_TARGETS", "bench_fit_loop"]

#: Upper bounds on each peer's loop time over plain tabpfn's.
FIT_LOOP_TARGETS: dict[str, float] = {"none": 1.03, "full-o": 1.06}


def _peers(seed: int, n_estimators: int | str) -> dict[str, Any]:
    common = {
        "device": "cpu",
        "inference_precision": torch.float32,
        "n_estimators": n_estimators,
        "random_state": seed,
    }
    return {
        "tabpfn": TabPFNRegressor(
            model_path=resolve_model("embedded").tabpfn_model_path("regressor"), **common
        ),
        "none": OTabPFNRegressor(mode="none", model_path="embedded", **common),
        "full-o": OTabPFNRegressor(mode="full-o", model_path="embedded", **common),
    }


def _fit_predict(estimator: Any, X: Any, y: Any, X_test: Any) -> float:
    t0 = time.thread_time()
    estimator.fit(X, y)
    estimator.predict(X_test)
    return time.thread_time() - t0


def bench_fit_loop(
    *,
    n_datasets: int = 24,
    min_rows: int = 30,
    max_rows: int = 200,
    rounds: int = 7,
    warmup: int = 1,
    n_estimators: int | str = "auto",
    seed: int = 0,
) -> dict[str, Any]:
    """Times the three peers' loops interleaved and returns their ratios to tabpfn's.

    Args:
        n_datasets: Datasets per loop (:func:`lab.benchmarks.batched.ragged_datasets`).
        min_rows: Fewest training rows of a dataset.
        max_rows: Most training rows of a dataset.
        rounds: Timed rounds (each runs every peer's loop once, interleaved).
        warmup: Untimed rounds first.
        n_estimators: The estimators' ``n_estimators``.
        seed: Seed of the datasets, the estimators and the round orders.

    Returns:
        ``{"setup", "seconds" (per peer, one per round), "median_s",
        "ratios" ({"none", "full-o"}: paired ratios of the loops to tabpfn's,
        with CIs), "per_fit_ratios" (the same over single dataset fits),
        "targets", "met"}``; ``met`` compares each loop ratio with its target.
    """
    datasets = ragged_datasets(n_datasets, min_rows=min_rows, max_rows=max_rows, seed=seed)
    peers = _peers(seed, n_estimators)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    rng = random.Random(seed)
    seconds: dict[str, list[float]] = {name: [] for name in peers}
    per_fit: dict[str, list[float]] = {name: [] for name in peers}
    try:
        for round_ in range(warmup + rounds):
            spent: dict[str, list[float]] = {name: [] for name in peers}
            for X, y, X_test in datasets:
                order = list(peers)
                rng.shuffle(order)
                for name in order:
                    spent[name].append(_fit_predict(peers[name], X, y, X_test))
            if round_ >= warmup:
                for name, fits in spent.items():
                    seconds[name].append(sum(fits))
                    per_fit[name] += fits
    finally:
        torch.set_num_threads(threads)
    ratios = {
        name: paired_ratio(seconds[name], seconds["tabpfn"], seed=seed) for name in FIT_LOOP_TARGETS
    }
    # The same comparison per dataset fit: a median over rounds x datasets pairs,
    # less moved by a round that a burst of load hit unevenly.
    per_fit_ratios = {
        name: paired_ratio(per_fit[name], per_fit["tabpfn"], seed=seed) for name in FIT_LOOP_TARGETS
    }
    return {
        "setup": {
            "host": "embedded",
            "datasets": n_datasets,
            "train_rows": [min_rows, max_rows],
            "n_estimators": n_estimators,
            "inference_precision": "float32",
            "torch_threads": 1,
            "clock": "time.thread_time (CPU time of the calling thread)",
            "interleaved": "per dataset, peers in a random order",
            "rounds": rounds,
        },
        "seconds": seconds,
        "median_s": {name: float(np.median(s)) for name, s in seconds.items()},
        "ratios": ratios,
        "per_fit_ratios": per_fit_ratios,
        "targets": dict(FIT_LOOP_TARGETS),
        "met": {name: ratios[name]["ratio"] <= t for name, t in FIT_LOOP_TARGETS.items()},
    }


if __name__ == "__main__":
    print(json.dumps(bench_fit_loop(), indent=2))
