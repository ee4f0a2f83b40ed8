"""Every reshape transform of tabpfn, fitted on weighted rows, against the rows repeated.

For each name of ``get_all_reshape_feature_distribution_preprocessors`` (the
registry every preset draws from), the weighted fit on distinct rows with
integer weights is compared with tabpfn's fit on the rows repeated, float64:
the train rows' outputs (each weighted row repeated) and the test rows'.

* Order statistics and fixed functions (quantile transforms, squashing and
  robust scaling, log/exp, none): bit-identical.
* Power transforms (``power``, ``safepower``, their Box-Cox forms, the KDI
  stand-in): the lambda moves within the solver's bound
  (``test_power.py``), and the outputs with it: within ``POWER_OUTPUT_RTOL``
  (``tests/helpers/weighted_fits.py``, with what was measured).
* All weights 1: bit-identical to tabpfn's transformer, fitted by its own code.
"""

from __future__ import annotations

import pickle
import warnings

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.preprocessing import QuantileTransformer
from tabpfn.preprocessing.steps.reshape_feature_distribution_step import (
    get_all_reshape_feature_distribution_preprocessors,
)

from retrofit.errors import UnsupportedWeightingError
from retrofit.weighted_preprocessing import transformers
from retrofit.weighted_preprocessing.fitting import fitting_with
from retrofit.weighted_preprocessing.transformers import (
    WeightedAdaptiveQuantileTransformer,
    WeightedSimpleImputer,
    WeightedSquashingScaler,
    as_weighted,
)
from tests.helpers.weighted_fits import POWER_OUTPUT_RTOL

POSITIVE_ONLY = ("log", "power_box", "safepower_box", "kdi_alpha_0.3")
NAMES = sorted(
    name
    for name in get_all_reshape_feature_distribution_preprocessors(100, random_state=0)
    if name != "adaptive"  # tabpfn refuses it: "Adaptive preprocessing raw removed."
    and (not name.startswith("kdi_alpha") or name == "kdi_alpha_0.3")
)


