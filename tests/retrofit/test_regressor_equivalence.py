"""``OTabPFNRegressor(mode="none")`` is ``tabpfn.TabPFNRegressor``: bit-identical, every way in.

Each test fits plain tabpfn and the retrofit's estimator with the same
arguments on the same checkpoint (a tiny random v3 host, perturbed) and data,
and asserts identical results with ``np.testing.assert_array_equal`` (float64
outputs of float32 inference, the same code on the same rows, so equality is
exact): every ``output_type`` of ``predict`` for every ``fit_mode`` and input
kind (numpy with NaN, pandas with a categorical, a text column and NaN),
``predict_batched``, ``get_embeddings``, tuning, several models, the fitted
attributes, and the errors tabpfn raises.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import polars as pl
import pytest
import torch
from sklearn.exceptions import NotFittedError
from tabpfn import TabPFNRegressor

from retrofit import OTabPFNRegressor

OUTPUT_TYPES = ["mean", "median", "mode", "quantiles", "main", "full"]
FIT_MODES = ["fit_preprocessors", "low_memory", "fit_with_cache"]
QUANTILES = [0.05, 0.5, 0.95]


@pytest.fixture(scope="module")
def checkpoint(tiny_v3_path):
    return str(tiny_v3_path)


def _kwargs(checkpoint, **extra) -> dict:
    return {
        "model_path": checkpoint,
        "n_estimators": 2,
        "device": "cpu",
        "inference_precision": torch.float32,
        "random_state": 3,
        **extra,
    }


def _pair(checkpoint, **extra) -> tuple[TabPFNRegressor, OTabPFNRegressor]:
    kwargs = _kwargs(checkpoint, **extra)
    return TabPFNRegressor(**kwargs), OTabPFNRegressor(mode="none", **kwargs)


def _numpy_with_nan(n=50, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 4))
    y = X[:, 0] - 2 * X[:, 1] + 0.1 * rng.normal(size=n)
    X[rng.random(X.shape) < 0.1] = np.nan
    return X, y


def _frame_with_categorical_text_nan(n=50, seed=0):
    rng = np.random.default_rng(seed)
    X = pd.DataFrame(
        {
            "x0": rng.normal(size=n),
            "x1": rng.normal(size=n),
            "colour": pd.Categorical(rng.choice(["red", "green", "blue"], size=n)),
            "city": rng.choice(["Oslo", "Lima", "Pune", "Kyiv"], size=n).astype(object),
        }
    )
    X.loc[[2, 7, 11], "x1"] = np.nan
    X.loc[[3, 8], "city"] = None
    y = X["x0"].to_numpy() + (X["colour"] == "red").to_numpy() * 1.5
    return X, y


INPUTS = {
    "numpy_nan": _numpy_with_nan,
    "pandas_categorical_text_nan": _frame_with_categorical_text_nan,
}


def assert_same(a, b) -> None:
    """Equal outputs of any predict type: arrays, lists of arrays, dicts, tensors, criteria."""
    assert type(a) is type(b)
    if isinstance(a, dict):
        assert a.keys() == b.keys()
        for key in a:
            assert_same(a[key], b[key])
    elif isinstance(a, list):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            assert_same(x, y)
    elif isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype
        assert torch.equal(a, b)
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)
    else:  # the bar distribution of output_type="full"
        assert torch.equal(a.borders, b.borders)


def _split(X, y, n_train=35):
    if isinstance(X, pd.DataFrame):
        return X.iloc[:n_train], y[:n_train], X.iloc[n_train:]
    return X[:n_train], y[:n_train], X[n_train:]


@pytest.mark.parametrize("input_kind", sorted(INPUTS))
@pytest.mark.parametrize("fit_mode", FIT_MODES)
def test_mode_none_predicts_exactly_as_tabpfn_for_every_output_type(
    checkpoint, fit_mode, input_kind
):
    X_train, y_train, X_test = _split(*INPUTS[input_kind]())
    plain, ours = _pair(checkpoint, fit_mode=fit_mode)
    plain.fit(X_train, y_train)
    ours.fit(X_train, y_train)
    for output_type in OUTPUT_TYPES:
        kwargs = {"quantiles": QUANTILES} if output_type in ("quantiles", "main") else {}
        assert_same(
            ours.predict(X_test, output_type=output_type, **kwargs),
            plain.predict(X_test, output_type=output_type, **kwargs),
        )
    default_quantiles = [est.predict(X_test, output_type="quantiles") for est in (ours, plain)]
    assert_same(*default_quantiles)


def test_mode_none_has_tabpfns_fitted_attributes(checkpoint):
    X_train, y_train, _ = _split(*_frame_with_categorical_text_nan())
    plain, ours = _pair(checkpoint, categorical_features_indices=[0])
    plain.fit(X_train, y_train)
    ours.fit(X_train, y_train)
    np.testing.assert_array_equal(ours.feature_names_in_, plain.feature_names_in_)
    for name in ("n_features_in_", "n_train_samples_", "categorical_features_indices_"):
        assert getattr(ours, name) == getattr(plain, name), name
    assert ours.inferred_feature_schema_ == plain.inferred_feature_schema_
    assert ours.inference_config_ == plain.inference_config_
    assert (ours.y_train_mean_, ours.y_train_std_) == (plain.y_train_mean_, plain.y_train_std_)
    assert torch.equal(ours.raw_space_bardist_.borders, plain.raw_space_bardist_.borders)
    assert ours.patch_reports_ == [] and ours.patch_report_ is None
    assert ours.settings_["mode"] == "none"


def test_mode_none_batched_prediction_and_embeddings_are_tabpfns(checkpoint):
    data = [_numpy_with_nan(seed=s) for s in range(3)]
    X_trains = [X[:35] for X, _ in data]
    y_trains = [y[:35] for _, y in data]
    X_tests = [X[35:] for X, _ in data]
    plain, ours = _pair(checkpoint)
    for output_type in ("mean", "quantiles", "full"):
        assert_same(
            ours.predict_batched(X_trains, y_trains, X_tests, output_type=output_type),
            plain.predict_batched(X_trains, y_trains, X_tests, output_type=output_type),
        )
    plain.fit(X_trains[0], y_trains[0])
    ours.fit(X_trains[0], y_trains[0])
    for source in ("train", "test"):
        assert_same(
            ours.get_embeddings(X_tests[0], source), plain.get_embeddings(X_tests[0], source)
        )


def test_mode_none_tunes_the_temperature_as_tabpfn_does(checkpoint):
    X, y = _numpy_with_nan(n=90)
    tuning = {"calibrate_temperature": True, "tuning_holdout_frac": 0.5, "tuning_n_folds": 1}
    plain, ours = _pair(checkpoint, tuning_config=tuning, eval_metric="crps")
    with pytest.warns(UserWarning, match="recommend tuning"):
        plain.fit(X[:80], y[:80])
    with pytest.warns(UserWarning, match="recommend tuning"):
        ours.fit(X[:80], y[:80])
    assert ours.ensemble_softmax_temperature_ == plain.ensemble_softmax_temperature_
    assert_same(ours.predict(X[80:], output_type="main"), plain.predict(X[80:], output_type="main"))


def test_mode_none_ensembles_several_models_as_tabpfn_does(checkpoint):
    X_train, y_train, X_test = _split(*_numpy_with_nan())
    plain, ours = _pair(checkpoint, model_path=[checkpoint, checkpoint])
    plain.fit(X_train, y_train)
    ours.fit(X_train, y_train)
    assert len(ours.models_) == 2
    assert_same(ours.predict(X_test, output_type="full"), plain.predict(X_test, output_type="full"))


def test_mode_none_moves_between_devices_as_tabpfn_does(checkpoint):
    X_train, y_train, X_test = _split(*_numpy_with_nan())
    plain, ours = _pair(checkpoint)
    for est in (plain, ours):
        est.fit(X_train, y_train)
        est.to("cpu")
    assert ours.devices_ == plain.devices_
    assert_same(ours.predict(X_test), plain.predict(X_test))


def _raised(call) -> BaseException:
    with pytest.raises(Exception) as info:
        call()
    return info.value


@pytest.mark.parametrize(
    "case",
    [
        "predict_before_fit",
        "nan_target",
        "wrong_feature_count",
        "too_many_cpu_rows",
        "bad_quantile",
    ],
)
def test_mode_none_raises_tabpfns_errors(checkpoint, case):
    X, y = _numpy_with_nan()
    errors = []
    for est in _pair(checkpoint):
        if case == "predict_before_fit":
            errors.append(_raised(lambda est=est: est.predict(X)))
        elif case == "nan_target":
            y_nan = y.copy()
            y_nan[4] = np.nan
            errors.append(_raised(lambda est=est, y_nan=y_nan: est.fit(X, y_nan)))
        elif case == "wrong_feature_count":
            est.fit(X, y)
            errors.append(_raised(lambda est=est: est.predict(X[:, :2])))
        elif case == "too_many_cpu_rows":
            big = np.random.default_rng(0).normal(size=(5001, 2))
            errors.append(_raised(lambda est=est, big=big: est.fit(big, big[:, 0])))
        else:
            est.fit(X, y)
            call = lambda est=est: est.predict(X, output_type="quantiles", quantiles=[1.5])  # noqa: E731
            errors.append(_raised(call))
    assert type(errors[0]) is type(errors[1])
    # The message names the estimator's class; otherwise it is tabpfn's, word for word.
    assert str(errors[1]).replace("OTabPFNRegressor", "TabPFNRegressor") == str(errors[0])
    if case == "predict_before_fit":
        assert isinstance(errors[1], NotFittedError)


def test_mode_none_on_polars_frames_is_tabpfn(checkpoint):
    X, y = _numpy_with_nan()
    frame = pl.DataFrame({f"x{i}": X[:, i] for i in range(X.shape[1])})
    plain, ours = _pair(checkpoint)
    plain.fit(frame[:35], y[:35])
    ours.fit(frame[:35], y[:35])
    assert_same(*(est.predict(frame[35:], output_type="main") for est in (ours, plain)))
