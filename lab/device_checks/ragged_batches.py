"""Part 4 of the GPU check: ragged ``predict_batched`` on the device, exactness and speed.

Ragged ``predict_batched`` (32 datasets of 50-2,000 train rows) against
per-dataset ``predict`` (log-probability gap), and its time against a loop of
fit/predict, interleaved.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from tabpfn import TabPFNRegressor

from lab.benchmarks.batched import bench_case, ragged_datasets
from retrofit import OTabPFNRegressor
from retrofit.batching.regression import predict_batched

__all__ = ["EXACTNESS_PADDING", "ragged_batches"]

#: Padded-share bound of the ragged-batch exactness check: loose, so datasets share forwards.
EXACTNESS_PADDING = 0.9


def ragged_batches(
    device: str, quick: bool, model_path: str, progress: Callable[[str], None]
) -> dict[str, Any]:
    """Ragged ``predict_batched`` on the device: equal to per-dataset ``predict``, and its speed.

    Every dataset's batched log-probabilities against its own ``predict`` (gap
    relative to ``max(1, |log p|)``, the test suite's measure), with a loose
    padded-share bound so that datasets really share padded forwards (the
    padding is what is checked); then the batched benchmark's case
    (:func:`lab.benchmarks.batched.bench_case`: loop and batched at the
    device's default bound, interleaved).
    """
    n, max_rows = (3, 60) if quick else (32, 2000)
    data = ragged_datasets(n, min_rows=20 if quick else 50, max_rows=max_rows, seed=n)
    est = OTabPFNRegressor(
        model_path=model_path,
        device=device,
        n_estimators=1 if quick else "auto",
        inference_precision=torch.float32,
        ignore_pretraining_limits=True,
    ).fit(data[0][0], data[0][1])
    template = est.batched_host()
    lists = [[d[k] for d in data] for k in range(3)]
    batched = predict_batched(
        template, *lists, padded=True, output_type="full", max_padded_fraction=EXACTNESS_PADDING
    )
    gaps = []
    for (X, y, X_test), got in zip(data, batched.results, strict=True):
        alone = TabPFNRegressor(**template.get_params(deep=False)).fit(X, y)
        want = alone.predict(X_test, output_type="full")["logits"].numpy()
        have = got["logits"].numpy()
        gaps.append(float((np.abs(want - have) / np.maximum(1.0, np.abs(want))).max()))
    progress(f"ragged batches: max log-prob gap {max(gaps):.3g} over {n} datasets")
    case = bench_case(
        template,
        data,
        same_shape=False,
        device=est.devices_[0],
        repeats=1 if quick else 3,
        seed=0,
        warmup=True,
        progress=progress,
    )
    return {
        "n_datasets": n,
        "rows": [int(min(len(d[0]) for d in data)), int(max(len(d[0]) for d in data))],
        "max_logprob_gap": max(gaps),
        "logprob_gaps": gaps,
        "padding": batched.stats.to_dict(),
        "case": case,
    }
