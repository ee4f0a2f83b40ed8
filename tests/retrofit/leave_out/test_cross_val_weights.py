"""``cross_val_predict(params={"sample_weight": w})`` and weighted prediction intervals.

The embedded hosts (Full-O, float64, 2 members), 40 rows, integer weights
0..3 (weight 0 on some rows):

* ``preprocessing="per_fold"`` is scikit-learn's ``cross_val_predict`` with
  the same ``params`` (``k`` weighted refits, each fold's weights its train
  rows'), within ``MODEL_ULPS[float64]`` ulps for the regressor and
  ``CLASSIFIER_PROBA_ULPS[float64]`` float32 ulps for the classifier's
  probabilities (with ``class_weight="balanced"``); measured 0;
* ``"transductive"`` with weights 1..3 is the transductive fold engine on the
  rows really repeated (each row's copies in its fold, the X side fitted on the
  repeated table), the same query rows, within the same bound (the host's
  float64 predictions move by about 4e-8 with the number of test rows, also
  unpatched, so the comparison keeps the queries: the fold engine itself,
  ``fold_predictions``);
* ``prediction_intervals``: CV+ and split conformal with weights are the
  intervals of the weighted refits (residuals counted once each);
* what is refused.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.model_selection import KFold, StratifiedKFold
from sklearn.model_selection import cross_val_predict as sklearn_cross_val_predict

import retrofit
from retrofit import InvalidInputError, InvalidSampleWeightError
from retrofit.leave_out.cross_val import fold_predictions
from retrofit.leave_out.intervals import cv_plus_intervals, split_conformal_intervals
from tests.helpers.exactness import CLASSIFIER_PROBA_ULPS, MODEL_ULPS, deviation_in_ulps

FOLDS = KFold(4, shuffle=True, random_state=0)


def _estimator(cls=retrofit.OTabPFNRegressor, **kwargs):
    params = {
        "model_path": "embedded",
        "device": "cpu",
        "inference_precision": torch.float64,
        "n_estimators": 2,
    }
    return cls(**{**params, **kwargs})


def _data(low: int = 0):
    rng = np.random.default_rng(1)
    X = rng.normal(size=(40, 3))
    y = X[:, 0] + np.sin(2 * X[:, 1]) + 0.1 * rng.normal(size=40)
    w_N = rng.integers(low, 4, size=40).astype(np.float64)
    w_N[:2] = [3.0, 2.0]
    return X, y, w_N


def _ulps(got, expected, dtype=None) -> float:
    return deviation_in_ulps(torch.as_tensor(got), torch.as_tensor(expected), dtype=dtype)


def test_per_fold_is_sklearns_cross_val_predict_with_weighted_refits():
    X, y, w_N = _data()
    params = {"sample_weight": w_N}
    ours = retrofit.cross_val_predict(
        _estimator(), X, y, cv=FOLDS, preprocessing="per_fold", params=params
    )
    refits = sklearn_cross_val_predict(_estimator(), X, y, cv=FOLDS, params=params)
    assert _ulps(ours, refits) <= MODEL_ULPS[torch.float64]
    unweighted = retrofit.cross_val_predict(_estimator(), X, y, cv=FOLDS, preprocessing="per_fold")
    assert np.abs(unweighted - refits).max() > 1e-3


def test_per_fold_probabilities_with_class_weight_are_sklearns_weighted_refits():
    X, y, w_N = _data()
    labels = (y > np.median(y)).astype(int)
    folds = StratifiedKFold(4, shuffle=True, random_state=0)
    est = _estimator(retrofit.OTabPFNClassifier, class_weight="balanced")
    params = {"sample_weight": w_N}
    ours = retrofit.cross_val_predict(
        est, X, labels, cv=folds, method="predict_proba", preprocessing="per_fold", params=params
    )
    refits = sklearn_cross_val_predict(
        est, X, labels, cv=folds, method="predict_proba", params=params
    )
    assert _ulps(ours, refits, torch.float32) <= CLASSIFIER_PROBA_ULPS[torch.float64]


def test_transductive_weights_are_the_rows_repeated_in_their_folds():
    X, y, w_N = _data(low=1)
    folds = list(FOLDS.split(X))
    rows = np.repeat(np.arange(len(y)), w_N.astype(int))
    first_copy_N = np.r_[0, np.cumsum(w_N.astype(int))[:-1]]
    # The repeated table's folds: every copy of a train row in the context, the first
    # copy of each held-out row the query (the same queries as the weighted folds).
    repeated_folds = [
        (np.flatnonzero(np.isin(rows, train)), first_copy_N[test]) for train, test in folds
    ]
    weighted = fold_predictions(
        _estimator(), X, y, folds, preprocessing="transductive", sample_weight=w_N
    )
    repeated = fold_predictions(
        _estimator(), X[rows], y[rows], repeated_folds, preprocessing="transductive"
    )
    unweighted = fold_predictions(_estimator(), X, y, folds, preprocessing="transductive")
    for got, expected, plain in zip(weighted, repeated, unweighted, strict=True):
        assert _ulps(got, expected) <= MODEL_ULPS[torch.float64]
        assert np.abs(plain - expected).max() > 1e-4
    # The public entry point runs the same engine, rows back in their order.
    by_rows = retrofit.cross_val_predict(
        _estimator(), X, y, cv=FOLDS, params={"sample_weight": w_N}
    )
    for (_, test), got in zip(folds, weighted, strict=True):
        np.testing.assert_array_equal(by_rows[test], got)


def test_transductive_weight_zero_rows_are_predicted_but_no_context():
    X, y, w_N = _data()
    assert (w_N == 0).any()
    predictions = retrofit.cross_val_predict(
        _estimator(), X, y, cv=FOLDS, params={"sample_weight": w_N}
    )
    assert predictions.shape == (40,) and np.isfinite(predictions).all()


def _manual_cv_plus(X, y, X_test, w_N, alpha):
    folds = list(FOLDS.split(X))
    residuals_N = np.empty(len(y))
    fold_of_N = np.empty(len(y), dtype=np.intp)
    mu_KQ = np.empty((len(folds), len(X_test)))
    for k, (train, test) in enumerate(folds):
        model = _estimator().fit(X[train], y[train], sample_weight=w_N[train])
        # One call, as the fold engine queries them (predictions move by ~4e-8 in
        # float64 with the test rows beside them, also unpatched).
        predicted = model.predict(np.vstack([X[test], X_test]))
        residuals_N[test] = np.abs(y[test] - predicted[: len(test)])
        fold_of_N[test] = k
        mu_KQ[k] = predicted[len(test) :]
    return cv_plus_intervals(residuals_N, fold_of_N, mu_KQ, alpha=alpha)


def test_cv_plus_and_split_conformal_intervals_use_the_weighted_refits():
    X, y, w_N = _data()
    X_test = np.random.default_rng(5).normal(size=(6, 3))
    params = {"sample_weight": w_N}
    ours = retrofit.prediction_intervals(
        _estimator(), X, y, X_test, method="cv+", cv=FOLDS, alpha=0.2, params=params
    )
    expected = _manual_cv_plus(X, y, X_test, w_N, 0.2)
    scale = max(1.0, float(np.abs(expected.upper_Q).max()))
    eps = MODEL_ULPS[torch.float64] * np.finfo(np.float64).eps * scale
    np.testing.assert_allclose(ours.lower_Q, expected.lower_Q, rtol=0, atol=eps)
    np.testing.assert_allclose(ours.upper_Q, expected.upper_Q, rtol=0, atol=eps)
    split = retrofit.prediction_intervals(
        _estimator(), X, y, X_test, method="split", alpha=0.2, params=params
    )
    order = np.random.default_rng(0).permutation(len(y))
    fit_rows, cal_rows = order[20:], order[:20]
    model = _estimator().fit(X[fit_rows], y[fit_rows], sample_weight=w_N[fit_rows])
    manual = split_conformal_intervals(
        np.abs(y[cal_rows] - model.predict(X[cal_rows])), model.predict(X_test), alpha=0.2
    )
    np.testing.assert_array_equal(split.lower_Q, manual.lower_Q)


def test_what_weighted_folds_refuse():
    X, y, w_N = _data()
    with pytest.raises(InvalidInputError, match="params takes sample_weight only"):
        retrofit.cross_val_predict(_estimator(), X, y, params={"groups": w_N})
    with pytest.raises(InvalidSampleWeightError, match="39 weights for 40 rows"):
        retrofit.cross_val_predict(_estimator(), X, y, params={"sample_weight": w_N[:39]})
    lonely = np.zeros(40)
    lonely[:10] = 1.0  # the fold whose train rows are rows 10..39 has none of weight > 0
    with pytest.raises(InvalidSampleWeightError, match="fold 0's train rows all weigh 0"):
        retrofit.cross_val_predict(
            _estimator(), X, y, cv=KFold(4), params={"sample_weight": lonely}
        )
    with pytest.raises(InvalidInputError, match="params takes sample_weight only"):
        retrofit.prediction_intervals(_estimator(), X, y, X[:2], params={"other": 1})
