"""A classifier's ``class_weight`` as row weights: scikit-learn's rules, frequencies kept."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.utils.class_weight import compute_sample_weight

from retrofit.errors import InvalidSampleWeightError
from retrofit.weighted_fit.class_weights import class_row_weights


@pytest.mark.parametrize("seed", range(5))
def test_balanced_without_sample_weight_is_compute_sample_weight_exactly(seed):
    rng = np.random.default_rng(seed)
    y = rng.choice(np.array(["a", "b", "c", "d"], dtype=object), size=37, p=[0.5, 0.3, 0.15, 0.05])
    np.testing.assert_array_equal(
        class_row_weights("balanced", y, None), compute_sample_weight("balanced", y)
    )


def test_balanced_with_integer_weights_is_balanced_on_the_rows_repeated():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 3, size=30)
    w_N = rng.integers(1, 4, size=30).astype(np.float64)
    weighted = class_row_weights("balanced", y, w_N)
    repeated = compute_sample_weight("balanced", np.repeat(y, w_N.astype(int)))
    # Row j's w_j copies each weigh its class's balanced weight: together w_j times it.
    np.testing.assert_allclose(weighted, w_N * repeated[np.cumsum(w_N.astype(int)) - 1], rtol=1e-15)


def test_rows_of_weight_zero_leave_their_class_out():
    y = np.array([0, 0, 1, 2, 2, 2])
    w_N = np.array([1.0, 1.0, 0.0, 1.0, 1.0, 1.0])
    weights = class_row_weights("balanced", y, w_N)
    np.testing.assert_allclose(weights, [1.25, 1.25, 0.0, 5 / 6, 5 / 6, 5 / 6])
    # A dict may name a class whose rows all weigh 0 (it is a class of y).
    np.testing.assert_array_equal(class_row_weights({1: 3.0}, y, w_N), w_N)


def test_a_dict_weighs_the_named_classes_and_the_others_one():
    y = np.array(["x", "y", "x", "z"], dtype=object)
    np.testing.assert_array_equal(class_row_weights({"x": 2.0}, y, None), [2.0, 1.0, 2.0, 1.0])
    assert class_row_weights(None, y, None) is None


@pytest.mark.parametrize(
    ("class_weight", "match"),
    [
        ("uniform", "class_weight must be"),
        ({"w": 1.0}, "no class of y"),
        ({"x": -1.0}, "negative"),
        ({"x": 0.0, "y": 0.0, "z": 0.0}, "every weight is zero"),
    ],
)
def test_malformed_class_weights_are_refused(class_weight, match):
    y = np.array(["x", "y", "x", "z"], dtype=object)
    with pytest.raises(InvalidSampleWeightError, match=match):
        class_row_weights(class_weight, y, None)
