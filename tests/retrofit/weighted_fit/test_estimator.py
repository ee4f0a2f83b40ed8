"""``fit(X, y, sample_weight=w)`` of both estimators is the fit on the rows really repeated.

The embedded hosts (``model_path="embedded"``, Full-O, float64, 2 members) on
70 distinct rows with numeric columns holding NaN, numeric and string
categoricals, ties and a target (tests/helpers/weighted_fits.py), weights
0..3 with ``sum w`` 113: above tabpfn's 100-row rule of categorical inference
while the rows held are below it. The weighted fit is compared with the fit on
the table whose row ``j`` is repeated ``w_j`` times (``np.repeat``): the
regressor's mean and quantiles, the classifier's probabilities, in each fit
mode. Bound: ``MODEL_ULPS[float64]`` float64 ulps of ``max(1, max|prediction|)``
for the regressor, ``CLASSIFIER_PROBA_ULPS[float64]`` float32 ulps for the
classifier's probabilities (tabpfn returns them in float32); measured 0 in
every mode. tabpfn's in-code presets (v2, v2.5) with their safepower and
quantile transforms: within ``POWER_OUTPUT_RTOL`` of the scale (measured
9e-8 and 3.6e-7, the power lambdas' solver); the fingerprint feature is off
there (a weighted row is one row with one fingerprint: docs/weights.md).

Controls: each stage the estimator weights, switched off alone (the engine's
row weights in each fit mode, the member pipelines' weighted fits, the target
moments, the categorical threshold, the classifier's class counts), misses
the repeated rows by more than 1e-4, so each is needed and the comparison can
fail. Also: weight 0 is removal and every weight 1 is ``sample_weight=None``,
bit for bit, on tabpfn's own engine; ``c`` times every weight is ``c``
copies; ``class_weight``; refusals and validation; fit states.
"""

from __future__ import annotations

import contextlib
import dataclasses

import numpy as np
import pytest
import torch
from sklearn.utils.class_weight import compute_sample_weight
from tabpfn.inference_config import InferenceConfig

import retrofit.weighted_fit.engines as engines
import retrofit.weighted_fit.estimator as estimator_module
import retrofit.weighted_preprocessing.ensemble as ensemble_module
from retrofit import (
    InvalidSampleWeightError,
    OTabPFNClassifier,
    OTabPFNRegressor,
    UnsupportedWeightingError,
)
from tests.helpers.exactness import CLASSIFIER_PROBA_ULPS, MODEL_ULPS, deviation_in_ulps
from tests.helpers.weighted_fits import POWER_OUTPUT_RTOL, mixed_table, repeat_rows

FIT_MODES = ("fit_preprocessors", "low_memory", "fit_with_cache")
QUANTILES = [0.1, 0.5, 0.9]
#: A control must miss the repeated rows by far more than any rounding.
CONTROL_MISS = 1e-4


def _estimator(task: str, **kwargs):
    cls = OTabPFNClassifier if task == "classifier" else OTabPFNRegressor
    params = {
        "model_path": "embedded",
        "device": "cpu",
        "inference_precision": torch.float64,
        "n_estimators": 2,
        **kwargs,
    }
    return cls(**params)


def _data(task: str):
    X, y = mixed_table(70, 0, task=task)
    X_test, _ = mixed_table(20, 1, task=task)
    w_N = np.random.default_rng(0).integers(0, 4, size=len(y)).astype(np.float64)
    w_N[:3] = [0.0, 2.0, 3.0]
    assert w_N.sum() > 100 > np.count_nonzero(w_N)
    return X, y, X_test, w_N


def _outputs(task: str, est, X_test) -> np.ndarray:
    if task == "classifier":
        return est.predict_proba(X_test)
    quantiles = est.predict(X_test, output_type="quantiles", quantiles=QUANTILES)
    return np.vstack([est.predict(X_test), *quantiles])


