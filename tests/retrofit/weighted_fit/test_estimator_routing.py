"""``sample_weight`` reaches the estimators through scikit-learn's meta-estimators.

Without metadata routing scikit-learn hands ``fit``'s keyword arguments on
(``GridSearchCV.fit(X, y, sample_weight=w)``, a ``Pipeline`` step's
``model__sample_weight``); with ``enable_metadata_routing`` an estimator
asks for them with ``set_fit_request(sample_weight=True)``, generated from
``fit``'s signature, and ``cross_validate(params=...)`` restricts them to each
fold's train rows. Each test compares what the meta-estimator fitted with a
weighted fit made by hand on the same rows (the embedded hosts, float64), and
with the unweighted fit, which it must not be.
"""

from __future__ import annotations

import numpy as np
import pytest
import sklearn
import torch
from sklearn.exceptions import UnsetMetadataPassedError
from sklearn.model_selection import GridSearchCV, KFold, cross_validate
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from retrofit import OTabPFNClassifier, OTabPFNRegressor


def _regressor(**kwargs) -> OTabPFNRegressor:
    params = {
        "model_path": "embedded",
        "device": "cpu",
        "inference_precision": torch.float64,
        "n_estimators": 2,
    }
    return OTabPFNRegressor(**{**params, **kwargs})


def _data(n: int = 48):
    rng = np.random.default_rng(3)
    X = rng.normal(size=(n, 3))
    y = X[:, 0] - np.sin(2 * X[:, 1]) + 0.1 * rng.normal(size=n)
    w_N = rng.integers(0, 4, size=n).astype(np.float64)
    w_N[:2] = [3.0, 3.0]
    return X, y, w_N, rng.normal(size=(10, 3))


def test_grid_search_hands_the_weights_to_every_fit():
    X, y, w_N, X_test = _data()
    search = GridSearchCV(_regressor(), {"softmax_temperature": [0.9]}, cv=2)
    search.fit(X, y, sample_weight=w_N)
    by_hand = _regressor(softmax_temperature=0.9).fit(X, y, sample_weight=w_N)
    np.testing.assert_array_equal(search.predict(X_test), by_hand.predict(X_test))
    unweighted = _regressor(softmax_temperature=0.9).fit(X, y)
    assert np.abs(search.predict(X_test) - unweighted.predict(X_test)).max() > 1e-3


def test_a_pipeline_step_gets_its_weights():
    X, y, w_N, X_test = _data()
    pipeline = make_pipeline(StandardScaler(), _regressor())
    pipeline.fit(X, y, otabpfnregressor__sample_weight=w_N)
    scaler = StandardScaler().fit(X)
    by_hand = _regressor().fit(scaler.transform(X), y, sample_weight=w_N)
    np.testing.assert_array_equal(
        pipeline.predict(X_test), by_hand.predict(scaler.transform(X_test))
    )


def test_cross_validate_routes_each_folds_weights_when_requested():
    X, y, w_N, X_test = _data()
    folds = KFold(3, shuffle=True, random_state=0)
    with sklearn.config_context(enable_metadata_routing=True):
        with pytest.raises(UnsetMetadataPassedError, match="sample_weight"):
            cross_validate(_regressor(), X, y, cv=folds, params={"sample_weight": w_N})
        # score takes sample_weight too (scikit-learn's RegressorMixin): say it is not wanted.
        requesting = (
            _regressor().set_fit_request(sample_weight=True).set_score_request(sample_weight=False)
        )
        result = cross_validate(
            requesting, X, y, cv=folds, params={"sample_weight": w_N}, return_estimator=True
        )
    for fitted, (train, _) in zip(result["estimator"], folds.split(X), strict=True):
        by_hand = _regressor().fit(X[train], y[train], sample_weight=w_N[train])
        np.testing.assert_array_equal(fitted.predict(X_test), by_hand.predict(X_test))


def test_the_classifier_asks_for_its_weights_too():
    X, y, w_N, X_test = _data()
    labels = (y > np.median(y)).astype(int)
    with sklearn.config_context(enable_metadata_routing=True):
        est = OTabPFNClassifier(
            model_path="embedded", device="cpu", n_estimators=2, inference_precision=torch.float64
        ).set_fit_request(sample_weight=True)
        est.set_score_request(sample_weight=False)
        search = GridSearchCV(est, {"softmax_temperature": [0.9]}, cv=2)
        search.fit(X, labels, sample_weight=w_N)
    by_hand = OTabPFNClassifier(
        model_path="embedded",
        device="cpu",
        n_estimators=2,
        inference_precision=torch.float64,
        softmax_temperature=0.9,
    ).fit(X, labels, sample_weight=w_N)
    np.testing.assert_array_equal(search.predict_proba(X_test), by_hand.predict_proba(X_test))
