"""Weighted column statistics whose integer weights equal repeated rows.

A weight ``w_j`` counts row ``j`` as ``w_j`` copies. Order statistics place
row ``j`` at the positions ``[C_{j-1}, C_j)`` of the sorted multiset, ``C``
the cumulative weights, and interpolate between positions with numpy's own
arithmetic, so on integer weights they are bit-identical to numpy on the
rows repeated; sums (means, variances) are the same formulas summed in
another order, so they agree to rounding. Real weights use the same
formulas (a definition rather than an equivalence).

NaN is missing, as in numpy's ``nan*`` functions: a column's statistics read
its non-NaN rows and their weights.

Shape letters: N rows, F columns, Q requested percentiles.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "weighted_count_per_value",
    "weighted_nanmean",
    "weighted_nanmedian",
    "weighted_nanpercentile",
    "weighted_nanvar",
]


#: How close (in ulps of the running sum) a cumulative weight is to an integer it is taken as.
_BOUNDARY_ULPS = 64


def _columns(X: np.ndarray) -> np.ndarray:
    """``X`` as an ``(N, F)`` float64 array (a 1-D input is one column)."""
    X = np.asarray(X, dtype=np.float64)
    return X[:, None] if X.ndim == 1 else X


def _sorted_with_cumulative_weights(
    x_N: np.ndarray, w_N: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The non-NaN values of one column, sorted, and their cumulative weights."""
    valid_N = ~np.isnan(x_N)
    x_n, w_n = x_N[valid_N], w_N[valid_N]
    # Equal values are equal bits (but for the sign of zero, which numpy leaves as
    # arbitrary): their order does not matter.
    order_n = np.argsort(x_n)
    cum_n = np.cumsum(w_n[order_n], dtype=np.float64)
    # Real weights whose running sum is an integer in exact arithmetic (1/3 + 2/3, a
    # row's weight split over copies) round to either side of it, and a position on
    # that boundary would then fall in the row before or after it: a sum within a few
    # ulps of an integer is that integer. Integer weights sum exactly (same bits).
    nearest_n = np.rint(cum_n)
    close_n = np.abs(cum_n - nearest_n) <= _BOUNDARY_ULPS * np.finfo(np.float64).eps * cum_n
    return x_n[order_n], np.where(close_n, nearest_n, cum_n)


