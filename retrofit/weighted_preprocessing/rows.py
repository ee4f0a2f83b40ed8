"""The rows a weighted fit holds, and tabpfn's row-count rules under weights.

Weight-0 rows are removal (presence 0): they are dropped before anything is
fitted (:func:`drop_zero_weight_rows`), so every weighted fit below sees
positive weights only. tabpfn's rules that compare a row count with a
threshold count ``sum w``, the rows of the repeated table;
:func:`categorical_inference_threshold` turns the 100-row rule of its
modality detection into an equivalent threshold on the rows held. The limits
on what a device can hold (``MAX_NUMBER_OF_SAMPLES``, ``MAX_CPU_SAMPLES``)
count the rows held, which is what costs memory and time.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.utils import _safe_indexing

from retrofit.weighted_preprocessing.fitting import weight_total

__all__ = ["categorical_inference_threshold", "drop_zero_weight_rows", "positive_row_weights"]


def positive_row_weights(row_weights: Any) -> np.ndarray:
    """``row_weights`` as a float64 ``(N,)`` array of finite positive weights.

    Raises:
        ValueError: Not one-dimensional, not finite, or not positive (the
            estimators validate the user's weights first; this guards the
            weighted fits).
    """
    w_N = np.asarray(row_weights, dtype=np.float64)
    if w_N.ndim != 1 or not np.all(np.isfinite(w_N)) or not np.all(w_N > 0):
        raise ValueError(
            "row weights of a weighted fit must be a 1-D array of finite positive numbers "
            "(drop the weight-0 rows first)"
        )
    return w_N


def drop_zero_weight_rows(X: Any, y: Any, row_weights: Any) -> tuple[Any, Any, np.ndarray]:
    """``X``, ``y`` and the weights without the weight-0 rows (weight 0 is removal).

    ``X`` and ``y`` keep their types (arrays, DataFrames, Series); nothing is
    copied when no weight is 0.
    """
    w_N = np.asarray(row_weights, dtype=np.float64)
    kept = np.flatnonzero(w_N != 0)
    if len(kept) == len(w_N):
        return X, y, w_N
    return _safe_indexing(X, kept), _safe_indexing(y, kept), w_N[kept]


def categorical_inference_threshold(row_weights: np.ndarray, threshold: int) -> int:
    """The threshold on the rows held that decides as ``threshold`` does on ``sum w`` rows.

    tabpfn infers categorical columns from a numeric one only when the fit has
    more than ``MIN_NUMBER_SAMPLES_FOR_CATEGORICAL_INFERENCE`` rows; with
    weights the rows are ``sum w``. Passing the returned value as that setting
    for the ``N`` rows held makes ``N > value`` exactly ``sum w > threshold``.
    """
    n_rows = len(row_weights)
    if np.all(row_weights == 1.0):
        return threshold
    return n_rows - 1 if weight_total(row_weights) > threshold else n_rows
