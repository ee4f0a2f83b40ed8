"""Jackknife+, CV+ and split-conformal prediction intervals from arrays.

The order statistics are those of Barber, Candes, Ramdas and Tibshirani,
"Predictive inference with the jackknife+", Annals of Statistics 49(1), 2021
(section 2 and section 4 for CV+). For ``n`` values ``v_1..v_n``:

* ``q+(v)`` is the ``ceil((1 - alpha) * (n + 1))``-th smallest value, and
  ``+inf`` where that rank exceeds ``n``;
* ``q-(v)`` is the ``floor(alpha * (n + 1))``-th smallest value, and ``-inf``
  where that rank is 0; ``q-(v) = -q+(-v)``.

With ``R_i = |y_i - mu_{-k(i)}(X_i)|``, the residual of train row ``i``
predicted by the model fitted without its fold ``k(i)``, and
``mu_{-k}(x)`` that model's prediction at a query ``x``, the interval is::

    [ q-( mu_{-k(i)}(x) - R_i ),  q+( mu_{-k(i)}(x) + R_i ) ]   over i = 1..n

CV+ with ``K`` folds; jackknife+ is CV+ with every row its own fold. Split
conformal, for comparison, calibrates one model on ``m`` held-out rows:
``mu(x) -+ q+(R)`` with the same rank ``ceil((1 - alpha) * (m + 1))``.

The ranks are computed on ``alpha`` as the decimal it prints as
(``repr(alpha)``, exactly, as a fraction), so ``alpha=0.1`` with ``n + 1 = 30``
gives rank 27, never 28 through the binary rounding of ``0.9 * 30``.

Shape letters: ``N`` train rows (residuals), ``K`` folds, ``Q`` query rows,
``M`` calibration rows of split conformal.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from retrofit.errors import InvalidInputError

__all__ = [
    "MAX_CV_PLUS_ALPHA",
    "PredictionIntervals",
    "checked_alpha",
    "cv_plus_intervals",
    "jackknife_plus_intervals",
    "lower_rank",
    "split_conformal_intervals",
    "upper_rank",
]

# Cells of the (N, Q) matrix of candidate endpoints held at once; larger query
# sets are done in column blocks so memory stays bounded (32 MiB of float64).
_BLOCK_CELLS = 1 << 22


@dataclass(frozen=True)
class PredictionIntervals:
    """Lower and upper endpoints per query row, and how they were made.

    Attributes:
        lower_Q: Lower endpoints, ``-inf`` where ``alpha`` is too small for
            the number of residuals.
        upper_Q: Upper endpoints, ``+inf`` likewise.
        alpha: The miscoverage level.
        method: ``"jackknife+"``, ``"cv+"`` or ``"split"``.
    """

    lower_Q: np.ndarray
    upper_Q: np.ndarray
    alpha: float
    method: str

    @property
    def width_Q(self) -> np.ndarray:
        """``upper_Q - lower_Q`` (``inf`` for an unbounded interval)."""
        return self.upper_Q - self.lower_Q

    def covers(self, y_Q: np.ndarray) -> np.ndarray:
        """Whether each query's true target lies in its closed interval."""
        y_Q = np.asarray(y_Q, dtype=np.float64)
        return (self.lower_Q <= y_Q) & (y_Q <= self.upper_Q)


#: The largest ``alpha`` of jackknife+ and CV+: beyond it the lower rank
#: ``floor(alpha (n + 1))`` can pass the upper rank ``ceil((1 - alpha)(n + 1))``
#: and a lower endpoint its upper one (and the guarantee, ``1 - 2 alpha``, is
#: void already at 0.5). Split conformal's ``mu -+ q+(R)`` is an interval for
#: every ``alpha`` in (0, 1).
MAX_CV_PLUS_ALPHA = 0.5


def checked_alpha(alpha: float, *, method: str = "split") -> Fraction:
    """``alpha`` as the exact fraction of its decimal, if the method's intervals are defined there.

    Args:
        alpha: The miscoverage level.
        method: ``"split"``: ``alpha`` in (0, 1); ``"jackknife+"`` or
            ``"cv+"``: in (0, :data:`MAX_CV_PLUS_ALPHA`].

    Raises:
        InvalidInputError: ``alpha`` is no number or outside the method's range.
    """
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float, np.floating)):
        raise InvalidInputError(f"alpha must be a number in (0, 1), got {alpha!r}")
    if not 0.0 < float(alpha) < 1.0:
        raise InvalidInputError(f"alpha must be in (0, 1), got {alpha!r}")
    if method != "split" and float(alpha) > MAX_CV_PLUS_ALPHA:
        raise InvalidInputError(
            f"alpha must be in (0, {MAX_CV_PLUS_ALPHA}] for {method} (its guarantee is "
            f"1 - 2 alpha coverage, and above {MAX_CV_PLUS_ALPHA} a lower end can pass the "
            f"upper one), got {alpha!r}; method='split' takes alpha in (0, 1)"
        )
    return Fraction(repr(float(alpha)))


def upper_rank(n: int, alpha: float) -> int:
    """``ceil((1 - alpha) * (n + 1))``: the rank of ``q+`` among ``n`` values (> n: ``+inf``)."""
    return math.ceil((1 - checked_alpha(alpha)) * (n + 1))


def lower_rank(n: int, alpha: float) -> int:
    """``floor(alpha * (n + 1))``: the rank of ``q-`` among ``n`` values (0: ``-inf``)."""
    return math.floor(checked_alpha(alpha) * (n + 1))


