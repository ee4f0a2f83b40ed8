"""The whole preprocessing of each preset, weighted against the rows repeated.

tabpfn's estimator fits the embedded host (``fit_mode="low_memory"``: the
members are fitted when asked) with each preset's inference config: tabpfn
9.2's in-code defaults for v2 and v2.5 (``InferenceConfig.get_default``) and
the embedded hosts' own, for both tasks. tabpfn 9.2 has no in-code default
for v2.6, v3 or v3.5: theirs ship inside the published checkpoints, so every
transform they can name is tested step by step instead (``test_steps.py``,
``test_transformers.py``). The data hold numeric columns with NaN, numeric
and string categoricals (with missing values), ties and a target; 70
distinct rows of weights 1 to 3 (``sum w`` above tabpfn's 100-row
categorical rule, the rows held below it).

The weighted fit (the rows held, the categorical threshold of
:func:`categorical_inference_threshold`, :func:`weighted_ensemble_preprocessor`)
is compared with tabpfn's fit on the table repeated, member by member: train
rows (each weighted row repeated by its member's weights), targets, cleaned
test rows, the outlier clipping. Bit-identical where the member's transforms
are order statistics (``squashing_scaler``, ``quantile_*``, ``none``);
within ``SVD_RTOL`` with SVD features; within ``POWER_OUTPUT_RTOL`` with a
power transform (the regressor's ``safepower`` target transform too); the
standardised targets to ``SUM_ULPS`` (the bounds and what was measured:
``tests/helpers/weighted_fits.py``). Fingerprints (on in v2 and v2.5) are
compared on each weighted row's first copy where the member's other columns
are bit-identical (elsewhere they hash values equal to the bound only, so
nothing is promised).
"""

from __future__ import annotations

import pickle
import warnings

import numpy as np
import pytest
import torch

from retrofit.errors import UnsupportedWeightingError
from retrofit.weighted_preprocessing import (
    WeightedEnsembleMember,
    categorical_inference_threshold,
    drop_zero_weight_rows,
    weighted_ensemble_preprocessor,
)
from tests.helpers.weighted_fits import (
    POWER_OUTPUT_RTOL,
    PRESETS,
    SUM_ULPS,
    SVD_RTOL,
    cleaned_test_rows,
    mixed_table,
    preset_config,
    repeat_rows,
    tabpfn_fit,
    weighted_members,
)

EPS = float(np.finfo(np.float64).eps)
TASKS = ("classifier", "regressor")
#: The presets with a member that is exact and has a fingerprint: the v2 and v2.5
#: classifiers' "none" members, the v2.5 regressor's "quantile_uni_coarse" ones.
FINGERPRINTS_COMPARED = {("classifier", "v2"), ("classifier", "v2.5"), ("regressor", "v2.5")}


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def _member_bound(member) -> float:
    """The allowed deviation of a member's features, relative to their scale (0: bit-identical)."""
    config = member.config.preprocess_config
    if "power" in config.name or "kdi" in config.name:
        return POWER_OUTPUT_RTOL
    if config.global_transformer_name not in (None, "None"):
        return SVD_RTOL
    return 0.0


def _fingerprint_columns(member) -> list[int]:
    return [
        j for j, f in enumerate(member.feature_schema.features) if f.name.startswith("fingerprint")
    ]


def _compare_features(expected: np.ndarray, got: np.ndarray, bound: float, skip: list[int]):
    keep = [j for j in range(expected.shape[1]) if j not in skip]
    e, g = expected[:, keep], got[:, keep]
    if bound == 0.0:
        assert np.array_equal(g, e, equal_nan=True)
    else:
        assert np.array_equal(np.isnan(g), np.isnan(e))
        scale = max(1.0, float(np.nanmax(np.abs(e))))
        np.testing.assert_allclose(g, e, rtol=0, atol=bound * scale)


def _repeated_fit(task, config, X, y, w_N):
    estimator = tabpfn_fit(task, config, repeat_rows(X, w_N), repeat_rows(y, w_N))
    members = estimator.ensemble_preprocessor_.fit_transform_ensemble_members(
        estimator.executor_.X_train, estimator.executor_.y_train
    )
    return estimator, members