def _deviation(task: str, weighted: np.ndarray, repeated: np.ndarray) -> float:
    """The deviation in the bound's ulps (float32 ulps of probabilities, float64 otherwise)."""
    dtype = torch.float32 if task == "classifier" else torch.float64
    return deviation_in_ulps(torch.as_tensor(weighted), torch.as_tensor(repeated), dtype=dtype)


def _bound(task: str) -> float:
    return (
        CLASSIFIER_PROBA_ULPS[torch.float64] if task == "classifier" else MODEL_ULPS[torch.float64]
    )


def _weighted_and_repeated(task: str, **kwargs) -> tuple[np.ndarray, np.ndarray]:
    X, y, X_test, w_N = _data(task)
    weighted = _estimator(task, **kwargs).fit(X, y, sample_weight=w_N)
    repeated = _estimator(task, **kwargs).fit(repeat_rows(X, w_N), repeat_rows(y, w_N))
    return _outputs(task, weighted, X_test), _outputs(task, repeated, X_test)


@pytest.mark.parametrize("fit_mode", FIT_MODES)
@pytest.mark.parametrize("task", ["regressor", "classifier"])
def test_integer_weights_are_the_rows_repeated_in_every_fit_mode(task, fit_mode):
    weighted, repeated = _weighted_and_repeated(task, fit_mode=fit_mode)
    assert _deviation(task, weighted, repeated) <= _bound(task)


def test_rows_subsampled_per_member_are_drawn_from_the_weighted_multiset():
    # Each member holds other rows with other weights: the engine runs them apart.
    for fit_mode in FIT_MODES:
        weighted, repeated = _weighted_and_repeated(
            "regressor",
            fit_mode=fit_mode,
            n_estimators=3,
            inference_config={"SUBSAMPLE_SAMPLES": 40},
        )
        assert _deviation("regressor", weighted, repeated) <= _bound("regressor"), fit_mode


def _unweighted_runs(members):
    return [(list(range(len(members))), None)]


def _unweighted_members(w_N):
    return contextlib.nullcontext()


def _unweighted_moments(y_N, w_N):
    return float(np.mean(y_N)), float(np.std(y_N))


def _unweighted_threshold(w_N, threshold):
    return threshold


def _unweighted_counts(y_encoded_N, w_N, n_classes):
    return np.bincount(np.asarray(y_encoded_N, dtype=np.int64), minlength=n_classes)


#: (task, module, name, stand-in, estimator arguments): one weighted stage switched off.
CONTROLS = {
    **{
        f"engine-{mode}": ("regressor", engines, "member_weight_runs", _unweighted_runs, mode)
        for mode in FIT_MODES
    },
    "member-pipelines": ("regressor", ensemble_module, "fitting_with", _unweighted_members, None),
    "target-moments": (
        "regressor",
        estimator_module,
        "weighted_target_standardisation",
        _unweighted_moments,
        None,
    ),
    "categorical-threshold": (
        "regressor",
        estimator_module,
        "categorical_inference_threshold",
        _unweighted_threshold,
        None,
    ),
    "class-counts": (
        "classifier",
        estimator_module,
        "weighted_class_counts",
        _unweighted_counts,
        "balance",
    ),
}


@pytest.mark.parametrize("control", sorted(CONTROLS))
def test_each_stage_weighted_at_the_estimator_is_needed(control, monkeypatch):
    task, module, name, stand_in, option = CONTROLS[control]
    kwargs = {"balance_probabilities": True} if option == "balance" else {}
    if option in FIT_MODES:
        kwargs["fit_mode"] = option
    weighted, repeated = _weighted_and_repeated(task, **kwargs)
    assert _deviation(task, weighted, repeated) <= _bound(task)
    monkeypatch.setattr(module, name, stand_in)
    broken, _ = _weighted_and_repeated(task, **kwargs)
    assert np.abs(broken - repeated).max() > CONTROL_MISS


