"""``retrofit.cross_val_predict``: out-of-fold predictions with the folds as one ragged batch.

The claims, each a test here (tiny random hosts, zero-inits perturbed: the v3
checkpoint ``tiny_v3_path`` and a v2.6 regressor, v2 and v3 classifiers):

* the oracle: scikit-learn's ``cross_val_predict`` with ``k`` refits of the
  same estimator (``random_state=0``) on the same folds, for both estimators,
  both patched modes, float32 and float64, under ``KFold`` and
  ``LeaveOneOut``: regression within ``MODEL_ULPS`` of ``exactness.py`` (the
  ulps of the inference dtype at the predictions' scale), probabilities within
  ``CLASSIFIER_PROBA_ULPS``, labels equal;
* the folds run as one batch: the padded engine is called once, with one
  dataset per fold;
* leakage: changing one held-out label leaves every prediction of its fold
  bit-identical (the same operations on the same shapes), and changing a
  train label of that fold moves them (the control that the test can fail);
* scikit-learn's return conventions: row order, probabilities over every class
  of ``y`` with 0 for a class a fold's train rows lack, text labels;
* bad input refused in one line before anything is loaded: an estimator that
  is not the retrofit's, ``mode="none"``, an unknown method or preprocessing
  mode, a regressor output type asked of a classifier, folds that are no
  partition.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.base import clone
from sklearn.linear_model import Ridge
from sklearn.model_selection import KFold, LeaveOneOut, ShuffleSplit
from sklearn.model_selection import cross_val_predict as sklearn_cross_val_predict

import retrofit
import retrofit.batching.engine
from retrofit import OTabPFNClassifier, OTabPFNRegressor
from retrofit.errors import InvalidInputError
from retrofit.leave_out.cross_val import cross_val_predict
from tests.helpers.exactness import CLASSIFIER_PROBA_ULPS, MODEL_ULPS, assert_within_ulps
from tests.helpers.tiny_hosts import tiny_classifier_specs, tiny_host_specs

MODES = ("oattention", "full-o")
DTYPES = (torch.float32, torch.float64)
CLASSIFIER_HOSTS = ("tabpfn_v2", "tabpfn_v3")


def _regressor(host, mode="full-o", dtype=torch.float32, **kwargs) -> OTabPFNRegressor:
    """A regressor over ``host``: the tiny v3 checkpoint's path, or a tiny host's name."""
    model_path = str(host) if not isinstance(host, str) else tiny_host_specs(host)
    base = {"device": "cpu", "n_estimators": 2, "random_state": 0}
    return OTabPFNRegressor(
        mode=mode, model_path=model_path, inference_precision=dtype, **{**base, **kwargs}
    )


def _classifier(name="tabpfn_v3", mode="full-o", dtype=torch.float32) -> OTabPFNClassifier:
    return OTabPFNClassifier(
        mode=mode,
        model_path=tiny_classifier_specs(name, n_estimators=2),
        device="cpu",
        n_estimators=2,
        inference_precision=dtype,
        random_state=0,
    )


def _table(n: int = 24, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Features ``(n, 3)``, a regression target and three classes (every class in every fold)."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    y = X @ np.array([1.0, -1.0, 0.5]) + 0.3 * rng.normal(size=n)
    labels = np.digitize(y, np.quantile(y, [1 / 3, 2 / 3]))
    return X, y, labels


def _assert_regression_close(got: np.ndarray, want: np.ndarray, dtype: torch.dtype) -> None:
    assert got.shape == want.shape and got.dtype == want.dtype
    assert_within_ulps(
        torch.from_numpy(got), torch.from_numpy(want), ulps=MODEL_ULPS[dtype], dtype=dtype
    )


@pytest.fixture(params=["v3", "tabpfn_v2_6"])
def regression_host(request, tiny_v3_path):
    return tiny_v3_path if request.param == "v3" else request.param


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode", MODES)
def test_a_regressors_out_of_fold_predictions_equal_sklearns_k_refits(regression_host, mode, dtype):
    X, y, _ = _table()
    estimator = _regressor(regression_host, mode, dtype)
    for rows, cv in ((slice(None), 4), (slice(12), LeaveOneOut())):
        got = cross_val_predict(estimator, X[rows], y[rows], cv=cv)
        want = sklearn_cross_val_predict(estimator, X[rows], y[rows], cv=cv)
        _assert_regression_close(got, want, dtype)
    assert not hasattr(estimator, "n_features_in_")  # left unfitted, as sklearn clones it


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", CLASSIFIER_HOSTS)
def test_a_classifiers_out_of_fold_labels_and_probabilities_equal_sklearns_k_refits(
    name, mode, dtype
):
    X, _, labels = _table()
    estimator = _classifier(name, mode, dtype)
    for cv in (4, KFold(3)):
        got = cross_val_predict(estimator, X, labels, cv=cv, method="predict_proba")
        want = sklearn_cross_val_predict(estimator, X, labels, cv=cv, method="predict_proba")
        assert got.shape == want.shape == (len(X), 3) and got.dtype == want.dtype
        assert_within_ulps(
            torch.from_numpy(got),
            torch.from_numpy(want),
            ulps=CLASSIFIER_PROBA_ULPS[dtype],
            dtype=torch.float32,  # tabpfn's probabilities are float32 in every precision
        )
    loo = LeaveOneOut()
    got = cross_val_predict(estimator, X[:12], labels[:12], cv=loo)
    np.testing.assert_array_equal(
        got, sklearn_cross_val_predict(estimator, X[:12], labels[:12], cv=loo)
    )


@pytest.mark.parametrize("method", ["median", "mode"])
def test_a_regressor_output_type_is_each_folds_predict_with_that_output_type(tiny_v3_path, method):
    X, y, _ = _table()
    estimator = _regressor(tiny_v3_path, dtype=torch.float64)
    folds = list(KFold(4).split(X))
    got = cross_val_predict(estimator, X, y, cv=KFold(4), method=method)
    want = np.empty(len(X))
    for train, test in folds:
        want[test] = clone(estimator).fit(X[train], y[train]).predict(X[test], output_type=method)
    _assert_regression_close(got, want, torch.float64)
    mean = cross_val_predict(estimator, X, y, cv=KFold(4))
    assert not np.array_equal(got, mean)  # the output type reaches the decoding


def test_the_folds_are_one_batch_of_the_padded_engine(tiny_v3_path, monkeypatch):
    X, y, _ = _table()
    calls = []
    engine = retrofit.batching.engine.run_padded

    def spy(estimator, X_train_list, *args, **kwargs):
        calls.append([len(X) for X in X_train_list])
        return engine(estimator, X_train_list, *args, **kwargs)

    monkeypatch.setattr("retrofit.batching.regression.run_padded", spy)
    retrofit.cross_val_predict(_regressor(tiny_v3_path), X, y, cv=4)
    assert calls == [[18, 18, 18, 18]]


def _fold_zero(X):
    train, test = next(KFold(4).split(X))
    return train, test


@pytest.mark.parametrize("task", ["regression", "classification"])
def test_a_held_out_label_touches_nothing_that_predicts_it(tiny_v3_path, task):
    X, y, labels = _table()
    train, test = _fold_zero(X)
    if task == "regression":
        estimator, target = _regressor(tiny_v3_path), y
        method = "predict"

        def changed(values, row):
            values = values.copy()
            values[row] += 3.0
            return values
    else:
        estimator, target = _classifier(), labels
        method = "predict_proba"

        def changed(values, row):
            values = values.copy()
            values[row] = (values[row] + 1) % 3
            return values

    before = cross_val_predict(estimator, X, target, cv=KFold(4), method=method)
    held_out = cross_val_predict(estimator, X, changed(target, test[0]), cv=KFold(4), method=method)
    assert np.array_equal(held_out[test], before[test])  # bit-identical: its own fold
    assert not np.array_equal(held_out[train], before[train])  # the other folds see it
    trained = cross_val_predict(estimator, X, changed(target, train[0]), cv=KFold(4), method=method)
    assert not np.array_equal(trained[test], before[test])  # the control: a train label moves them


def test_probabilities_have_every_class_of_y_as_columns_zero_where_a_fold_lacks_one(tiny_v3_path):
    X, _, labels = _table()
    labels = labels.copy()
    labels[:2] = 3  # a fourth class only in fold 0's held-out rows: fold 0 never sees it
    estimator = _classifier()
    got = cross_val_predict(estimator, X, labels, cv=KFold(4), method="predict_proba")
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
    got = cross_val_predict(estimator, X, text, cv=cv)
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
        (lambda p: _regressor(p), {"preprocessing": "transductive"}, "unknown preprocessing"),
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