def _kth_smallest(values_NQ: np.ndarray, rank: int, missing: float) -> np.ndarray:
    """The ``rank``-th smallest (1-based) of each column; ``missing`` where none is."""
    n = values_NQ.shape[0]
    if rank < 1 or rank > n:
        return np.full(values_NQ.shape[1], missing)
    return np.partition(values_NQ, rank - 1, axis=0)[rank - 1]


def _float_array(name: str, value: object, ndim: int) -> np.ndarray:
    array = np.asarray(value, dtype=np.float64)
    if array.ndim != ndim:
        raise InvalidInputError(f"{name} must be {ndim}-D, got shape {array.shape}")
    if not np.isfinite(array).all():
        raise InvalidInputError(f"{name} holds NaN or inf; the intervals need finite values")
    return array


def cv_plus_intervals(
    residuals_N: np.ndarray,
    fold_of_row_N: np.ndarray,
    mu_query_KQ: np.ndarray,
    *,
    alpha: float = 0.1,
    method: str = "cv+",
) -> PredictionIntervals:
    """CV+ intervals (jackknife+ when every row is its own fold).

    Args:
        residuals_N: ``|y_i - mu_{-k(i)}(X_i)|`` for each train row ``i``.
        fold_of_row_N: The fold ``k(i)`` that held row ``i`` out, an index
            into the first axis of ``mu_query_KQ``.
        mu_query_KQ: ``mu_{-k}(x_q)``: each fold's model at each query row.
        alpha: Miscoverage level in (0, 0.5]; the intervals aim at ``1 - alpha``
            (guaranteed: ``1 - 2 alpha`` for jackknife+, a little less for CV+).
        method: Name recorded on the result.

    Returns:
        The intervals, one per query row.

    Raises:
        InvalidInputError: On a bad ``alpha`` (above 0.5 included: a lower end
            could pass its upper one), shapes that do not match, a fold index
            out of range, or non-finite values.
    """
    checked_alpha(alpha, method=method)
    residuals_N = _float_array("residuals_N", residuals_N, 1)
    mu_query_KQ = _float_array("mu_query_KQ", mu_query_KQ, 2)
    folds_N = np.asarray(fold_of_row_N)
    if folds_N.shape != residuals_N.shape or not np.issubdtype(folds_N.dtype, np.integer):
        raise InvalidInputError(
            f"fold_of_row_N must be integers of shape {residuals_N.shape}, got "
            f"{folds_N.dtype} of shape {folds_N.shape}"
        )
    if (residuals_N < 0).any():
        raise InvalidInputError("residuals_N must be absolute residuals (>= 0)")
    n_folds = mu_query_KQ.shape[0]
    if folds_N.size and (folds_N.min() < 0 or folds_N.max() >= n_folds):
        raise InvalidInputError(
            f"fold_of_row_N holds folds outside 0..{n_folds - 1} (mu_query_KQ has {n_folds} rows)"
        )
    n, n_query = residuals_N.size, mu_query_KQ.shape[1]
    lo_rank, hi_rank = lower_rank(n, alpha), upper_rank(n, alpha)
    lower_Q = np.empty(n_query)
    upper_Q = np.empty(n_query)
    step = max(1, _BLOCK_CELLS // max(n, 1))
    for start in range(0, n_query, step):
        block = slice(start, start + step)
        mu_NQ = mu_query_KQ[folds_N, block]
        lower_Q[block] = _kth_smallest(mu_NQ - residuals_N[:, None], lo_rank, -np.inf)
        upper_Q[block] = _kth_smallest(mu_NQ + residuals_N[:, None], hi_rank, np.inf)
    return PredictionIntervals(lower_Q, upper_Q, float(alpha), method)


def jackknife_plus_intervals(
    residuals_N: np.ndarray, mu_query_NQ: np.ndarray, *, alpha: float = 0.1
) -> PredictionIntervals:
    """Jackknife+ intervals: CV+ with row ``i`` the only row of fold ``i``.

    Args:
        residuals_N: Leave-one-out residuals ``|y_i - mu_{-i}(X_i)|``.
        mu_query_NQ: ``mu_{-i}(x_q)``: the model without row ``i`` at each query.
        alpha: Miscoverage level in (0, 0.5].

    Returns:
        The intervals, one per query row.
    """
    n = np.asarray(residuals_N).shape[0] if np.ndim(residuals_N) else 0
    return cv_plus_intervals(
        residuals_N, np.arange(n), mu_query_NQ, alpha=alpha, method="jackknife+"
    )


def split_conformal_intervals(
    residuals_M: np.ndarray, mu_query_Q: np.ndarray, *, alpha: float = 0.1
) -> PredictionIntervals:
    """Split-conformal intervals ``mu(x) -+ q+(R)`` from ``M`` calibration residuals.

    Args:
        residuals_M: ``|y_j - mu(X_j)|`` on calibration rows the model did not see.
        mu_query_Q: The same model's predictions at the query rows.
        alpha: Miscoverage level in (0, 1).

    Returns:
        The intervals, one per query row (``+-inf`` when ``M`` is too small).
    """
    checked_alpha(alpha)
    residuals_M = _float_array("residuals_M", residuals_M, 1)
    mu_query_Q = _float_array("mu_query_Q", mu_query_Q, 1)
    if (residuals_M < 0).any():
        raise InvalidInputError("residuals_M must be absolute residuals (>= 0)")
    half = _kth_smallest(residuals_M[:, None], upper_rank(residuals_M.size, alpha), np.inf)[0]
    return PredictionIntervals(mu_query_Q - half, mu_query_Q + half, float(alpha), "split")
