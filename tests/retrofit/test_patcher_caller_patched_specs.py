"""A ``ModelSpecs`` whose model the caller patched fits as the patch it carries.

``retrofit.patch(specs.model, ...)`` on a model tabpfn loaded, then
``OTabPFNRegressor(model_path=specs)``: the estimator keeps that patch (its
report, its settings) and predicts exactly what the estimator that patched a
fresh copy of the same weights with the same settings predicts (the same
models on the same code path, float32, CPU: bit-identical). A setting that
contradicts the carried patch is a one-line conflict; ``mode="none"`` runs the
model as given, as before.
Every host class as a classifier, v2.5, v2.6 and v3.5 as regressors (the
tiny ModelSpecs regressors there are), on tiny perturbed models.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrofit
from retrofit import OTabPFNClassifier, OTabPFNRegressor
from retrofit.errors import SettingsConflictError
from tests.helpers.tiny_hosts import TINY, tiny_classifier_specs, tiny_host_specs

CLASSIFIER_HOSTS = ("tabpfn_v2", "tabpfn_v2_5", "tabpfn_v2_6", "tabpfn_v3", "tabpfn_v3_5")
REGRESSOR_HOSTS = tuple(TINY)  # the tiny regressors as ModelSpecs
TAU = 0.5


def _data(classify: bool):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 3))
    y = X @ np.array([1.0, -2.0, 0.5]) + 0.1 * rng.normal(size=40)
    if classify:
        y = (y > 0).astype(int)
    return X[:30], y[:30], X[30:]


def _fit_predict(estimator_class, specs, classify: bool, **settings):
    X, y, X_test = _data(classify)
    est = estimator_class(
        model_path=specs,
        n_estimators=1,
        device="cpu",
        inference_precision=torch.float32,
        **settings,
    )
    est.fit(X, y)
    return est, (est.predict_proba(X_test) if classify else est.predict(X_test))


@pytest.mark.parametrize(
    ("classify", "name"),
    [(False, name) for name in REGRESSOR_HOSTS] + [(True, name) for name in CLASSIFIER_HOSTS],
)
def test_a_model_the_caller_patched_fits_and_predicts_as_its_patch(name, classify):
    estimator_class = OTabPFNClassifier if classify else OTabPFNRegressor
    specs_of = tiny_classifier_specs if classify else tiny_host_specs
    patched = specs_of(name, n_estimators=1)
    report = retrofit.patch(patched.model, "full-o", tau=TAU)
    est, got = _fit_predict(estimator_class, patched, classify)
    assert est.patch_report_.digest() == report.digest()
    assert est.settings_ == {"mode": "full-o", "tau": TAU, "support": "count", "eps_den": 1e-6}
    assert retrofit.is_patched(patched.model)  # the caller's patch, left in place
    _, expected = _fit_predict(
        estimator_class, specs_of(name, n_estimators=1), classify, mode="full-o", tau=TAU
    )
    np.testing.assert_array_equal(got, expected)
    _, unpatched = _fit_predict(
        estimator_class, specs_of(name, n_estimators=1), classify, mode="none"
    )
    assert not np.array_equal(got, unpatched)  # the patch changes the output


@pytest.mark.parametrize("name", ["tabpfn_v2_6", "tabpfn_v3_5"])
def test_a_setting_against_the_carried_patch_is_a_conflict_and_none_runs_it_as_given(name):
    patched = tiny_host_specs(name, n_estimators=1)
    retrofit.patch(patched.model, "full-o", tau=TAU)
    for settings in ({"mode": "oattention"}, {"tau": 2.0}):
        with pytest.raises(SettingsConflictError, match=r"patched already; unpatch it first"):
            _fit_predict(OTabPFNRegressor, patched, False, **settings)
    est, carried = _fit_predict(OTabPFNRegressor, patched, False, mode="full-o", tau=TAU)
    assert est.patch_report_.tau == TAU
    # mode="none" runs the model as given (as tabpfn runs a ModelSpecs): its patch still acts.
    plain, as_given = _fit_predict(OTabPFNRegressor, patched, False, mode="none")
    assert plain.patch_reports_ == [] and retrofit.is_patched(plain.models_[0])
    np.testing.assert_array_equal(as_given, carried)
