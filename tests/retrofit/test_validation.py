"""The estimators' input checks (retrofit/validation.py): a target must be numeric, and says so."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from retrofit.errors import (
    InvalidInputError,
)
from retrofit.validation import check_numeric_target
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
