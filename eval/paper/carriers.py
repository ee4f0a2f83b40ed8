"""Squared norms of the host's ICL carriers, so that ``tau`` has a meaning.

Presence is ``p = ||h||^2 / (tau + ||h||^2)``: ``tau`` is on the scale of
``||h||^2`` of the carriers entering the ICL blocks, and a token's presence is
``1/2`` exactly where ``||h||^2 = tau``. This module measures that scale on a
suite's data: the unpatched host (mode ``"none"``) is fitted on every case and
forward pre-hooks on ``model.icl_blocks`` record ``||x||^2`` (float32 or
wider) of every row entering every block, train rows and test rows apart.
The result is stored by ``eval.paper.store.write_carriers`` and read by the report.

Shape suffixes: ``B`` batch, ``R`` rows, ``E`` carrier width.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from eval.paper.execution import build_estimator, case_data
from eval.paper.spec import make_tasks
from retrofit.files import sha256_file
from retrofit.versions import package_versions

__all__ = ["QUANTILES", "measure_carriers"]

QUANTILES: tuple[float, ...] = (0.0, 0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99, 1.0)
"""Quantiles of ``||x||^2`` stored and reported."""


def _quantiles(values: np.ndarray) -> dict[str, float]:
    if values.size == 0:
        return {}
    qs = np.quantile(values, QUANTILES)
    return {f"q{q:g}": float(v) for q, v in zip(QUANTILES, qs, strict=True)}


class _Recorder:
    """Forward pre-hooks that collect ``||x||^2`` per ICL block, train/test apart."""

    def __init__(self, n_blocks: int) -> None:
        self.train: list[list[np.ndarray]] = [[] for _ in range(n_blocks)]
        self.test: list[list[np.ndarray]] = [[] for _ in range(n_blocks)]

    def hook(self, index: int) -> Any:

        def pre_hook(_module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            x_BRE = args[0] if args else kwargs["x_BRE"]
            n_train = args[1] if len(args) > 1 else kwargs.get("single_eval_pos", 0)
            wide = torch.float64 if x_BRE.dtype == torch.float64 else torch.float32
            sq_BR = x_BRE.detach().to(wide).pow(2).sum(-1).cpu().numpy()
            if kwargs.get("cached_kv") is not None:
                n_train = 0  # cache path: only test rows enter the block
            n_train = int(n_train)
            self.train[index].append(sq_BR[:, :n_train].reshape(-1))
            self.test[index].append(sq_BR[:, n_train:].reshape(-1))

        return pre_hook


def _icl_blocks(estimator: Any) -> Any:
    models = getattr(estimator, "models_", None)
    if not models:
        raise RuntimeError("fitted regressor has no models_")
    blocks = getattr(models[0], "icl_blocks", None)
    if blocks is None:
        raise RuntimeError(f"{type(models[0]).__name__} has no icl_blocks (TabPFN v3 expected)")
    return blocks


def measure_carriers(
    *,
    suite: str,
    model_path: str | Path,
    n_estimators: int,
    datasets: Sequence[str] | None = None,
    seeds: Sequence[int] | None = None,
    max_train_rows: int | None = None,
    max_test_rows: int | None = None,
    device: str = "cpu",
    progress: bool = True,
) -> dict[str, Any]:
    """Fit the unpatched host on each case and record its ICL carrier norms.

    Args:
        suite: Suite name.
        model_path: The resolved checkpoint file.
        n_estimators: Ensemble size (as in the evaluation).
        datasets: Subset of datasets (``None``: all).
        seeds: Subset of seeds (``None``: all).
        max_train_rows: Train rows kept per case (``None``: all).
        max_test_rows: Test rows kept per case (``None``: all).
        device: Torch device.
        progress: Show a progress bar.

    Returns:
        JSON-able statistics: quantiles of ``||x||^2`` over all carriers, over
        train and test rows, per block and per dataset, plus the config.
    """
    tasks = make_tasks(
        suite=suite,
        model_path=model_path,
        modes=("none",),
        n_estimators=n_estimators,
        device=device,
        datasets=datasets,
        seeds=seeds,
        max_train_rows=max_train_rows,
        max_test_rows=max_test_rows,
    )
    pooled_train: list[np.ndarray] = []
    pooled_test: list[np.ndarray] = []
    per_block: dict[int, list[np.ndarray]] = {}
    per_dataset: dict[str, list[np.ndarray]] = {}
    for task in tqdm(tasks, desc="carriers", unit="case", disable=not progress):
        spec = task.spec
        X_train, X_test, y_train, _ = case_data(spec)
        estimator = build_estimator(spec, task.model_path)
        with warnings.catch_warnings():
            # tabpfn's "large on CPU" notices would break the progress bar; the
            # evaluation rows already record them.
            warnings.simplefilter("ignore", UserWarning)
            estimator.fit(X_train, y_train)
            blocks = _icl_blocks(estimator)
            recorder = _Recorder(len(blocks))
            handles = [
                block.register_forward_pre_hook(recorder.hook(i), with_kwargs=True)
                for i, block in enumerate(blocks)
            ]
            try:
                estimator.predict(X_test)
            finally:
                for handle in handles:
                    handle.remove()
        for i in range(len(blocks)):
            train = np.concatenate(recorder.train[i]) if recorder.train[i] else np.empty(0)
            test = np.concatenate(recorder.test[i]) if recorder.test[i] else np.empty(0)
            pooled_train.append(train)
            pooled_test.append(test)
            per_block.setdefault(i, []).extend([train, test])
            per_dataset.setdefault(spec.dataset, []).extend([train, test])
    train_all = np.concatenate(pooled_train) if pooled_train else np.empty(0)
    test_all = np.concatenate(pooled_test) if pooled_test else np.empty(0)
    everything = np.concatenate([train_all, test_all])
    if everything.size == 0:
        raise RuntimeError("no ICL carriers were recorded (no forward pass reached icl_blocks)")
    return {
        "what": "||x||^2 of every row entering each of model.icl_blocks (forward pre-hooks), "
        "unpatched host, float32 or wider",
        "suite": suite,
        "checkpoint_sha256": sha256_file(model_path),
        "n_estimators": n_estimators,
        "cases": [f"{t.spec.dataset}/{t.spec.seed}" for t in tasks],
        "max_train_rows": max_train_rows,
        "max_test_rows": max_test_rows,
        "versions": package_versions(),
        "n_values": int(everything.size),
        "all": _quantiles(everything),
        "train_rows": _quantiles(train_all),
        "test_rows": _quantiles(test_all),
        "per_block": {str(i): _quantiles(np.concatenate(v)) for i, v in per_block.items()},
        "per_dataset": {k: _quantiles(np.concatenate(v)) for k, v in per_dataset.items()},
    }