@pytest.mark.parametrize("version", PRESETS)
@pytest.mark.parametrize("task", TASKS)
def test_each_preset_weighted_is_its_fit_on_the_repeated_rows(task, version):
    config = preset_config(version, task)
    X, y = mixed_table(70, 0, task=task)
    w_N = np.random.default_rng(1).integers(1, 4, size=70).astype(np.float64)
    X_test, _ = mixed_table(15, 5, task=task)
    repeated, expected_members = _repeated_fit(task, config, X, y, w_N)
    weighted, _, members, _ = weighted_members(task, config, X, y, w_N)
    assert weighted.inferred_feature_schema_ == repeated.inferred_feature_schema_
    test_rep, test_w = cleaned_test_rows(repeated, X_test), cleaned_test_rows(weighted, X_test)
    exact_members = 0
    for expected, member in zip(expected_members, members, strict=True):
        assert isinstance(member, WeightedEnsembleMember)
        copies = member.row_weights.astype(int)
        got = np.repeat(member.X_train, copies, axis=0)
        bound, fingerprint = _member_bound(member), _fingerprint_columns(member)
        _compare_features(expected.X_train, got, bound, fingerprint)
        _compare_features(
            expected.transform_X_test(test_rep), member.transform_X_test(test_w), bound, fingerprint
        )
        if bound == 0.0 and fingerprint:
            exact_members += 1
            first = np.concatenate([[0], np.cumsum(copies)[:-1]])
            assert np.array_equal(
                got[first][:, fingerprint], expected.X_train[first][:, fingerprint]
            )
        y_got = np.repeat(member.y_train, copies)
        if task == "classifier":
            assert np.array_equal(y_got, expected.y_train)
        else:
            transformed = member.config.target_transform is not None
            atol = POWER_OUTPUT_RTOL if transformed else SUM_ULPS * EPS
            scale = max(1.0, float(np.abs(expected.y_train).max()))
            np.testing.assert_allclose(y_got, expected.y_train, rtol=0, atol=atol * scale)
        _compare_clipping(expected, member, test_rep, test_w, copies)
    # Where a member's transforms are exact and it has a fingerprint, it was compared.
    assert (exact_members > 0) == ((task, version) in FINGERPRINTS_COMPARED)


def _compare_clipping(expected, member, test_rep, test_w, copies):
    """The members' outlier clipping (tabpfn's device step) on train and test rows."""
    if expected.gpu_preprocessor is None:
        assert member.gpu_preprocessor is None
        return
    rows = np.concatenate([expected.X_train, expected.transform_X_test(test_rep)])
    rows_w = np.concatenate([member.X_train, member.transform_X_test(test_w)])
    out = expected.gpu_preprocessor(
        torch.as_tensor(rows), expected.feature_schema, num_train_rows=len(expected.X_train)
    ).x.numpy()
    out_w = member.gpu_preprocessor(
        torch.as_tensor(rows_w), member.feature_schema, num_train_rows=len(member.X_train)
    ).x.numpy()
    n_train = len(member.X_train)
    got = np.concatenate([np.repeat(out_w[:n_train], copies, axis=0), out_w[n_train:]])
    bound = max(_member_bound(member), SUM_ULPS * EPS)
    _compare_features(out, got, bound, _fingerprint_columns(member))


@pytest.mark.parametrize("version", PRESETS)
@pytest.mark.parametrize("task", TASKS)
def test_unit_weights_fit_each_presets_members_as_tabpfn_does_bit_for_bit(task, version):
    config = preset_config(version, task)
    X, y = mixed_table(60, 2, task=task)
    X_test, _ = mixed_table(10, 3, task=task)
    estimator = tabpfn_fit(task, config, X, y)
    X_train, y_train = estimator.executor_.X_train, estimator.executor_.y_train
    expected = estimator.ensemble_preprocessor_.fit_transform_ensemble_members(X_train, y_train)
    estimator = tabpfn_fit(task, config, X, y)  # fresh configs: tabpfn fits them in place
    weighted = weighted_ensemble_preprocessor(
        estimator.ensemble_preprocessor_,
        np.ones(len(X_train)),
        inference_config=estimator.inference_config_,
        task_type=task,
        X_train=X_train,
        y_train=y_train,
    )
    test = cleaned_test_rows(estimator, X_test)
    for theirs, ours in zip(
        expected, weighted.fit_transform_ensemble_members(X_train, y_train), strict=True
    ):
        assert np.array_equal(ours.X_train, theirs.X_train, equal_nan=True)
        assert np.array_equal(ours.y_train, theirs.y_train)
        assert ours.feature_schema == theirs.feature_schema
        assert np.array_equal(
            ours.transform_X_test(test), theirs.transform_X_test(test), equal_nan=True
        )


