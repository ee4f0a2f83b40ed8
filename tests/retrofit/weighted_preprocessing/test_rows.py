"""Weight-0 rows dropped, positive weights checked, the 100-row rule counting sum w."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from retrofit.weighted_preprocessing.rows import (
    categorical_inference_threshold,
    drop_zero_weight_rows,
    positive_row_weights,
)


def test_weight_zero_rows_are_dropped_and_types_kept():
    X = pd.DataFrame({"a": [1, 2, 3], "b": ["x", "y", "z"]})
    y = pd.Series([0.1, 0.2, 0.3])
    X2, y2, w2 = drop_zero_weight_rows(X, y, [1.0, 0.0, 2.0])
    assert isinstance(X2, pd.DataFrame) and isinstance(y2, pd.Series)
    assert X2["b"].tolist() == ["x", "z"] and y2.tolist() == [0.1, 0.3]
    assert w2.tolist() == [1.0, 2.0]


def test_no_zero_weight_leaves_the_inputs_as_they_are():
    X, y = np.ones((3, 2)), np.arange(3)
    X2, y2, _ = drop_zero_weight_rows(X, y, np.ones(3))
    assert X2 is X and y2 is y


@pytest.mark.parametrize("bad", [[1.0, 0.0], [1.0, -1.0], [1.0, np.nan], [[1.0]], [np.inf]])
def test_weights_of_a_weighted_fit_must_be_finite_and_positive(bad):
    with pytest.raises(ValueError, match="positive"):
        positive_row_weights(bad)


def test_the_categorical_inference_threshold_decides_on_the_weighted_row_count():
    # tabpfn infers categoricals when the rows exceed the threshold (100).
    for w_N, infers in ((np.full(60, 2.0), True), (np.full(60, 1.5), False), (np.ones(150), True)):
        value = categorical_inference_threshold(w_N, 100)
        assert (len(w_N) > value) is infers, w_N[:1]
    assert categorical_inference_threshold(np.ones(50), 100) == 100  # unweighted: tabpfn's own
