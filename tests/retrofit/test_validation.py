"""The input checks (retrofit/validation.py): numeric targets, sample weights, leave-out data."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from retrofit.errors import (
    InvalidInputError,
    InvalidSampleWeightError,
)
from retrofit.validation import check_numeric_target, check_sample_weight
from tests.helpers.estimators import small_regressor
from tests.helpers.tiny_models import tiny_v3_checkpoint

X = np.arange(12.0).reshape(6, 2)


@pytest.mark.parametrize(
    "y",
    [
        ["a", "b", "c", "d", "e", "f"],
        pd.Series(["x", "y", "x", "y", "x", "y"], dtype="string"),
        np.array([1.0, 2.0, "three", 4.0, 5.0, 6.0], dtype=object),
        [b"a", b"b", b"c", b"d", b"e", b"f"],
        pd.Series(pd.date_range("2020-01-01", periods=6)),
    ],
    ids=["list", "pandas-string", "object-mixed", "bytes", "dates"],
)
def test_a_string_target_is_refused_as_not_numeric(tmp_path, y):
    """A string target in the API says "y must be numeric"."""
    with pytest.raises(InvalidInputError, match="y must be numeric"):
        small_regressor(tiny_v3_checkpoint(tmp_path)).fit(X, y)
    assert issubclass(InvalidInputError, ValueError)


@pytest.mark.parametrize(
    "y",
    [
        np.arange(6.0),
        list(range(6)),
        pd.Series(np.arange(6.0)),
        np.arange(6.0).astype(object),
        # Numbers as text are numbers, as tabpfn takes them.
        pd.Series(["0", "1", "2", "3", "4", "5.0"]),
        np.array(["0", "1", "2", "3", "4", "5.0"]),
    ],
    ids=["float", "int-list", "series", "object-floats", "text-series", "text-array"],
)
def test_numeric_targets_pass_the_target_check(y):
    assert np.array_equal(np.asarray(check_numeric_target(y), dtype=np.float64), np.arange(6.0))


@pytest.mark.parametrize(
    "weights",
    [np.array([1, 0, 2, 3]), [1, 0, 2, 3], pd.Series([1.0, 0.0, 2.0, 3.0], index=[9, 8, 7, 6])],
    ids=["int-array", "list", "series"],
)
def test_sample_weights_come_back_as_a_new_float64_array(weights):
    checked = check_sample_weight(weights, 4)
    assert checked.dtype == np.float64 and checked.shape == (4,)
    np.testing.assert_array_equal(checked, [1.0, 0.0, 2.0, 3.0])
    checked[0] = 7.0  # a copy: the caller's weights are left as they were
    assert np.asarray(weights)[0] == 1


def test_a_number_is_every_rows_weight_and_none_stays_none():
    np.testing.assert_array_equal(check_sample_weight(2, 3), [2.0, 2.0, 2.0])
    assert check_sample_weight(None, 3) is None


def test_sparse_weights_are_refused():
    sparse = pytest.importorskip("scipy.sparse")
    with pytest.raises(InvalidSampleWeightError, match="dense"):
        check_sample_weight(sparse.csr_matrix(np.ones((1, 3))), 3)
    assert issubclass(InvalidSampleWeightError, InvalidInputError)


def test_leave_out_data_passes_frames_and_lists_and_refuses_ragged_rows():
    from retrofit.validation import check_leave_out_data

    frame = pd.DataFrame(X, columns=["a", "b"])
    y_text = np.array(["0", "1", "2", "3", "4", "5.5"])  # numbers as text: numbers
    got = check_leave_out_data(frame, y_text, task="regression", caller="c")
    np.testing.assert_array_equal(got, [0, 1, 2, 3, 4, 5.5])
    column = check_leave_out_data(
        X.tolist(), np.arange(6.0)[:, None], task="regression", caller="c"
    )
    assert np.shape(column) == (6,)  # (N, 1) read as (N,), as scikit-learn does
    labels = ["a", "b", "a", "b", "a", "b"]
    assert check_leave_out_data(X, labels, task="classification", caller="c") is labels
    with pytest.raises(InvalidInputError, match="c: X has rows of different lengths"):
        check_leave_out_data([[1.0, 2.0], [3.0]], [1.0, 2.0], task="regression", caller="c")