def test_weight_zero_is_removal():
    task, config = "regressor", preset_config("v2.5", "regressor")
    X, y = mixed_table(60, 4, task=task)
    w_N = np.where(np.arange(60) % 4 == 0, 0.0, 1.0)
    X_kept, y_kept, w_kept = drop_zero_weight_rows(X, y, w_N)
    removed = tabpfn_fit(task, config, X[w_N > 0], y[w_N > 0])
    expected = removed.ensemble_preprocessor_.fit_transform_ensemble_members(
        removed.executor_.X_train, removed.executor_.y_train
    )
    _, _, members, _ = weighted_members(task, config, X_kept, y_kept, w_kept)
    for theirs, ours in zip(expected, members, strict=True):
        assert np.array_equal(ours.X_train, theirs.X_train, equal_nan=True)
        assert ours.feature_schema == theirs.feature_schema


def test_the_categorical_rule_needs_the_weighted_count():
    # The control of the threshold: counting the rows held (70 < 100) infers no
    # categorical column where the repeated rows (about 140) do.
    config = preset_config("v2.5", "classifier")
    X, y = mixed_table(70, 0, task="classifier")
    w_N = np.random.default_rng(1).integers(1, 4, size=70).astype(np.float64)
    repeated = tabpfn_fit("classifier", config, repeat_rows(X, w_N), repeat_rows(y, w_N))
    held = tabpfn_fit("classifier", config, X, y)
    assert held.inferred_feature_schema_ != repeated.inferred_feature_schema_
    assert categorical_inference_threshold(w_N, 100) < len(X)


@pytest.mark.parametrize("task", TASKS)
def test_subsampled_rows_are_drawn_from_the_weighted_multiset_as_from_the_repeated_rows(task):
    config = preset_config("embedded", task)
    X, y = mixed_table(70, 6, task=task)
    w_N = np.random.default_rng(2).integers(1, 4, size=70).astype(np.float64)
    settings = {"SUBSAMPLE_SAMPLES": 60}
    repeated = tabpfn_fit(task, config, repeat_rows(X, w_N), repeat_rows(y, w_N), **settings)
    expected = repeated.ensemble_preprocessor_.fit_transform_ensemble_members(
        repeated.executor_.X_train, repeated.executor_.y_train
    )
    config = preset_config("embedded", task)
    config.SUBSAMPLE_SAMPLES = 60
    _, weighted, members, _ = weighted_members(task, config, X, y, w_N)
    assert weighted.repeated_rows is not None
    for theirs, ours in zip(expected, members, strict=True):
        assert ours.row_weights.sum() == len(theirs.X_train) == 60
        got = np.repeat(ours.X_train, ours.row_weights.astype(int), axis=0)
        # The same draws; the weighted member lists them by row (adjacent copies).
        order = np.lexsort(theirs.X_train.T[::-1])
        assert np.array_equal(got[np.lexsort(got.T[::-1])], theirs.X_train[order], equal_nan=True)


def _weighted(task, config, w_N, **settings):
    X, y = mixed_table(len(w_N), 7, task=task)
    for name, value in settings.items():
        setattr(config, name, value)
    return weighted_members(task, config, X, y, w_N)


@pytest.mark.parametrize(
    ("settings", "task", "message"),
    [
        ({"SUBSAMPLE_SAMPLES": 40}, "regressor", "integer weights"),
        ({"SUBSAMPLE_SAMPLES": [np.arange(10)]}, "regressor", "index lists"),
        ({"ENABLE_GPU_PREPROCESSING": True}, "classifier", "GPU preprocessing"),
        (
            {"FEATURE_SUBSAMPLING_METHOD": "gini_feature_importance"},
            "classifier",
            "feature-importance",
        ),
        ({"REGRESSION_Y_PREPROCESS_TRANSFORMS": ("quantile_uni",)}, "regressor", "quantile target"),
    ],
)
def test_settings_the_weights_cannot_apply_to_are_refused_in_one_line(settings, task, message):
    config = preset_config("embedded", task)
    if "FEATURE_SUBSAMPLING_METHOD" in settings:
        # Importance ranking needs more features than a member takes.
        config.PREPROCESS_TRANSFORMS = [
            type(p)(**{**p.__dict__, "max_features_per_estimator": 3})
            for p in config.PREPROCESS_TRANSFORMS
        ]
        settings = {**settings, "FEATURE_SUBSAMPLING_IMPORTANCE_TOP_K_COUNT": 2}
    w_N = np.linspace(1.0, 2.5, 50)
    with pytest.raises(UnsupportedWeightingError, match=message) as err:
        _weighted(task, config, w_N, **settings)
    assert "\n" not in str(err.value)


