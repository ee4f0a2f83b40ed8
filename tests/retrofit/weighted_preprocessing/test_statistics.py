"""Weighted order statistics against numpy on the rows repeated: bit-identical.

numpy's ``np.quantile(weights=)`` offers only ``"inverted_cdf"``; the
weighted linear percentile and median here must give, for integer weights,
exactly the bits of ``np.nanpercentile`` / ``np.nanmedian`` of the table
whose row ``j`` is repeated ``w_j`` times, on tables with ties and NaN, and
on both of numpy's median paths (masked arrays below 600 rows, partition
above). Means and variances are sums in another order: equal to rounding.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from retrofit.weighted_preprocessing.statistics import (
    weighted_count_per_value,
    weighted_nanmean,
    weighted_nanmedian,
    weighted_nanpercentile,
    weighted_nanvar,
)


def _table(rng: np.random.Generator, n_rows: int, n_cols: int = 4) -> np.ndarray:
    X = rng.standard_t(3, size=(n_rows, n_cols))
    X[:, 1] = np.round(X[:, 1])  # many ties
    X[:, 2] = np.round(X[:, 2], 1)
    X[rng.random((n_rows, n_cols)) < 0.15] = np.nan
    X[:, 3] = np.nan if n_rows % 7 == 0 else X[:, 3]  # an all-NaN column now and then
    return X


def _nan_quiet(function, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return function(*args, **kwargs)


@pytest.mark.parametrize("n_rows", [1, 2, 5, 37, 250, 700])
def test_integer_weights_give_numpys_percentiles_and_medians_of_the_repeated_rows(n_rows):
    rng = np.random.default_rng(n_rows)
    for _ in range(10):
        X = _table(rng, n_rows)
        w_N = rng.integers(1, 5, size=n_rows).astype(np.float64)
        repeated = np.repeat(X, w_N.astype(int), axis=0)
        grid = np.linspace(0, 1, int(rng.integers(1, 60)), endpoint=True) * 100
        for q in ([25.0, 50.0, 75.0], grid, [0.0, 100.0]):
            expected = _nan_quiet(np.nanpercentile, repeated, q, axis=0)
            assert np.array_equal(weighted_nanpercentile(X, w_N, q), expected, equal_nan=True)
        expected = _nan_quiet(np.nanmedian, repeated, axis=0)
        assert np.array_equal(weighted_nanmedian(X, w_N), expected, equal_nan=True)


def test_unit_weights_give_numpys_own_percentiles_and_medians():
    rng = np.random.default_rng(3)
    X = _table(rng, 180)
    ones = np.ones(len(X))
    q = np.linspace(0, 100, 19)
    assert np.array_equal(
        weighted_nanpercentile(X, ones, q), np.nanpercentile(X, q, axis=0), equal_nan=True
    )
    assert np.array_equal(weighted_nanmedian(X, ones), np.nanmedian(X, axis=0), equal_nan=True)


def test_the_median_is_numpys_mean_of_the_middle_pair_not_the_50th_percentile():
    # Where the two differ in the last bit, the median must follow np.median.
    rng = np.random.default_rng(0)
    found = 0
    for _ in range(2000):
        x = rng.normal(size=(4, 1)) * 10.0 ** rng.integers(-3, 4)
        w = np.array([1.0, 1.0, 2.0, 2.0])
        repeated = np.repeat(x, [1, 1, 2, 2], axis=0)
        if np.nanmedian(repeated) != np.nanpercentile(repeated, 50):
            found += 1
            assert weighted_nanmedian(x, w)[0] == np.nanmedian(repeated)
    assert found > 0


def test_a_one_dimensional_input_gives_one_value_per_percentile():
    x = np.array([3.0, np.nan, 1.0, 2.0])
    w = np.array([2.0, 1.0, 1.0, 3.0])
    repeated = np.repeat(x, [2, 1, 1, 3])
    assert np.array_equal(
        weighted_nanpercentile(x, w, [10, 90]), np.nanpercentile(repeated, [10, 90])
    )
    assert weighted_nanmedian(x, w) == np.nanmedian(repeated)


def test_means_and_variances_equal_the_repeated_rows_to_rounding():
    rng = np.random.default_rng(5)
    X = _table(rng, 300)[:, :3]
    w_N = rng.integers(1, 6, size=300).astype(np.float64)
    repeated = np.repeat(X, w_N.astype(int), axis=0)
    scale = np.nanmax(np.abs(X))
    np.testing.assert_allclose(
        weighted_nanmean(X, w_N), np.nanmean(repeated, axis=0), rtol=0, atol=64 * 2e-16 * scale
    )
    for ddof in (0, 1):
        np.testing.assert_allclose(
            weighted_nanvar(X, w_N, ddof=ddof),
            np.nanvar(repeated, axis=0, ddof=ddof),
            rtol=1e-13,
        )


def test_real_weights_scale_freely_only_where_the_formula_is_a_ratio():
    # Frequency semantics: w and c*w are c copies of the same data. Means and
    # variances (ddof 0) are ratios, so they do not move; percentiles read
    # positions of the multiset, whose size changes, so they may.
    rng = np.random.default_rng(6)
    X = rng.normal(size=(50, 2))
    w_N = rng.random(50) + 0.1
    np.testing.assert_allclose(weighted_nanmean(X, 3 * w_N), weighted_nanmean(X, w_N), rtol=1e-13)
    np.testing.assert_allclose(weighted_nanvar(X, 3 * w_N), weighted_nanvar(X, w_N), rtol=1e-12)


@pytest.mark.parametrize("seed", range(200))
def test_a_real_weight_split_over_copies_gives_the_same_percentiles(seed):
    # Weight k*u on one row is k copies of weight u (a class weight on a resample).
    # Running sums of such weights meet integers (1/3 + 2/3) that rounding may put on
    # either side; the position lookup must not jump a row there. Without the snap to
    # the integer, 11 of these 200 cases missed (by up to a neighbouring value).
    rng = np.random.default_rng(seed)
    x_N = rng.permutation(12).astype(np.float64)
    copies_N = rng.integers(1, 4, size=12)
    unit_N = rng.choice([1 / 3, 2 / 3, 0.1, 0.7], size=12)
    rows = np.repeat(np.arange(12), copies_N)
    q = [10.0, 25.0, 50.0, 75.0, 90.0]
    weighted = weighted_nanpercentile(x_N, copies_N * unit_N, q)
    split = weighted_nanpercentile(x_N[rows], unit_N[rows], q)
    np.testing.assert_allclose(weighted, split, rtol=0, atol=1e-13)
    np.testing.assert_allclose(
        weighted_nanmedian(x_N, copies_N * unit_N),
        weighted_nanmedian(x_N[rows], unit_N[rows]),
        rtol=0,
        atol=1e-13,
    )


def test_counts_per_value_count_nan_as_one_value_like_numpys_unique():
    x = np.array([1.0, np.nan, 2.0, 1.0, np.nan])
    values, weights = weighted_count_per_value(x, np.array([1.0, 2.0, 3.0, 0.5, 1.0]))
    assert np.array_equal(values, [1.0, 2.0, np.nan], equal_nan=True)
    assert weights.tolist() == [1.5, 3.0, 3.0]
