"""Power-transform lambdas by weighted maximum likelihood.

scipy (and tabpfn's copy of its Yeo-Johnson fix) choose a column's lambda by
maximising the profile log-likelihood of the transformed column with a
bounded scalar solver. Counting row ``j`` ``w_j`` times makes that
likelihood

    llf(lambda) = -W/2 log var_w(psi(x, lambda)) + (lambda - 1) sum_j w_j g(x_j),

``W = sum w``, ``var_w`` the weighted (population) variance, ``g`` the
log-Jacobian term (``sign(x) log1p|x|`` for Yeo-Johnson, ``log x`` for
Box-Cox). The same solver runs on it with the same bounds (they depend only
on the set of values), so the lambda of integer weights equals the lambda of
the repeated rows up to the solver's tolerance: the two objectives differ by
rounding, so the solvers may stop a tolerance apart (``xtol`` 1.48e-8 and
scipy's relative tolerance; measured in the tests).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from scipy import optimize, special

__all__ = ["weighted_box_cox_lambda", "weighted_yeo_johnson_lambda"]

#: scipy's tolerance for both solvers (``optimize.brent``'s default, passed to fminbound).
_XTOL = 1.48e-08


def _weighted_variance(y_n: np.ndarray, w_n: np.ndarray) -> float:
    total = w_n.sum()
    mean = (w_n * y_n).sum() / total
    return float((w_n * (y_n - mean) ** 2).sum() / total)


def weighted_yeo_johnson_lambda(
    x_n: np.ndarray,
    w_n: np.ndarray,
    transform: Callable[[np.ndarray, float], np.ndarray],
) -> float:
    """The Yeo-Johnson lambda of a NaN-free column whose row ``j`` counts ``w_n[j]`` times.

    The bounds are scipy's (``yeojohnson_normmax``: overflow-safe for values up
    to 20 times the largest seen), the solver ``optimize.fminbound`` with its
    tolerance; an all-zero column has lambda 1, as there.

    Args:
        x_n: The column's values (finite).
        w_n: Their positive weights.
        transform: The transformer's Yeo-Johnson function ``(x, lambda) -> y``.
    """
    if not np.all(np.isfinite(x_n)):
        raise ValueError("Yeo-Johnson input must be finite.")
    if np.all(x_n == 0):
        return 1.0
    total = w_n.sum()
    jacobian = (w_n * np.sign(x_n) * np.log1p(np.abs(x_n))).sum()
    tiny = np.finfo(np.float64).tiny

    def negative_llf(lmbda: float) -> float:
        variance = _weighted_variance(transform(x_n, lmbda), w_n)
        if not variance >= tiny:  # scipy rejects a vanishing variance
            return np.inf
        return -(-total / 2 * np.log(variance) + (lmbda - 1) * jacobian)

    finfo = np.finfo(np.float64)
    log1p_max_x = np.log1p(20 * np.max(np.abs(x_n)))
    log_eps = np.log(finfo.eps)
    lower = (np.log(finfo.tiny) - log_eps) / 2 / log1p_max_x
    upper = (np.log(finfo.max) + log_eps) / 2 / log1p_max_x
    if np.all(x_n < 0):
        lower, upper = 2 - upper, 2 - lower
    elif np.any(x_n < 0):
        lower, upper = max(2 - upper, lower), min(2 - lower, upper)
    with np.errstate(invalid="ignore", over="ignore"):
        return float(optimize.fminbound(negative_llf, lower, upper, xtol=_XTOL))


def weighted_box_cox_lambda(x_n: np.ndarray, w_n: np.ndarray) -> float:
    """The Box-Cox lambda of a positive, NaN-free column whose row ``j`` counts ``w_n[j]`` times.

    scipy's ``boxcox_normmax(method="mle")``: ``optimize.brent`` from the
    bracket (-2, 2) on the log-likelihood, its variance taken in log space as
    scipy does (the transform's offset and the factor ``1/lambda`` leave it).
    """
    if np.all(x_n == x_n[0]):
        raise ValueError("Data must not be constant.")
    if np.any(x_n <= 0):
        raise ValueError("Data must be positive.")
    total = w_n.sum()
    log_x = np.log(x_n)
    jacobian = (w_n * log_x).sum()

    def log_variance(lmbda: float) -> float:
        if lmbda == 0:
            return float(np.log(_weighted_variance(log_x, w_n)))
        scaled = lmbda * log_x
        log_mean = special.logsumexp(scaled, b=w_n) - np.log(total)
        # log|x^lambda - mean| per row, then the weighted mean of its square.
        log_deviation, _ = special.logsumexp(
            np.stack([scaled, np.full_like(scaled, log_mean)]),
            axis=0,
            b=np.stack([np.ones_like(scaled), -np.ones_like(scaled)]),
            return_sign=True,
        )
        return float(
            special.logsumexp(2 * log_deviation, b=w_n) - np.log(total) - 2 * np.log(abs(lmbda))
        )

    def negative_llf(lmbda: float) -> float:
        return -((lmbda - 1) * jacobian - total / 2 * log_variance(lmbda))

    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        return float(optimize.brent(negative_llf, brack=(-2.0, 2.0)))
