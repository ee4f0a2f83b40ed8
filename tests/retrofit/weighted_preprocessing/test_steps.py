"""tabpfn's preprocessing steps fitted on weighted rows, against the rows repeated.

Each step (a one-step ``PreprocessingPipeline``, as tabpfn runs it) is fitted
on distinct rows with integer weights and, by tabpfn's own code, on the rows
repeated; float64. Compared: the train rows' outputs (each weighted row
repeated) and the test rows'. Bit-identical where the step's statistics are
counts, sets or order statistics; the SVD features within ``SVD_RTOL`` and
the polynomial features' standardiser (a mean and a variance) within
``SUM_ULPS`` (both stated in ``tests/helpers/weighted_fits.py``). The
fingerprint is defined, not equal: a weighted row gets its first copy's.
All weights 1: every weighted step is tabpfn's bit for bit.
"""

from __future__ import annotations

import copy
import warnings

import numpy as np
import pytest
from tabpfn.preprocessing.datamodel import FeatureSchema
from tabpfn.preprocessing.pipeline_interface import PreprocessingPipeline
from tabpfn.preprocessing.steps import (
    AddFingerprintFeaturesStep,
    AddSVDFeaturesStep,
    DifferentiableZNormStep,
    EncodeCategoricalFeaturesStep,
    NanHandlingPolynomialFeaturesStep,
    RemoveConstantFeaturesStep,
    ReshapeFeatureDistributionsStep,
    ShuffleFeaturesStep,
)

from retrofit.errors import UnsupportedWeightingError
from retrofit.weighted_preprocessing.fitting import fitting_with
from retrofit.weighted_preprocessing.steps import weighted_pipeline
from tests.helpers.weighted_fits import SUM_ULPS, SVD_RTOL

EPS = float(np.finfo(np.float64).eps)


def _table(seed: int, n_rows: int = 60) -> tuple[np.ndarray, FeatureSchema, np.ndarray]:
    """Three numeric columns (NaN in one), two categorical codes, one constant column."""
    rng = np.random.default_rng(seed)
    X = np.column_stack(
        [
            rng.lognormal(size=n_rows),
            rng.normal(size=n_rows),
            rng.standard_t(3, size=n_rows),
            rng.integers(0, 3, n_rows).astype(np.float64),
            rng.integers(0, 6, n_rows).astype(np.float64),
            np.full(n_rows, 2.0),
        ]
    )
    X[rng.random(n_rows) < 0.1, 1] = np.nan
    return X, FeatureSchema.from_only_categorical_indices([3, 4], X.shape[1]), rng


