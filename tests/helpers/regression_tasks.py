"""A near-linear regression task and a plain tabpfn fit on it, to show a host learns."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from tabpfn import TabPFNRegressor

__all__ = ["fit_predict", "linear_task"]


def linear_task(n: int, d: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``n`` rows of ``d`` scaled, shifted features and a near-linear target around 3."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) * rng.uniform(0.5, 20, size=d) + rng.normal(0, 5, size=d)
    y = (X - X.mean(0)) / X.std(0) @ rng.normal(size=d) + 0.1 * rng.normal(size=n) + 3.0
    return X, y


def fit_predict(path: str | Path, X: np.ndarray, y: np.ndarray, n_train: int) -> np.ndarray:
    """tabpfn's regressor on the checkpoint ``path``, fitted on the first ``n_train`` rows."""
    reg = TabPFNRegressor(
        model_path=path, device="cpu", inference_precision=torch.float32, random_state=0
    )
    return reg.fit(X[:n_train], y[:n_train]).predict(X[n_train:])