def _data(seed: int, positive: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    n = 80
    X = np.column_stack(
        [
            rng.lognormal(size=n),
            rng.normal(size=n),
            rng.integers(0, 5, n).astype(np.float64),
            np.round(rng.standard_t(3, size=n), 1),
        ]
    )
    X[rng.random(X.shape) < 0.1] = np.nan
    X_test = rng.normal(size=(25, 4)) * 2
    if positive:
        X, X_test = np.abs(X) + 0.1, np.abs(X_test) + 0.1
    return X, X_test, rng.integers(1, 4, size=n).astype(np.float64)


def _fresh(name: str, n_examples: int):
    return get_all_reshape_feature_distribution_preprocessors(n_examples, random_state=0)[name]


def _quiet(function, *args):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return function(*args)


@pytest.mark.parametrize("name", NAMES)
def test_each_transform_fitted_on_integer_weights_is_its_fit_on_the_repeated_rows(name):
    X, X_test, w_N = _data(0, positive=name in POSITIVE_ONLY)
    repeated = np.repeat(X, w_N.astype(int), axis=0)
    n_examples = len(repeated)  # what tabpfn sizes its quantile grids by
    reference = _fresh(name, n_examples)
    expected = _quiet(reference.fit_transform, repeated)
    weighted = as_weighted(_fresh(name, n_examples))
    with fitting_with(w_N):
        got = _quiet(weighted.fit_transform, X)
    got_repeated = np.repeat(got, w_N.astype(int), axis=0)
    expected_test, got_test = reference.transform(X_test), weighted.transform(X_test)
    if "power" in name or "kdi" in name:  # a power transform: the lambda's bound
        for e, g in ((expected, got_repeated), (expected_test, got_test)):
            scale = max(1.0, np.nanmax(np.abs(e)))
            np.testing.assert_allclose(g, e, rtol=0, atol=POWER_OUTPUT_RTOL * scale)
    else:
        assert np.array_equal(got_repeated, expected, equal_nan=True)
        assert np.array_equal(got_test, expected_test, equal_nan=True)


@pytest.mark.parametrize("name", NAMES)
def test_unit_weights_fit_each_transform_as_tabpfn_does_bit_for_bit(name):
    X, X_test, _ = _data(1, positive=name in POSITIVE_ONLY)
    reference = _fresh(name, len(X))
    expected = _quiet(reference.fit_transform, X)
    weighted = as_weighted(_fresh(name, len(X)))
    with fitting_with(np.ones(len(X))):
        got = _quiet(weighted.fit_transform, X)
    assert np.array_equal(got, expected, equal_nan=True)
    assert np.array_equal(weighted.transform(X_test), reference.transform(X_test), equal_nan=True)


@pytest.mark.parametrize("name", ["quantile_uni", "squashing_scaler_default", "safepower"])
def test_a_real_weight_moves_the_fit(name):
    # The control: the weighted fit reads the weights (a changed weight changes it).
    X, X_test, w_N = _data(2, positive=False)
    a, b = as_weighted(_fresh(name, len(X))), as_weighted(_fresh(name, len(X)))
    with fitting_with(w_N):
        _quiet(a.fit, X)
    with fitting_with(w_N * np.linspace(0.5, 2.0, len(w_N))):
        _quiet(b.fit, X)
    assert not np.allclose(a.transform(X_test), b.transform(X_test), equal_nan=True)


def test_above_the_subsample_size_the_quantiles_are_those_of_every_weighted_row():
    # Defined rather than equal: tabpfn subsamples 100,000 of the repeated rows at
    # random; the weighted fit takes the exact quantiles of all of them.
    rng = np.random.default_rng(3)
    X = rng.normal(size=(60_000, 1))
    w_N = np.full(60_000, 2.0)
    weighted = WeightedAdaptiveQuantileTransformer(n_quantiles=1000, random_state=0)
    with fitting_with(w_N):
        weighted.fit(X)
    repeated = np.repeat(X, 2, axis=0)
    assert np.array_equal(
        weighted.quantiles_, np.nanpercentile(repeated, weighted.references_ * 100, axis=0)
    )


def test_the_fitted_weighted_transformers_pickle_and_clone_as_their_class():
    X, _, w_N = _data(4, positive=False)
    scaler = WeightedSquashingScaler()
    with fitting_with(w_N):
        scaler.fit(X)
    again = pickle.loads(pickle.dumps(scaler))
    assert np.array_equal(again.transform(X), scaler.transform(X), equal_nan=True)
    assert type(clone(scaler)) is WeightedSquashingScaler


def test_a_transformer_without_a_weighted_fit_is_refused_in_one_line():
    with pytest.raises(UnsupportedWeightingError, match="QuantileTransformer in the test") as err:
        as_weighted(QuantileTransformer(), where="the test")
    assert "\n" not in str(err.value)


def test_a_fit_that_sees_other_rows_than_the_weights_is_refused():
    with fitting_with(np.ones(5) * 2), pytest.raises(UnsupportedWeightingError, match="6 rows"):
        WeightedSquashingScaler().fit(np.ones((6, 1)))


def test_an_imputer_other_than_the_mean_is_refused():
    with fitting_with(np.full(4, 2.0)), pytest.raises(UnsupportedWeightingError, match="median"):
        WeightedSimpleImputer(strategy="median").fit(np.ones((4, 1)))


def test_the_kdi_transform_is_refused_where_kditransform_is_installed(monkeypatch):
    monkeypatch.setattr(transformers, "KDITransformer", object)
    weighted = as_weighted(_fresh("kdi", 10))
    with fitting_with(np.full(10, 2.0)), pytest.raises(UnsupportedWeightingError, match="KDI"):
        weighted.fit(np.random.default_rng(0).normal(size=(10, 2)))
