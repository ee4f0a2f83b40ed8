"""The regressor's target moments and the classifier's class counts, weighted."""

from __future__ import annotations

import numpy as np

from retrofit.weighted_preprocessing.targets import (
    weighted_class_counts,
    weighted_target_standardisation,
)


def test_target_moments_of_integer_weights_are_the_repeated_rows_to_rounding():
    rng = np.random.default_rng(0)
    y = rng.normal(size=200) * 5 + 3
    w = rng.integers(1, 6, size=200).astype(np.float64)
    repeated = np.repeat(y, w.astype(int))
    mean, std = weighted_target_standardisation(y, w)
    np.testing.assert_allclose([mean, std], [np.mean(repeated), np.std(repeated)], rtol=1e-14)


def test_class_counts_of_integer_weights_are_the_repeated_rows_counts_exactly():
    rng = np.random.default_rng(1)
    y = rng.integers(0, 4, size=100)
    w = rng.integers(1, 6, size=100).astype(np.float64)
    _, expected = np.unique(np.repeat(y, w.astype(int)), return_counts=True)
    assert np.array_equal(weighted_class_counts(y, w, 4), expected)
    # A class whose rows all dropped out still has its count: 0.
    assert weighted_class_counts(np.array([0, 0, 2]), np.ones(3), 3).tolist() == [2.0, 0.0, 1.0]