def _preset_fields(version: str, task: str) -> dict:
    kind = "multiclass" if task == "classifier" else "regression"
    config = InferenceConfig.get_default(kind, version)
    fields = {
        f.name: getattr(config, f.name)
        for f in dataclasses.fields(config)
        if not f.name.startswith("_") and f.name != "N_ESTIMATORS"
    }
    # The fingerprint exists to tell copies apart: a weighted row is one row.
    return {**fields, "FINGERPRINT_FEATURE": False}


@pytest.mark.parametrize("version", ["v2", "v2.5"])
@pytest.mark.parametrize("task", ["regressor", "classifier"])
def test_tabpfns_presets_weighted_are_the_rows_repeated_within_the_solvers_bound(task, version):
    weighted, repeated = _weighted_and_repeated(
        task, inference_config=_preset_fields(version, task)
    )
    if task == "classifier":
        assert _deviation(task, weighted, repeated) <= _bound(task)
    else:  # the safepower target transform's lambda: a solver between them
        scale = max(1.0, float(np.abs(repeated).max()))
        assert np.abs(weighted - repeated).max() <= POWER_OUTPUT_RTOL * scale


@pytest.mark.parametrize("task", ["regressor", "classifier"])
def test_weight_zero_is_removal_and_every_weight_one_is_none_bit_for_bit(task):
    X, y, X_test, _ = _data(task)
    kept = np.ones(len(y))
    kept[[0, 5, 9]] = 0.0
    rows = np.flatnonzero(kept)
    removed = _outputs(task, _estimator(task).fit(X.iloc[rows], y[rows]), X_test)
    zero = _estimator(task).fit(X, y, sample_weight=kept)
    np.testing.assert_array_equal(_outputs(task, zero, X_test), removed)
    plain = _estimator(task).fit(X, y)
    ones = _estimator(task).fit(X, y, sample_weight=np.ones(len(y)))
    np.testing.assert_array_equal(_outputs(task, ones, X_test), _outputs(task, plain, X_test))
    # Both are tabpfn's own fit: its own engine, not the weighted one.
    for est in (zero, ones, plain):
        assert type(est.executor_).__module__ == "tabpfn.inference"


@pytest.mark.parametrize("task", ["regressor", "classifier"])
def test_every_weight_times_c_is_c_copies_of_the_data(task):
    X, y, X_test, _ = _data(task)
    doubled = _estimator(task).fit(X, y, sample_weight=2.0)
    copies = _estimator(task).fit(
        repeat_rows(X, np.full(len(y), 2)), repeat_rows(y, np.full(len(y), 2))
    )
    assert _deviation(task, _outputs(task, doubled, X_test), _outputs(task, copies, X_test)) <= (
        _bound(task)
    )
    assert type(doubled.executor_).__module__ != "tabpfn.inference"


def test_class_weight_balanced_is_compute_sample_weight_balanced():
    X, y, X_test, w_N = _data("classifier")
    balanced = _estimator("classifier", class_weight="balanced").fit(X, y)
    given = _estimator("classifier").fit(X, y, sample_weight=compute_sample_weight("balanced", y))
    np.testing.assert_array_equal(balanced.predict_proba(X_test), given.predict_proba(X_test))
    plain = _estimator("classifier").fit(X, y)
    assert np.abs(balanced.predict_proba(X_test) - plain.predict_proba(X_test)).max() > 1e-3
    # A dict multiplies the sample weights row by row; labels not named weigh 1.
    weights = {0: 2.0, 2: 0.5}
    by_dict = _estimator("classifier", class_weight=weights).fit(X, y, sample_weight=w_N)
    product = w_N * np.array([weights.get(label, 1.0) for label in y])
    by_product = _estimator("classifier").fit(X, y, sample_weight=product)
    np.testing.assert_array_equal(by_dict.predict_proba(X_test), by_product.predict_proba(X_test))


