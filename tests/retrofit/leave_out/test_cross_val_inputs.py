"""``retrofit.cross_val_predict``'s boundary: what it refuses, warns about and takes besides.

Tiny random hosts with perturbed zero-inits (``tests/helpers/leave_out.py``):

* data that cannot be folded is refused in one line before anything is fitted,
  as a :class:`~retrofit.RetrofitError` that is a ``ValueError``
  (:func:`retrofit.validation.check_leave_out_data` and the splitter checks):
  a text target for a regressor, a NaN target or a missing class label, ``X``
  that is not 2-D, a group splitter without groups, more folds than rows, one
  fold;
* a custom splitter whose folds train on rows they hold out is refused naming
  the fold (README promises every row predicted from a context without it);
* a ``Pipeline`` is refused naming what works instead;
* a fold whose train rows lack a class warns, naming the fold and the class;
* ``method="predict_log_proba"`` is the log of ``"predict_proba"`` and equals
  scikit-learn's ``cross_val_predict`` with ``k`` refits, a missing class's
  column the dtype's most negative number, as scikit-learn gives it.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from sklearn.model_selection import GroupKFold, KFold, PredefinedSplit
from sklearn.model_selection import cross_val_predict as sklearn_cross_val_predict
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from retrofit.errors import InputWarning, InvalidInputError, RetrofitError
from retrofit.leave_out.cross_val import cross_val_predict
from tests.helpers.exactness import CLASSIFIER_PROBA_ULPS, assert_within_ulps
from tests.helpers.leave_out import fold_classifier, fold_regressor, leave_out_table


class _LeakyFolds:
    """KFold's held-out rows, each fold trained on every row (its own held-out rows too)."""

    def split(self, X, y=None, groups=None):
        for _, test in KFold(4).split(X):
            yield np.arange(len(X)), test

    def get_n_splits(self, X=None, y=None, groups=None):
        return 4


def _nan_at(values, row):
    values = values.astype(np.float64)
    values[row] = np.nan
    return values


def _none_at(values, row):
    values = values.astype(object)
    values[row] = None
    return values


@pytest.mark.parametrize(
    ("make", "change", "match"),
    [
        ("regressor", lambda X, y, c: {"y": np.array(["a", "b"] * 12)}, "y must be numeric"),
        ("regressor", lambda X, y, c: {"y": _nan_at(y, 5)}, "y holds NaN or inf in row 5"),
        ("classifier", lambda X, y, c: {"y": _nan_at(c, 5)}, "y has no label in row 5"),
        ("classifier", lambda X, y, c: {"y": _none_at(c, 2)}, "y has no label in row 2"),
        ("regressor", lambda X, y, c: {"X": X[:, 0]}, r"X must be 2-D .* shape \(24,\)"),
        ("regressor", lambda X, y, c: {"y": y[:20]}, "X has 24 rows and y 20 values"),
        ("regressor", lambda X, y, c: {"y": np.c_[y, y]}, r"y must be 1-D .*\(24, 2\)"),
        ("regressor", lambda X, y, c: {"cv": GroupKFold(3)}, "GroupKFold splits by group"),
        ("regressor", lambda X, y, c: {"cv": 30}, "KFold cannot split these 24 rows"),
        ("regressor", lambda X, y, c: {"cv": 1}, "cv=1 gives no folds"),
        ("regressor", lambda X, y, c: {"groups": [1, 2]}, r"groups has shape \(2,\)"),
        ("regressor", lambda X, y, c: {"cv": _LeakyFolds()}, "fold 0 of _LeakyFolds trains on 6"),
    ],
    ids=[
        "text-target",
        "nan-target",
        "nan-label",
        "none-label",
        "one-dimensional-x",
        "y-length",
        "two-column-y",
        "group-splitter-without-groups",
        "more-folds-than-rows",
        "one-fold",
        "groups-length",
        "leaky-folds",
    ],
)
def test_data_the_folds_cannot_use_is_refused_in_one_line_before_anything_is_fitted(
    tiny_v3_path, make, change, match
):
    X, y, labels = leave_out_table()
    estimator = fold_regressor(tiny_v3_path) if make == "regressor" else fold_classifier()
    kwargs = {"X": X, "y": y if make == "regressor" else labels, **change(X, y, labels)}
    with pytest.raises(RetrofitError, match=match) as err:
        cross_val_predict(estimator, **kwargs)
    assert isinstance(err.value, ValueError) and "\n" not in str(err.value)
    assert not hasattr(estimator, "n_features_in_")