def _at_positions(x_n: np.ndarray, cum_n: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """The values at integer-valued positions of the sorted multiset (row j: [C_{j-1}, C_j))."""
    index = np.searchsorted(cum_n, positions, side="right")
    return x_n[np.minimum(index, len(x_n) - 1)]


def _lerp(a: np.ndarray, b: np.ndarray, t: np.ndarray) -> np.ndarray:
    """The linear interpolation of numpy's percentiles, operation for operation (same bits)."""
    diff = b - a
    out = np.add(a, diff * t)
    np.subtract(b, diff * (1 - t), out=out, where=t >= 0.5, casting="unsafe")
    return out


def weighted_nanpercentile(X: np.ndarray, w_N: np.ndarray, q: np.ndarray | list) -> np.ndarray:
    """Frequency-weighted ``np.nanpercentile(X, q, axis=0)`` (method ``"linear"``).

    With integer weights the result is bit-identical to ``np.nanpercentile`` on
    the rows repeated ``w_j`` times (numpy's weighted percentile offers only
    ``"inverted_cdf"``). The virtual position ``(n - 1) q``, ``n = sum w`` over
    the column's non-NaN rows, is located on the cumulative weights; positions
    at or past the last are the largest value, as in numpy.

    Args:
        X: ``(N, F)`` (or ``(N,)``) values; NaN is missing.
        w_N: ``(N,)`` positive weights.
        q: Percentiles in [0, 100], a sequence of Q.

    Returns:
        ``(Q, F)`` percentiles (``(Q,)`` for a 1-D ``X``); NaN for a column with
        no value.
    """
    X_NF = _columns(X)
    q_Q = np.true_divide(np.asarray(q, dtype=np.float64), 100)
    out_QF = np.full((len(q_Q), X_NF.shape[1]), np.nan)
    for f in range(X_NF.shape[1]):
        x_n, cum_n = _sorted_with_cumulative_weights(X_NF[:, f], w_N)
        if len(x_n) == 0:
            continue
        n = cum_n[-1]
        virtual_Q = (n - 1) * q_Q
        previous_Q = np.floor(virtual_Q)
        above_Q = virtual_Q >= n - 1
        below_Q = virtual_Q < 0
        # numpy moves out-of-range neighbours to the ends before taking the fraction.
        previous_Q[above_Q] = -1
        previous_Q[below_Q] = 0
        gamma_Q = virtual_Q - previous_Q
        a_Q = _at_positions(x_n, cum_n, np.maximum(previous_Q, 0))
        b_Q = _at_positions(x_n, cum_n, np.maximum(previous_Q + 1, 0))
        a_Q[above_Q] = b_Q[above_Q] = x_n[-1]
        a_Q[below_Q] = b_Q[below_Q] = x_n[0]
        out_QF[:, f] = _lerp(a_Q, b_Q, gamma_Q)
    return out_QF[:, 0] if np.ndim(X) == 1 else out_QF


def weighted_nanmedian(X: np.ndarray, w_N: np.ndarray) -> np.ndarray:
    """Frequency-weighted ``np.nanmedian(X, axis=0)``: the mean of the two middle positions.

    numpy's median averages the values at positions ``floor((n-1)/2)`` and
    ``ceil((n-1)/2)`` as ``(a + b) / 2`` (one value when ``n`` is odd), which
    differs in the last bit from the 50th percentile's interpolation; this
    follows it, so integer weights give ``np.nanmedian`` of the repeated rows.
    """
    X_NF = _columns(X)
    out_F = np.full(X_NF.shape[1], np.nan)
    for f in range(X_NF.shape[1]):
        x_n, cum_n = _sorted_with_cumulative_weights(X_NF[:, f], w_N)
        if len(x_n) == 0:
            continue
        middle = (cum_n[-1] - 1) / 2
        a, b = _at_positions(x_n, cum_n, np.array([np.floor(middle), np.ceil(middle)]))
        out_F[f] = (a + b) / 2
    return out_F[0] if np.ndim(X) == 1 else out_F


def weighted_nanmean(X: np.ndarray, w_N: np.ndarray) -> np.ndarray:
    """``sum w x / sum w`` per column over its non-NaN rows; NaN where a column has none."""
    X_NF = _columns(X)
    valid_NF = ~np.isnan(X_NF)
    w_NF = np.where(valid_NF, w_N[:, None], 0.0)
    total_F = w_NF.sum(axis=0)
    sums_F = np.where(valid_NF, X_NF * w_NF, 0.0).sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_F = np.where(total_F > 0, sums_F / total_F, np.nan)
    return mean_F[0] if np.ndim(X) == 1 else mean_F


def weighted_nanvar(X: np.ndarray, w_N: np.ndarray, *, ddof: int = 0) -> np.ndarray:
    """``sum w (x - mean)^2 / (sum w - ddof)`` per column over its non-NaN rows.

    ``ddof=1`` is the sample variance of the repeated rows (divides by
    ``sum w - 1`` where the unweighted one divides by ``N - 1``).
    """
    X_NF = _columns(X)
    valid_NF = ~np.isnan(X_NF)
    w_NF = np.where(valid_NF, w_N[:, None], 0.0)
    mean_F = np.atleast_1d(weighted_nanmean(X_NF, w_N))
    squares_NF = np.where(valid_NF, (X_NF - mean_F) ** 2 * w_NF, 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        var_F = squares_NF.sum(axis=0) / (w_NF.sum(axis=0) - ddof)
    return var_F[0] if np.ndim(X) == 1 else var_F


def weighted_count_per_value(x_N: np.ndarray, w_N: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct values of a column (``np.unique``'s, NaN one value) and the weight of each."""
    values_K, inverse_N = np.unique(x_N, return_inverse=True)
    return values_K, np.bincount(inverse_N.reshape(-1), weights=w_N, minlength=len(values_K))