def test_members_fitted_in_parallel_threads_are_the_members_fitted_in_turn():
    config = preset_config("v2", "regressor")
    X, y = mixed_table(50, 8, task="regressor")
    w_N = np.random.default_rng(3).integers(1, 4, size=50).astype(np.float64)
    estimator, weighted, members, y_train = weighted_members("regressor", config, X, y, w_N)
    weighted.n_preprocessing_jobs = 2
    X_train = estimator.executor_.X_train
    again = list(weighted.fit_transform_ensemble_members_iterator(X_train, y_train, "in-order"))
    for a, b in zip(members, again, strict=True):
        assert np.array_equal(a.X_train, b.X_train, equal_nan=True)


def test_a_fitted_weighted_ensemble_pickles_with_its_members():
    config = preset_config("v2.5", "classifier")
    X, y = mixed_table(40, 9, task="classifier")
    w_N = np.random.default_rng(4).integers(1, 4, size=40).astype(np.float64)
    estimator, weighted, members, _ = weighted_members("classifier", config, X, y, w_N)
    test = cleaned_test_rows(estimator, mixed_table(8, 10, task="classifier")[0])
    again = pickle.loads(pickle.dumps((weighted, members)))
    for ours, theirs in zip(again[1], members, strict=True):
        assert np.array_equal(ours.row_weights, theirs.row_weights)
        assert np.array_equal(
            ours.transform_X_test(test), theirs.transform_X_test(test), equal_nan=True
        )


def _narrow(config, width: int):
    """``config`` with each member limited to ``width`` features (feature subsampling on)."""
    config.PREPROCESS_TRANSFORMS = [
        type(p)(**{**p.__dict__, "max_features_per_estimator": width})
        for p in config.PREPROCESS_TRANSFORMS
    ]
    return config


SETTINGS = {
    "balanced features": ("regressor", {"FEATURE_SUBSAMPLING_METHOD": "balanced"}, 4),
    "random features": ("classifier", {"FEATURE_SUBSAMPLING_METHOD": "random"}, 4),
    "constant and balanced": (
        "regressor",
        {
            "FEATURE_SUBSAMPLING_METHOD": "constant_and_balanced",
            "FEATURE_SUBSAMPLING_CONSTANT_FEATURE_COUNT": 2,
        },
        4,
    ),
    "auto features": ("classifier", {"FEATURE_SUBSAMPLING_METHOD": "auto"}, 4),
    "stratified rows": (
        "classifier",
        {"SUBSAMPLE_SAMPLES": 0.5, "SAMPLE_SUBSAMPLING_METHOD": "stratified"},
        None,
    ),
    "majority downsampled rows": (
        "classifier",
        {"SUBSAMPLE_SAMPLES": 120, "SAMPLE_SUBSAMPLING_METHOD": "majority_downsample"},
        None,
    ),
    "infinities passed through": ("regressor", {"PASSTHROUGH_INF": True}, None),
}


@pytest.mark.parametrize("name", sorted(SETTINGS))
def test_settings_beyond_the_presets_weighted_are_the_repeated_rows_bit_for_bit(name):
    # The embedded config's transform is exact, so every member must be bit-identical.
    task, settings, width = SETTINGS[name]
    X, y = mixed_table(70, 11, task=task)
    if settings.get("PASSTHROUGH_INF"):
        X.loc[[3, 9], "heavy"] = [np.inf, -np.inf]
    w_N = np.random.default_rng(5).integers(1, 4, size=70).astype(np.float64)

    def config():
        base = preset_config("embedded", task)
        for key, value in settings.items():
            setattr(base, key, value)
        return _narrow(base, width) if width else base

    repeated = tabpfn_fit(task, config(), repeat_rows(X, w_N), repeat_rows(y, w_N))
    expected = repeated.ensemble_preprocessor_.fit_transform_ensemble_members(
        repeated.executor_.X_train, repeated.executor_.y_train
    )
    _, _, members, _ = weighted_members(task, config(), X, y, w_N)
    for theirs, ours in zip(expected, members, strict=True):
        assert np.array_equal(ours.feature_indices, theirs.feature_indices)
        got = np.repeat(ours.X_train, ours.row_weights.astype(int), axis=0)
        order_e, order_g = np.lexsort(theirs.X_train.T[::-1]), np.lexsort(got.T[::-1])
        assert np.array_equal(got[order_g], theirs.X_train[order_e], equal_nan=True)