def test_a_leaky_splitter_is_refused_though_its_held_out_rows_partition_the_rows(tiny_v3_path):
    # The held-out rows are KFold's, a partition: only the train rows leak (RMSE 0.233 against
    # 0.669 honest on the tester's table, every row predicted from a context holding it).
    X, y, _ = leave_out_table()
    held_out = np.sort(np.concatenate([test for _, test in _LeakyFolds().split(X)]))
    assert held_out.tolist() == list(range(len(X)))
    with pytest.raises(InvalidInputError, match="every row must be predicted from a context"):
        cross_val_predict(fold_regressor(tiny_v3_path), X, y, cv=_LeakyFolds())


def test_a_group_splitter_with_groups_gives_its_folds(tiny_v3_path):
    X, y, _ = leave_out_table()
    groups = np.arange(len(X)) // 4
    splitter = GroupKFold(3)
    fold_of_row = np.empty(len(X), dtype=int)
    for k, (_, test) in enumerate(splitter.split(X, y, groups)):
        fold_of_row[test] = k
    estimator = fold_regressor(tiny_v3_path)
    got = cross_val_predict(estimator, X, y, cv=splitter, groups=groups)
    np.testing.assert_array_equal(
        got, cross_val_predict(estimator, X, y, cv=PredefinedSplit(fold_of_row))
    )


def test_a_pipeline_is_refused_naming_what_works_instead(tiny_v3_path):
    X, y, _ = leave_out_table()
    pipeline = make_pipeline(StandardScaler(), fold_regressor(tiny_v3_path))
    with pytest.raises(InvalidInputError, match="not a Pipeline") as err:
        cross_val_predict(pipeline, X, y)
    message = str(err.value)
    assert "cross_val_predict(pipeline, ...)" in message and "pass its last step" in message
    assert "wrap the host" not in message


def test_a_fold_whose_train_rows_lack_a_class_warns_naming_the_fold_and_the_class():
    X, _, labels = leave_out_table()
    labels = labels.copy()
    labels[:2] = 3  # a fourth class only in fold 0's held-out rows
    with pytest.warns(InputWarning, match=r"fold 0's train rows hold no row of class 3") as got:
        cross_val_predict(fold_classifier(), X, labels, cv=KFold(4), preprocessing="per_fold")
    assert len(got) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error", InputWarning)  # every class in every fold: no warning
        cross_val_predict(fold_classifier(), X, leave_out_table()[2], cv=KFold(4))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_log_probabilities_are_the_logs_and_equal_sklearns_k_refits(dtype):
    X, _, labels = leave_out_table()
    labels = labels.copy()
    labels[:2] = 3  # fold 0 lacks class 3: its column is the dtype's most negative number
    estimator = fold_classifier(dtype=dtype)
    kwargs = {"cv": KFold(4), "preprocessing": "per_fold"}
    with pytest.warns(InputWarning):
        got = cross_val_predict(estimator, X, labels, method="predict_log_proba", **kwargs)
        proba = cross_val_predict(estimator, X, labels, method="predict_proba", **kwargs)
    with pytest.warns(RuntimeWarning, match="Number of classes in training fold"):
        want = sklearn_cross_val_predict(
            estimator, X, labels, cv=KFold(4), method="predict_log_proba"
        )
    assert got.shape == want.shape == (len(X), 4) and got.dtype == want.dtype
    assert (got[:6, 3] == np.finfo(got.dtype).min).all() and (want[:6, 3] == got[:6, 3]).all()
    np.testing.assert_array_equal(got[:, :3], np.log(proba[:, :3]))
    assert_within_ulps(
        torch.from_numpy(np.exp(got)),
        torch.from_numpy(np.exp(want)),
        ulps=CLASSIFIER_PROBA_ULPS[dtype],
        dtype=torch.float32,  # tabpfn's probabilities are float32 in every precision
    )
