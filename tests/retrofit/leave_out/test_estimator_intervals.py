"""``retrofit.prediction_intervals``: the estimator-level entry point of the intervals.

A tiny random v3 regressor (perturbed zero-inits, ``tiny_v3_path``), Full-O,
float32. Split conformal is checked against its definition computed here
(fit on the fit rows, residuals on the calibration rows); jackknife+ and CV+
against the array maths fed with refits of the estimator on each fold's rows
(the fold engine equals them within the model bound); the folds run as one
batch of the fold engine, which refuses ``mode="none"``.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.base import clone
from sklearn.linear_model import Ridge
from sklearn.model_selection import GroupKFold, KFold, LeaveOneOut, PredefinedSplit, ShuffleSplit
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

import retrofit
import retrofit.batching.engine
from retrofit import OTabPFNClassifier, OTabPFNRegressor
from retrofit.errors import InvalidInputError, RetrofitError
from retrofit.leave_out.estimator_intervals import prediction_intervals
from retrofit.leave_out.intervals import cv_plus_intervals, split_conformal_intervals
from tests.helpers.exactness import MODEL_ULPS


def _regressor(path) -> OTabPFNRegressor:
    return OTabPFNRegressor(
        mode="full-o",
        model_path=str(path),
        device="cpu",
        n_estimators=1,
        inference_precision=torch.float32,
        random_state=0,
    )


def _table(n: int = 40, q: int = 7, seed: int = 0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n + q, 3))
    y = X @ np.array([1.0, -1.0, 0.5]) + 0.3 * rng.normal(size=n + q)
    return X[:n], y[:n], X[n:]


def test_a_classifier_is_refused_in_one_line_naming_the_regressor(tiny_v3_path):
    X, y, X_test = _table()
    with pytest.raises(InvalidInputError, match=r"classifier.*OTabPFNRegressor only") as err:
        prediction_intervals(OTabPFNClassifier(), X, (y > 0).astype(int), X_test)
    assert "\n" not in str(err.value)


def test_an_estimator_that_is_not_the_retrofit_regressor_is_refused():
    X, y, X_test = _table()
    with pytest.raises(InvalidInputError, match=r"needs a retrofit\.OTabPFNRegressor, got Ridge"):
        prediction_intervals(Ridge(), X, y, X_test)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"method": "jackknife"}, "unknown method 'jackknife'"),
        ({"method": "split", "cv": 5}, "cv is for method='cv\\+' only"),
        ({"alpha": 1.0}, "alpha must be in"),
        ({"method": "split", "calibration_fraction": 0.0}, "calibration_fraction"),
    ],
)
def test_bad_arguments_are_refused_before_anything_is_fitted(tiny_v3_path, kwargs, match):
    X, y, X_test = _table()
    estimator = _regressor(tiny_v3_path)
    with pytest.raises(InvalidInputError, match=match):
        prediction_intervals(estimator, X, y, X_test, **kwargs)
    assert not hasattr(estimator, "n_features_in_")


def test_split_conformal_fits_on_one_part_and_calibrates_on_the_other(tiny_v3_path):
    X, y, X_test = _table()
    estimator = _regressor(tiny_v3_path)
    got = prediction_intervals(estimator, X, y, X_test, method="split", alpha=0.2, random_state=3)
    order = np.random.default_rng(3).permutation(len(X))
    cal, fit = order[:20], order[20:]
    model = clone(estimator).fit(X[fit], y[fit])
    want = split_conformal_intervals(
        np.abs(y[cal] - model.predict(X[cal])), model.predict(X_test), alpha=0.2
    )
    np.testing.assert_array_equal(got.lower_Q, want.lower_Q)
    np.testing.assert_array_equal(got.upper_Q, want.upper_Q)
    assert got.method == "split" and np.isfinite(got.width_Q).all()


def _refit_folds(estimator, X, y, X_test, folds):
    residuals = np.empty(len(X))
    fold_of_row = np.empty(len(X), dtype=int)
    mu_query = np.empty((len(folds), len(X_test)))
    for k, (train, test) in enumerate(folds):
        model = clone(estimator).fit(X[train], y[train])
        residuals[test] = np.abs(y[test] - model.predict(X[test]))
        fold_of_row[test] = k
        mu_query[k] = model.predict(X_test)
    return residuals, fold_of_row, mu_query


@pytest.mark.parametrize("method", ["jackknife+", "cv+"])
def test_jackknife_plus_and_cv_plus_are_the_array_maths_on_each_folds_model(tiny_v3_path, method):
    X, y, X_test = _table(n=16, q=5)
    estimator = _regressor(tiny_v3_path)
    splitter = LeaveOneOut() if method == "jackknife+" else KFold(4, shuffle=True, random_state=0)
    got = retrofit.prediction_intervals(
        estimator, X, y, X_test, alpha=0.2, method=method, **({"cv": 4} if method == "cv+" else {})
    )
    residuals, fold_of_row, mu_query = _refit_folds(
        estimator, X, y, X_test, list(splitter.split(X))
    )
    want = cv_plus_intervals(residuals, fold_of_row, mu_query, alpha=0.2)
    # Each fold's test rows are predicted beside its held-out rows in one call:
    # other rows of the same query batch, so within the fp32 module bound of the scale.
    scale = max(1.0, float(np.abs(want.upper_Q).max()))
    bound = MODEL_ULPS[torch.float32] * np.finfo(np.float32).eps * scale
    np.testing.assert_allclose(got.lower_Q, want.lower_Q, rtol=0, atol=bound)
    np.testing.assert_allclose(got.upper_Q, want.upper_Q, rtol=0, atol=bound)
    assert got.method == method and np.isfinite(got.width_Q).all()
    assert (got.lower_Q < got.upper_Q).all()


def test_a_splitter_that_is_not_a_partition_is_refused(tiny_v3_path):
    X, y, X_test = _table()
    cv = ShuffleSplit(3, test_size=0.2, random_state=0)
    with pytest.raises(InvalidInputError, match="every row exactly once"):
        prediction_intervals(_regressor(tiny_v3_path), X, y, X_test, method="cv+", cv=cv)


def test_the_folds_models_are_one_batch_of_the_fold_engine(tiny_v3_path, monkeypatch):
    X, y, X_test = _table(n=16, q=5)
    calls = []
    engine = retrofit.batching.engine.run_padded

    def spy(estimator, X_train_list, y_train_list, X_test_list, *args, **kwargs):
        calls.append([(len(X), len(Xt)) for X, Xt in zip(X_train_list, X_test_list, strict=True)])
        return engine(estimator, X_train_list, y_train_list, X_test_list, *args, **kwargs)

    monkeypatch.setattr("retrofit.batching.regression.run_padded", spy)
    prediction_intervals(_regressor(tiny_v3_path), X, y, X_test, method="cv+", cv=4)
    # Four folds of 12 train rows, each predicting its 4 held-out rows and the 5 test rows.
    assert calls == [[(12, 9)] * 4]


@pytest.mark.parametrize("method", ["jackknife+", "cv+"])
def test_mode_none_is_refused_for_the_fold_methods_and_split_still_runs(tiny_v3_path, method):
    X, y, X_test = _table(n=16, q=5)
    estimator = OTabPFNRegressor(
        mode="none", model_path=str(tiny_v3_path), device="cpu", n_estimators=1, random_state=0
    )
    with pytest.raises(InvalidInputError, match=r"mode='none'.*use mode='full-o'"):
        prediction_intervals(estimator, X, y, X_test, method=method)
    split = prediction_intervals(estimator, X, y, X_test, method="split", alpha=0.25)
    assert np.isfinite(split.width_Q).all()


def test_jackknife_plus_and_cv_plus_fit_each_fold_on_its_own_rows_features_included(
    tiny_v3_path, monkeypatch
):
    """jackknife+ and CV+ are defined on refits: per-fold preprocessing, never transductive."""
    X, y, X_test = _table(n=12)
    asked = []
    engine = retrofit.leave_out.estimator_intervals.fold_predictions

    def spy(*args, **kwargs):
        asked.append(kwargs["preprocessing"])
        return engine(*args, **kwargs)

    monkeypatch.setattr("retrofit.leave_out.estimator_intervals.fold_predictions", spy)
    prediction_intervals(_regressor(tiny_v3_path), X, y, X_test, method="jackknife+")
    prediction_intervals(_regressor(tiny_v3_path), X, y, X_test, method="cv+", cv=3)
    assert asked == ["per_fold", "per_fold"]


@pytest.mark.parametrize("method", ["jackknife+", "cv+"])
def test_an_alpha_above_one_half_is_refused_for_the_fold_methods(tiny_v3_path, method):
    # Computed, CV+ at alpha 0.95 gave lower ends above the upper ones on 46 % of rows.
    X, y, X_test = _table()
    estimator = _regressor(tiny_v3_path)
    with pytest.raises(InvalidInputError, match=r"alpha must be in \(0, 0\.5\]") as err:
        prediction_intervals(estimator, X, y, X_test, method=method, alpha=0.95)
    assert "\n" not in str(err.value)
    assert not hasattr(estimator, "n_features_in_")
    split = prediction_intervals(estimator, X, y, X_test, method="split", alpha=0.95)
    assert (split.lower_Q <= split.upper_Q).all()


def _nan_at_3(y):
    y = y.copy()
    y[3] = np.nan
    return y


@pytest.mark.parametrize(
    ("change", "match"),
    [
        (lambda X, y, Xt: {"X_test": Xt[:, :2]}, r"X_test has shape \(7, 2\) and X \(40, 3\)"),
        (lambda X, y, Xt: {"y": np.array(["a", "b"] * 20)}, "y must be numeric"),
        (lambda X, y, Xt: {"y": y[:30]}, "X has 40 rows and y 30 values"),
        (lambda X, y, Xt: {"y": _nan_at_3(y)}, r"y holds NaN or inf in row 3"),
        (
            lambda X, y, Xt: {"X": X[:3], "y": y[:3], "method": "split"},
            "of 3 rows leaves 1 to fit and 2 to calibrate",
        ),
        (
            lambda X, y, Xt: {"X": X[:3], "y": y[:3], "method": "cv+"},
            "KFold cannot split these 3 rows",
        ),
        (lambda X, y, Xt: {"method": "cv+", "cv": GroupKFold(3)}, "GroupKFold splits by group"),
        (lambda X, y, Xt: {"method": "cv+", "cv": 1}, "cv=1 gives no folds"),
        (
            lambda X, y, Xt: {"method": "split", "groups": np.arange(40) % 4},
            "groups is for method='cv\\+' only",
        ),
        (
            lambda X, y, Xt: {"method": "cv+", "cv": GroupKFold(3), "groups": [0, 1]},
            r"groups has shape \(2,\)",
        ),
    ],
    ids=[
        "x-test-width",
        "text-y",
        "y-length",
        "nan-y",
        "split-on-3-rows",
        "cv-plus-on-3-rows",
        "group-splitter-without-groups",
        "one-fold",
        "groups-for-split",
        "groups-length",
    ],
)
def test_data_the_folds_cannot_use_is_refused_in_one_line_before_anything_is_fitted(
    tiny_v3_path, change, match
):
    X, y, X_test = _table()
    estimator = _regressor(tiny_v3_path)
    kwargs = {"X": X, "y": y, "X_test": X_test, **change(X, y, X_test)}
    with pytest.raises(RetrofitError, match=match) as err:
        prediction_intervals(estimator, **kwargs)
    assert isinstance(err.value, ValueError) and "\n" not in str(err.value)
    assert not hasattr(estimator, "n_features_in_")


def test_a_group_splitter_with_groups_gives_its_folds(tiny_v3_path):
    X, y, X_test = _table(n=18)
    groups = np.arange(18) // 3  # six groups of three rows
    splitter = GroupKFold(3)
    by_group = prediction_intervals(
        _regressor(tiny_v3_path), X, y, X_test, method="cv+", cv=splitter, groups=groups
    )
    fold_of_row = np.empty(18, dtype=int)
    for k, (_, test) in enumerate(splitter.split(X, y, groups)):
        fold_of_row[test] = k
    predefined = prediction_intervals(
        _regressor(tiny_v3_path), X, y, X_test, method="cv+", cv=PredefinedSplit(fold_of_row)
    )
    np.testing.assert_array_equal(by_group.lower_Q, predefined.lower_Q)
    np.testing.assert_array_equal(by_group.upper_Q, predefined.upper_Q)
    assert np.isfinite(by_group.width_Q).all()


def test_a_pipeline_is_refused_naming_what_works_instead(tiny_v3_path):
    X, y, X_test = _table()
    pipeline = make_pipeline(StandardScaler(), _regressor(tiny_v3_path))
    with pytest.raises(InvalidInputError, match="not a Pipeline") as err:
        prediction_intervals(pipeline, X, y, X_test)
    assert "ending in OTabPFNRegressor" in str(err.value)
    assert "wrap the host" not in str(err.value) and "\n" not in str(err.value)
