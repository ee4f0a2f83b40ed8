"""The estimators' statistics of the targets, with row weights.

The regressor standardises its target with the mean and the population
standard deviation of the training targets (``np.mean``, ``np.std``); the
classifier keeps the count of each class (``class_counts_``, which
``balance_probabilities`` reads). Weighted, row ``j`` counts ``w_j`` times:
integer weights give the repeated rows' values (the means up to rounding,
the counts exactly).
"""

from __future__ import annotations

import numpy as np

__all__ = ["weighted_class_counts", "weighted_target_standardisation"]


def weighted_target_standardisation(y_N: np.ndarray, w_N: np.ndarray) -> tuple[float, float]:
    """``(mean, std)`` of the targets counting row ``j`` ``w_j`` times (std: population)."""
    y_N = np.asarray(y_N, dtype=np.float64)
    total = np.sum(w_N)
    mean = np.sum(w_N * y_N) / total
    std = np.sqrt(np.sum(w_N * (y_N - mean) ** 2) / total)
    return float(mean), float(std)


def weighted_class_counts(y_encoded_N: np.ndarray, w_N: np.ndarray, n_classes: int) -> np.ndarray:
    """``(n_classes,)`` the weight of each encoded class (float; integers for integer weights)."""
    return np.bincount(np.asarray(y_encoded_N, dtype=np.int64), weights=w_N, minlength=n_classes)