def test_class_weight_balanced_counts_the_sample_weights_so_they_stay_frequencies():
    X, y, X_test, w_N = _data("classifier")
    weighted = _estimator("classifier", class_weight="balanced").fit(X, y, sample_weight=w_N)
    repeated = _estimator("classifier", class_weight="balanced").fit(
        repeat_rows(X, w_N), repeat_rows(y, w_N)
    )
    deviation = _deviation(
        "classifier", weighted.predict_proba(X_test), repeated.predict_proba(X_test)
    )
    assert deviation <= _bound("classifier")


@pytest.mark.parametrize("task", ["regressor", "classifier"])
def test_mode_none_refuses_weights_in_one_line_naming_the_patched_modes(task):
    X, y, _, w_N = _data(task)
    with pytest.raises(UnsupportedWeightingError, match="'full-o' or 'oattention'") as caught:
        _estimator(task, mode="none").fit(X, y, sample_weight=w_N)
    assert "\n" not in str(caught.value)
    if task == "classifier":
        with pytest.raises(UnsupportedWeightingError, match="mode='none'"):
            _estimator(task, mode="none", class_weight="balanced").fit(X, y)
    _estimator(task, mode="none").fit(X, y, sample_weight=None)  # tabpfn itself


def test_a_tuning_config_is_refused_with_weights():
    X, y, _, w_N = _data("regressor")
    est = _estimator("regressor", tuning_config={"calibrate_temperature": True})
    with pytest.raises(UnsupportedWeightingError, match="tuning_config"):
        est.fit(X, y, sample_weight=w_N)


@pytest.mark.parametrize(
    ("weights", "match"),
    [
        (np.ones(69), "69 weights for 70 rows"),
        (np.ones((70, 2)), "1-D array"),
        (np.r_[np.ones(69), np.nan], "NaN or infinite"),
        (np.r_[np.ones(69), np.inf], "NaN or infinite"),
        (np.r_[np.ones(69), -1.0], "negative"),
        (np.zeros(70), "every weight is zero"),
        (np.array(["a"] * 70), "must be numbers"),
        (0.0, "every weight is zero"),
    ],
)
def test_malformed_weights_are_refused_before_anything_is_loaded(weights, match):
    X, y, _, _ = _data("regressor")
    est = _estimator("regressor", model_path="no-such-file.ckpt")
    with pytest.raises(InvalidSampleWeightError, match=match):
        est.fit(X, y, sample_weight=weights)


def test_malformed_class_weights_are_refused():
    X, y, _, _ = _data("classifier")
    with pytest.raises(InvalidSampleWeightError, match="no class of y"):
        _estimator("classifier", class_weight={7: 2.0}).fit(X, y)
    with pytest.raises(InvalidSampleWeightError, match="class_weight must be"):
        _estimator("classifier", class_weight="uniform").fit(X, y)
    with pytest.raises(InvalidSampleWeightError, match="negative"):
        _estimator("classifier", class_weight={0: -1.0}).fit(X, y)


def test_the_callers_weights_are_never_modified():
    X, y, _, w_N = _data("classifier")
    given = w_N.copy()
    _estimator("classifier", class_weight="balanced").fit(X, y, sample_weight=given)
    np.testing.assert_array_equal(given, w_N)


@pytest.mark.parametrize("task", ["regressor", "classifier"])
def test_a_fit_state_replays_the_weights(task, tmp_path):
    X, y, X_test, w_N = _data(task)
    est = _estimator(task).fit(X, y, sample_weight=w_N)
    path = tmp_path / "fit.tabpfn_fit"
    est.save_fit_state(path)
    loaded = type(est).load_from_fit_state(path, device="cpu")
    np.testing.assert_array_equal(_outputs(task, loaded, X_test), _outputs(task, est, X_test))
    unweighted = _estimator(task).fit(X, y)
    assert np.abs(_outputs(task, loaded, X_test) - _outputs(task, unweighted, X_test)).max() > 0
