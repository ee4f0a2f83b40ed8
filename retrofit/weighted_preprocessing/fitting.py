"""The row weights of the fit in progress, for the transformers inside a tabpfn step.

A tabpfn step fits trees of scikit-learn transformers (``ColumnTransformer``,
``Pipeline``, ``FeatureUnion``) that clone their children and pass them rows
but no weights. The weighted transformers
(:mod:`retrofit.weighted_preprocessing.transformers`) and steps
(:mod:`retrofit.weighted_preprocessing.steps`) read the weights of the member
being fitted from here instead: :func:`fitting_with` sets them around one
member's fit, in the thread that runs it (a context variable, so parallel
member fits in other threads see their own), and :func:`fit_weights` hands
them to a fit after checking that it sees all of the member's rows. Outside
:func:`fitting_with`, or with every weight 1, a weighted transformer fits
exactly as tabpfn's does.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

import numpy as np

from retrofit.errors import UnsupportedWeightingError

__all__ = ["fit_weights", "fitting_with", "weight_total", "weighted_count"]

_ACTIVE: contextvars.ContextVar[np.ndarray | None] = contextvars.ContextVar(
    "retrofit_fit_row_weights", default=None
)


@contextlib.contextmanager
def fitting_with(w_N: np.ndarray | None) -> Iterator[None]:
    """Within the block, weighted fits in this thread count row ``j`` ``w_N[j]`` times."""
    token = _ACTIVE.set(None if w_N is None else np.asarray(w_N, dtype=np.float64))
    try:
        yield
    finally:
        _ACTIVE.reset(token)


def fit_weights(n_rows: int, what: str) -> np.ndarray | None:
    """The active weights for a fit on ``n_rows`` rows; None when unweighted or all 1.

    Raises:
        UnsupportedWeightingError: The fit sees another number of rows than
            the weights cover (a step that drops or resamples rows).
    """
    w_N = _ACTIVE.get()
    if w_N is None:
        return None
    if len(w_N) != n_rows:
        raise UnsupportedWeightingError(
            f"row weights: {what} was fitted on {n_rows} rows but the weights cover "
            f"{len(w_N)}; it cannot be weighted"
        )
    if np.all(w_N == 1.0):
        return None
    return w_N


def weighted_count(n_rows: int, what: str) -> int:
    """The row count a fit on ``n_rows`` rows reads: ``sum w``, rounded, at least 1.

    Counts that switch a decision or size a transform (quantiles, SVD
    components, the categorical thresholds) are integers; with integer weights
    ``sum w`` is the repeated row count exactly.
    """
    w_N = fit_weights(n_rows, what)
    return n_rows if w_N is None else weight_total(w_N)


def weight_total(w_N: np.ndarray) -> int:
    """``sum w`` as the integer row count of the repeated rows (rounded, at least 1)."""
    return max(1, int(np.rint(np.sum(w_N, dtype=np.float64))))
