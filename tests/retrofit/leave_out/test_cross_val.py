"""``retrofit.cross_val_predict``: out-of-fold predictions with the folds as one ragged batch.

The claims, each a test here (tiny random hosts, zero-inits perturbed: the v3
checkpoint ``tiny_v3_path`` and a v2.6 regressor, v2 and v3 classifiers):

* the oracle of ``preprocessing="per_fold"``: scikit-learn's
  ``cross_val_predict`` with ``k`` refits of the
  same estimator (``random_state=0``) on the same folds, for both estimators,
  both patched modes, float32 and float64, under ``KFold`` and
  ``LeaveOneOut``: regression within ``MODEL_ULPS`` of ``exactness.py`` (the
  ulps of the inference dtype at the predictions' scale), probabilities within
  ``CLASSIFIER_PROBA_ULPS``, labels equal (README's room runs a cross-section
  of each host x mode x dtype matrix, the slow tier the rest:
  ``tests/helpers/tiers.py``);
* the folds run as one batch in either preprocessing: the padded engine is
  called once, with one dataset per fold;
* scikit-learn's return conventions: row order, probabilities over every class
  of ``y`` with 0 for a class a fold's train rows lack, text labels;
* bad input refused in one line before anything is loaded: an estimator that
  is not the retrofit's, ``mode="none"``, an unknown method or preprocessing
  mode, a regressor output type asked of a classifier, folds that are no
  partition.
"""

from __future__ import annotations

from itertools import product

import numpy as np
import pytest
import torch
from sklearn.base import clone
from sklearn.linear_model import Ridge
from sklearn.model_selection import KFold, LeaveOneOut, ShuffleSplit
from sklearn.model_selection import cross_val_predict as sklearn_cross_val_predict

import retrofit
import retrofit.batching.engine
from retrofit.errors import InputWarning, InvalidInputError
from retrofit.leave_out.cross_val import cross_val_predict
from tests.helpers.exactness import CLASSIFIER_PROBA_ULPS, assert_within_ulps
from tests.helpers.leave_out import (
    CLASSIFIER_HOSTS,
    DTYPES,
    MODES,
    REGRESSION_HOSTS,
    assert_probabilities_close,
    assert_regression_close,
)
from tests.helpers.leave_out import fold_classifier as _classifier
from tests.helpers.leave_out import fold_regressor as _regressor
from tests.helpers.leave_out import leave_out_table as _table
from tests.helpers.tiers import cross_section

# Each fold fitted on its own rows: the mode that equals scikit-learn's k refits.
PER_FOLD = "per_fold"


@pytest.mark.parametrize(
    ("regression_host", "mode", "dtype"),
    cross_section(
        product(REGRESSION_HOSTS, MODES, DTYPES),
        fast=[("v3", "full-o", torch.float32), ("tabpfn_v2_6", "oattention", torch.float64)],
    ),
    indirect=["regression_host"],
)
def test_a_regressors_out_of_fold_predictions_equal_sklearns_k_refits(regression_host, mode, dtype):
    X, y, _ = _table()
    estimator = _regressor(regression_host, mode, dtype)
    for rows, cv in ((slice(None), 4), (slice(12), LeaveOneOut())):
        got = cross_val_predict(estimator, X[rows], y[rows], cv=cv, preprocessing=PER_FOLD)
        want = sklearn_cross_val_predict(estimator, X[rows], y[rows], cv=cv)
        assert_regression_close(got, want, dtype)
    assert not hasattr(estimator, "n_features_in_")  # left unfitted, as sklearn clones it


@pytest.mark.parametrize(
    ("name", "mode", "dtype"),
    cross_section(
        product(CLASSIFIER_HOSTS, MODES, DTYPES),
        fast=[("tabpfn_v3", "oattention", torch.float64), ("tabpfn_v2", "full-o", torch.float32)],
    ),
)
def test_a_classifiers_out_of_fold_labels_and_probabilities_equal_sklearns_k_refits(
    name, mode, dtype
):
    X, _, labels = _table()
    estimator = _classifier(name, mode, dtype)
    for cv in (4, KFold(3)):
        got = cross_val_predict(
            estimator, X, labels, cv=cv, method="predict_proba", preprocessing=PER_FOLD
        )
        want = sklearn_cross_val_predict(estimator, X, labels, cv=cv, method="predict_proba")
        assert got.shape == (len(X), 3)
        assert_probabilities_close(got, want, dtype)
    loo = LeaveOneOut()
    got = cross_val_predict(estimator, X[:12], labels[:12], cv=loo, preprocessing=PER_FOLD)
    np.testing.assert_array_equal(
        got, sklearn_cross_val_predict(estimator, X[:12], labels[:12], cv=loo)
    )


