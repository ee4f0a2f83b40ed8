"""Jackknife+, CV+ and split conformal on arrays: the definition, the ranks, the coverage.

The reference is a direct transcription of Barber et al. (2021) in float64
Python loops: for each query the ``n`` candidate endpoints are listed, sorted,
and the ``ceil((1 - alpha)(n + 1))``-th / ``floor(alpha (n + 1))``-th smallest
taken, with alpha as an exact decimal fraction. The coverage tests draw many
seeded synthetic problems and compare the number of covered test points with
a binomial bound (one-sided or two-sided at a 1e-6 tail), so a wrong rank, a
wrong sign or a residual paired with the wrong fold fails them.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy.stats import binom

from retrofit.errors import InvalidInputError
from retrofit.leave_out.intervals import (
    cv_plus_intervals,
    jackknife_plus_intervals,
    lower_rank,
    split_conformal_intervals,
    upper_rank,
)

TAIL = 1e-6


def _kth_smallest_by_definition(values: list[float], rank: int, missing: float) -> float:
    ordered = sorted(values)
    return ordered[rank - 1] if 1 <= rank <= len(ordered) else missing


def _cv_plus_by_definition(residuals, folds, mu_query, alpha):
    n = len(residuals)
    a = Fraction(str(alpha))
    hi = math.ceil((1 - a) * (n + 1))
    lo = math.floor(a * (n + 1))
    lower, upper = [], []
    for q in range(mu_query.shape[1]):
        minus = [float(mu_query[folds[i], q]) - float(residuals[i]) for i in range(n)]
        plus = [float(mu_query[folds[i], q]) + float(residuals[i]) for i in range(n)]
        lower.append(_kth_smallest_by_definition(minus, lo, -math.inf))
        upper.append(_kth_smallest_by_definition(plus, hi, math.inf))
    return np.array(lower), np.array(upper)


@pytest.mark.parametrize("alpha", [0.05, 0.1, 0.2, 0.37])
@pytest.mark.parametrize(("n", "n_folds"), [(7, 7), (29, 29), (30, 5), (103, 10), (12, 3)])
def test_cv_plus_equals_the_definition_on_random_arrays(n, n_folds, alpha):
    rng = np.random.default_rng(n * 100 + n_folds)
    residuals = np.abs(rng.standard_cauchy(n))
    folds = rng.permutation(np.arange(n) % n_folds)
    mu_query = rng.normal(size=(n_folds, 11)) * 3
    got = cv_plus_intervals(residuals, folds, mu_query, alpha=alpha)
    lower, upper = _cv_plus_by_definition(residuals, folds, mu_query, alpha)
    np.testing.assert_array_equal(got.lower_Q, lower)
    np.testing.assert_array_equal(got.upper_Q, upper)
    assert got.method == "cv+" and got.alpha == alpha


def test_jackknife_plus_is_cv_plus_with_every_row_its_own_fold():
    rng = np.random.default_rng(1)
    residuals = np.abs(rng.normal(size=40))
    mu_query = rng.normal(size=(40, 6))
    got = jackknife_plus_intervals(residuals, mu_query, alpha=0.1)
    lower, upper = _cv_plus_by_definition(residuals, np.arange(40), mu_query, 0.1)
    np.testing.assert_array_equal(got.lower_Q, lower)
    np.testing.assert_array_equal(got.upper_Q, upper)
    assert got.method == "jackknife+"


def test_a_query_set_larger_than_one_block_gives_the_same_intervals(monkeypatch):
    from retrofit.leave_out import intervals

    rng = np.random.default_rng(2)
    residuals = np.abs(rng.normal(size=25))
    folds = np.arange(25) % 5
    mu_query = rng.normal(size=(5, 37))
    whole = cv_plus_intervals(residuals, folds, mu_query, alpha=0.1)
    monkeypatch.setattr(intervals, "_BLOCK_CELLS", 25 * 4)  # blocks of 4 queries
    blocked = cv_plus_intervals(residuals, folds, mu_query, alpha=0.1)
    np.testing.assert_array_equal(blocked.lower_Q, whole.lower_Q)
    np.testing.assert_array_equal(blocked.upper_Q, whole.upper_Q)


def test_split_conformal_equals_the_definition():
    rng = np.random.default_rng(3)
    residuals = np.abs(rng.normal(size=31))
    mu_query = rng.normal(size=9)
    got = split_conformal_intervals(residuals, mu_query, alpha=0.1)
    half = sorted(residuals.tolist())[math.ceil(Fraction(9, 10) * 32) - 1]
    np.testing.assert_array_equal(got.lower_Q, mu_query - half)
    np.testing.assert_array_equal(got.upper_Q, mu_query + half)


def test_the_ranks_use_alpha_as_its_decimal_not_its_binary_rounding():
    # In binary floating point (1 - 0.7) * 10 is 3.0000000000000004 (ceil: 4) and
    # 0.35 * 180 is 62.99999999999999 (floor: 62); as decimals they are 3 and 63.
    assert math.ceil((1 - 0.7) * 10) == 4 and math.floor(0.35 * 180) == 62
    assert upper_rank(9, 0.7) == 3
    assert lower_rank(179, 0.35) == 63
    assert upper_rank(19, 0.1) == 18 and lower_rank(19, 0.1) == 2


def test_too_few_rows_for_alpha_give_unbounded_intervals():
    got = jackknife_plus_intervals(np.ones(5), np.zeros((5, 3)), alpha=0.1)
    assert np.isneginf(got.lower_Q).all() and np.isposinf(got.upper_Q).all()
    split = split_conformal_intervals(np.ones(8), np.zeros(2), alpha=0.1)
    assert np.isinf(split.width_Q).all()


@pytest.mark.parametrize("alpha", [0, 1, -0.1, 1.5, float("nan"), True, "0.1"])
def test_an_alpha_outside_zero_one_is_refused(alpha):
    with pytest.raises(InvalidInputError, match="alpha"):
        jackknife_plus_intervals(np.ones(20), np.zeros((20, 2)), alpha=alpha)


def test_mismatched_shapes_and_folds_are_refused_naming_the_argument():
    with pytest.raises(InvalidInputError, match="fold_of_row_N"):
        cv_plus_intervals(np.ones(10), np.arange(9), np.zeros((10, 2)))
    with pytest.raises(InvalidInputError, match=r"outside 0\.\.4"):
        cv_plus_intervals(np.ones(10), np.arange(10), np.zeros((5, 2)))
    with pytest.raises(InvalidInputError, match="absolute residuals"):
        cv_plus_intervals(-np.ones(10), np.arange(10) % 2, np.zeros((2, 2)))
    with pytest.raises(InvalidInputError, match="NaN or inf"):
        split_conformal_intervals(np.ones(10), np.array([np.nan]))


def _count_bounds(draws: int, p_low: float, p_high: float) -> tuple[float, float]:
    """Covered counts outside these are below ``p_low`` / above ``p_high`` at the tail."""
    return binom.ppf(TAIL, draws, p_low), binom.isf(TAIL, draws, p_high)


def test_a_model_that_ignores_its_context_covers_exactly_rank_over_n_plus_1():
    # mu = 0 whatever the context: R_i = |y_i|, and the jackknife+ interval is
    # [-R_(k), R_(k)], which covers a fresh |y| with probability k / (n + 1)
    # exactly (exchangeability, continuous y): 18 / 20 at n = 19, alpha = 0.1.
    n, draws, alpha = 19, 4000, 0.1
    rng = np.random.default_rng(4)
    covered = 0
    for _ in range(draws):
        y = rng.standard_t(3, size=n + 1)
        got = jackknife_plus_intervals(np.abs(y[:n]), np.zeros((n, 1)), alpha=alpha)
        covered += int(got.covers(y[n:])[0])
    exact = upper_rank(n, alpha) / (n + 1)
    low, high = _count_bounds(draws, exact, exact)
    assert exact == 0.9
    assert low <= covered <= high, (covered / draws, exact)


def _least_squares(X, y):
    A = np.c_[X, np.ones(len(X))]
    w, *_ = np.linalg.lstsq(A, y, rcond=None)
    return lambda Z: np.c_[Z, np.ones(len(Z))] @ w


def _linear_problem(rng, n):
    X = rng.normal(size=(n + 1, 3))
    y = X @ np.array([1.0, -2.0, 0.5]) + rng.standard_t(4, size=n + 1)
    return X[:n], y[:n], X[n:], y[n:]


@pytest.mark.parametrize("n_folds", [None, 5])
def test_jackknife_plus_and_cv_plus_keep_their_coverage_guarantee(n_folds):
    # Barber et al., theorems 1 and 4: coverage >= 1 - 2 alpha (jackknife+) and
    # >= 1 - 2 alpha - sqrt(2 / n) (CV+), for any estimator that treats its
    # training rows symmetrically; least squares is stable, so near 1 - alpha.
    n, draws, alpha = 30, 1500, 0.2
    rng = np.random.default_rng(5)
    covered = 0
    for _ in range(draws):
        X, y, X_test, y_test = _linear_problem(rng, n)
        folds = np.arange(n) if n_folds is None else rng.permutation(np.arange(n) % n_folds)
        k = folds.max() + 1
        residuals = np.empty(n)
        mu_query = np.empty((k, 1))
        for fold in range(k):
            out = folds == fold
            model = _least_squares(X[~out], y[~out])
            residuals[out] = np.abs(y[out] - model(X[out]))
            mu_query[fold] = model(X_test)
        got = cv_plus_intervals(residuals, folds, mu_query, alpha=alpha)
        covered += int(got.covers(y_test)[0])
    guarantee = 1 - 2 * alpha - (0 if n_folds is None else math.sqrt(2 / n))
    low, _ = _count_bounds(draws, guarantee, 1.0)
    assert covered >= low, covered / draws
    # A stable estimator: jackknife+ and CV+ cover close to 1 - alpha (checked
    # one-sidedly at 1 - alpha - 0.05, far above the guarantee of 0.6).
    low_stable, _ = _count_bounds(draws, 1 - alpha - 0.05, 1.0)
    assert covered >= low_stable, covered / draws


def test_split_conformal_covers_between_1_minus_alpha_and_that_plus_1_over_m_plus_1():
    n_fit, m, draws, alpha = 20, 19, 3000, 0.1
    rng = np.random.default_rng(6)
    covered = 0
    for _ in range(draws):
        X, y, X_test, y_test = _linear_problem(rng, n_fit + m)
        model = _least_squares(X[:n_fit], y[:n_fit])
        residuals = np.abs(y[n_fit:] - model(X[n_fit:]))
        got = split_conformal_intervals(residuals, model(X_test), alpha=alpha)
        covered += int(got.covers(y_test)[0])
    # Exchangeable calibration and test rows: coverage is exactly 18 / 20 here.
    exact = upper_rank(m, alpha) / (m + 1)
    low, high = _count_bounds(draws, exact, exact)
    assert low <= covered <= high, covered / draws


@pytest.mark.parametrize("alpha", [0.51, 0.8, 0.95])
def test_jackknife_plus_and_cv_plus_refuse_an_alpha_above_one_half(alpha):
    # At alpha 0.95 with 20 residuals the lower rank is 19 and the upper 2: computed, the
    # lower ends pass the upper ones (46 % of rows for CV+ on a real table).
    rng = np.random.default_rng(3)
    residuals, mu = np.abs(rng.normal(size=20)), rng.normal(size=(4, 5))
    for refuse in (
        lambda: cv_plus_intervals(residuals, np.arange(20) % 4, mu, alpha=alpha),
        lambda: jackknife_plus_intervals(residuals, rng.normal(size=(20, 5)), alpha=alpha),
    ):
        with pytest.raises(InvalidInputError, match=r"alpha must be in \(0, 0\.5\]") as err:
            refuse()
        assert "\n" not in str(err.value) and "method='split'" in str(err.value)
    split = split_conformal_intervals(residuals, mu[0], alpha=alpha)  # defined for every alpha
    assert (split.lower_Q <= split.upper_Q).all()


@pytest.mark.parametrize("alpha", [0.05, 0.3, 0.45, 0.5])
@pytest.mark.parametrize("n", [1, 2, 9, 20, 21])
def test_up_to_alpha_one_half_no_lower_end_passes_its_upper_one(n, alpha):
    rng = np.random.default_rng(n)
    residuals, folds = np.abs(rng.standard_cauchy(n)), np.arange(n) % 3
    got = cv_plus_intervals(residuals, folds, rng.normal(size=(3, 50)) * 5, alpha=alpha)
    assert (got.lower_Q <= got.upper_Q).all()