def _weighted_and_repeated(step, X, schema, w_N, X_test):
    """(repeated fit's train, weighted fit's train repeated, their test outputs)."""
    reference = PreprocessingPipeline([step])
    weighted = weighted_pipeline(PreprocessingPipeline([copy.deepcopy(step)]))
    repeated = np.repeat(X, w_N.astype(int), axis=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = reference.fit_transform(repeated, schema).X
        with fitting_with(w_N):
            got = weighted.fit_transform(X, schema).X
        return (
            expected,
            np.repeat(got, w_N.astype(int), axis=0),
            reference.transform(X_test).X,
            weighted.transform(X_test).X,
        )


def _assert_identical(results):
    expected, got, expected_test, got_test = results
    assert np.array_equal(got, expected, equal_nan=True)
    assert np.array_equal(got_test, expected_test, equal_nan=True)


EXACT_STEPS = {
    "remove_constant": lambda: RemoveConstantFeaturesStep(),
    "shuffle": lambda: ShuffleFeaturesStep(shuffle_method="shuffle", random_state=3),
    "reshape_squashing": lambda: ReshapeFeatureDistributionsStep(
        transform_name="squashing_scaler_default", append_to_original=True, random_state=0
    ),
    "reshape_quantile_with_categoricals": lambda: ReshapeFeatureDistributionsStep(
        transform_name="quantile_uni", apply_to_categorical=True, random_state=0
    ),
    "reshape_robust": lambda: ReshapeFeatureDistributionsStep(
        transform_name="robust", append_to_original="auto", random_state=0
    ),
    "ordinal_shuffled": lambda: EncodeCategoricalFeaturesStep("ordinal_shuffled", random_state=1),
    "ordinal_very_common": lambda: EncodeCategoricalFeaturesStep(
        "ordinal_very_common_categories_shuffled", random_state=1
    ),
    "ordinal_common": lambda: EncodeCategoricalFeaturesStep(
        "ordinal_common_categories", random_state=1
    ),
    "onehot": lambda: EncodeCategoricalFeaturesStep("onehot", random_state=1),
    "onehot_capped": lambda: EncodeCategoricalFeaturesStep(
        "onehot", random_state=1, max_onehot_cardinality=3
    ),
}


@pytest.mark.parametrize("name", sorted(EXACT_STEPS))
def test_each_count_and_order_statistic_step_weighted_is_the_repeated_rows_bit_for_bit(name):
    X, schema, rng = _table(0)
    w_N = rng.integers(1, 5, size=len(X)).astype(np.float64)
    X_test = _table(1, 20)[0]
    _assert_identical(_weighted_and_repeated(EXACT_STEPS[name](), X, schema, w_N, X_test))


@pytest.mark.parametrize("name", sorted(EXACT_STEPS))
def test_each_step_at_unit_weights_is_tabpfns_bit_for_bit(name):
    X, schema, _ = _table(2)
    X_test = _table(3, 20)[0]
    _assert_identical(
        _weighted_and_repeated(EXACT_STEPS[name](), X, schema, np.ones(len(X)), X_test)
    )


def test_the_common_category_rules_count_the_weighted_rows():
    # Each category of column 3 has fewer than 10 distinct rows and more than 10
    # weighted ones: the repeated rows encode the column, and so must the weights;
    # an unweighted fit on the distinct rows would leave it unencoded (the control).
    X, schema, _ = _table(4, n_rows=24)
    w_N = np.full(len(X), 4.0)
    X_test = _table(5, 10)[0]
    for encoding in ("ordinal_common_categories", "ordinal_very_common_categories_shuffled"):
        step = EncodeCategoricalFeaturesStep(encoding, random_state=1)
        results = _weighted_and_repeated(step, X, schema, w_N, X_test)
        _assert_identical(results)
        unweighted = PreprocessingPipeline([copy.deepcopy(step)])
        unweighted.fit_transform(X, schema)
        assert not np.array_equal(unweighted.transform(X_test).X, results[3], equal_nan=True)


def test_one_hot_is_skipped_where_the_repeated_rows_pass_its_size_guard():
    # 2,000 distinct rows of 4 one-hot columns and 3 others stay under tabpfn's
    # 1,000,000 cells; repeated 100 times they pass it and tabpfn encodes nothing.
    rng = np.random.default_rng(6)
    X = np.column_stack([rng.integers(0, 5, 2000), rng.normal(size=(2000, 2))]).astype(float)
    schema = FeatureSchema.from_only_categorical_indices([0], 3)
    w_N = np.full(2000, 100.0)
    step = EncodeCategoricalFeaturesStep("onehot", random_state=0)
    expected, got, expected_test, got_test = _weighted_and_repeated(step, X, schema, w_N, X[:5])
    assert expected.shape[1] == 3  # tabpfn's guard: no encoding
    assert np.array_equal(got, expected) and np.array_equal(got_test, expected_test)


def test_svd_features_of_the_weighted_rows_are_the_repeated_rows_within_the_bound():
    worst = 0.0
    for seed in range(6):
        X, schema, rng = _table(10 + seed, n_rows=80)
        X = np.nan_to_num(X)
        w_N = rng.integers(1, 5, size=len(X)).astype(np.float64)
        X_test = _table(20 + seed, 20)[0]
        for name in ("svd", "svd_quarter_components"):
            step = AddSVDFeaturesStep(global_transformer_name=name, random_state=0)
            expected, got, expected_test, got_test = _weighted_and_repeated(
                step, X, schema, w_N, np.nan_to_num(X_test)
            )
            assert got.shape == expected.shape  # components sized by sum w, as repeated
            for e, g in ((expected, got), (expected_test, got_test)):
                worst = max(worst, np.max(np.abs(e - g)) / max(1.0, np.max(np.abs(e))))
    assert worst <= SVD_RTOL


def test_svd_components_beyond_the_distinct_rows_are_fitted_without_error():
    # Defined: past the rank of the distinct rows the components are arbitrary
    # null-space directions, for the repeated rows too; ARPACK gets zero rows.
    rng = np.random.default_rng(7)
    X = rng.normal(size=(8, 40))
    schema = FeatureSchema.from_only_categorical_indices([], 40)
    pipeline = weighted_pipeline(
        PreprocessingPipeline([AddSVDFeaturesStep(global_transformer_name="svd", random_state=0)])
    )
    with fitting_with(np.full(8, 30.0)):
        out = pipeline.fit_transform(X, schema).X
    assert out.shape == (8, 40 + 20)  # min(240 // 10 + 1, 40 // 2) components, from sum w


def test_polynomial_features_of_the_weighted_rows_are_the_repeated_rows_to_rounding():
    X, schema, rng = _table(8)
    X = np.nan_to_num(X)
    w_N = rng.integers(1, 5, size=len(X)).astype(np.float64)
    step = NanHandlingPolynomialFeaturesStep(max_features=6, random_state=0)
    for e, g in zip(*[iter(_weighted_and_repeated(step, X, schema, w_N, X[:7]))] * 2, strict=True):
        np.testing.assert_allclose(g, e, rtol=0, atol=SUM_ULPS * EPS * max(1.0, np.abs(e).max()))


def test_a_weighted_row_gets_the_fingerprint_of_its_first_copy():
    X, schema, rng = _table(9)
    w_N = rng.integers(1, 5, size=len(X)).astype(np.float64)
    expected, got, expected_test, got_test = _weighted_and_repeated(
        AddFingerprintFeaturesStep(), X, schema, w_N, X[:6]
    )
    first_copy = np.concatenate([[0], np.cumsum(w_N.astype(int))[:-1]])
    weighted_rows = got[first_copy]  # got is each weighted row repeated
    assert np.array_equal(weighted_rows, expected[first_copy], equal_nan=True)
    assert np.array_equal(got_test, expected_test, equal_nan=True)  # same salt at predict
    # The repeated table's other copies carry other fingerprints: defined, not equal.
    assert not np.array_equal(got[:, -1], expected[:, -1])


def test_a_step_without_a_weighted_fit_is_refused_in_one_line():
    with pytest.raises(UnsupportedWeightingError, match="DifferentiableZNormStep") as err:
        weighted_pipeline(PreprocessingPipeline([DifferentiableZNormStep()]))
    assert "\n" not in str(err.value)