@pytest.mark.parametrize("method", ["median", "mode"])
def test_a_regressor_output_type_is_each_folds_predict_with_that_output_type(tiny_v3_path, method):
    X, y, _ = _table()
    estimator = _regressor(tiny_v3_path, dtype=torch.float64)
    folds = list(KFold(4).split(X))
    got = cross_val_predict(estimator, X, y, cv=KFold(4), method=method, preprocessing=PER_FOLD)
    want = np.empty(len(X))
    for train, test in folds:
        want[test] = clone(estimator).fit(X[train], y[train]).predict(X[test], output_type=method)
    assert_regression_close(got, want, torch.float64)
    mean = cross_val_predict(estimator, X, y, cv=KFold(4), preprocessing=PER_FOLD)
    assert not np.array_equal(got, mean)  # the output type reaches the decoding


@pytest.mark.parametrize("preprocessing", ["transductive", PER_FOLD])
def test_the_folds_are_one_batch_of_the_padded_engine(tiny_v3_path, monkeypatch, preprocessing):
    X, y, _ = _table()
    calls = []
    engine = retrofit.batching.engine.run_padded

    def spy(estimator, X_train_list, *args, **kwargs):
        calls.append([len(X) for X in X_train_list])
        return engine(estimator, X_train_list, *args, **kwargs)

    monkeypatch.setattr("retrofit.batching.regression.run_padded", spy)
    retrofit.cross_val_predict(_regressor(tiny_v3_path), X, y, cv=4, preprocessing=preprocessing)
    assert calls == [[18, 18, 18, 18]]


def test_probabilities_have_every_class_of_y_as_columns_zero_where_a_fold_lacks_one(tiny_v3_path):
    X, _, labels = _table()
    labels = labels.copy()
    labels[:2] = 3  # a fourth class only in fold 0's held-out rows: fold 0 never sees it
    estimator = _classifier()
    with pytest.warns(InputWarning, match="fold 0's train rows hold no row of class 3"):
        got = cross_val_predict(
            estimator, X, labels, cv=KFold(4), method="predict_proba", preprocessing=PER_FOLD
        )
    with pytest.warns(RuntimeWarning, match="Number of classes in training fold"):  # sklearn's
        want = sklearn_cross_val_predict(estimator, X, labels, cv=KFold(4), method="predict_proba")
    assert got.shape == (len(X), 4)
    assert (got[:6, 3] == 0).all() and (got[6:, 3] > 0).all()
    assert_within_ulps(
        torch.from_numpy(got), torch.from_numpy(want), ulps=CLASSIFIER_PROBA_ULPS[torch.float32]
    )


def test_text_labels_and_a_shuffled_splitter_come_back_in_row_order():
    X, _, labels = _table()
    text = np.array(["low", "mid", "high"], dtype=object)[labels]
    estimator = _classifier("tabpfn_v2")
    cv = KFold(4, shuffle=True, random_state=1)
    got = cross_val_predict(estimator, X, text, cv=cv, preprocessing=PER_FOLD)
    np.testing.assert_array_equal(got, sklearn_cross_val_predict(estimator, X, text, cv=cv))
    assert set(got) <= {"low", "mid", "high"}


@pytest.mark.parametrize(
    ("make", "kwargs", "match"),
    [
        (
            lambda p: Ridge(),
            {},
            r"needs a retrofit\.OTabPFNRegressor or OTabPFNClassifier, got Ridge",
        ),
        (lambda p: _regressor(p, mode="none"), {}, r"mode='none'.*use mode='full-o'"),
        (lambda p: _regressor(p), {"method": "predict_proba"}, r"unknown method 'predict_proba'"),
        (lambda p: _regressor(p), {"method": "quantiles"}, r"unknown method 'quantiles'"),
        (lambda p: _classifier(), {"method": "median"}, r"'median' is a regressor output type"),
        (lambda p: _classifier(), {"method": "decision_function"}, "unknown method"),
        (lambda p: _regressor(p), {"preprocessing": "refit"}, "unknown preprocessing"),
        (
            lambda p: _regressor(p),
            {"cv": ShuffleSplit(3, test_size=0.2, random_state=0)},
            "every row exactly once",
        ),
    ],
)
def test_bad_input_is_refused_in_one_line_before_anything_is_fitted(
    tiny_v3_path, make, kwargs, match
):
    X, y, _ = _table()
    estimator = make(tiny_v3_path)
    with pytest.raises(InvalidInputError, match=match) as err:
        cross_val_predict(estimator, X, y, **kwargs)
    assert "\n" not in str(err.value)
    assert not hasattr(estimator, "n_features_in_")
