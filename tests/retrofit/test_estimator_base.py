"""What both estimators share (retrofit/estimator_base.py): pickles; settings "none" ignores.

* A fitted estimator pickles and joblib-dumps as tabpfn's does (the docs said
  only that the fit-state files hold no pickle, which read as if pickles were
  refused): the loaded estimator predicts the same bits, both estimators, a
  patched mode and ``"none"`` (tiny random v3, perturbed zero-inits, float32).
* ``mode="none"`` patches nothing, so a ``tau``, ``support`` or ``eps_den``
  given with it changes no number: the fit says so in one
  :class:`~retrofit.IgnoredSettingWarning`, and a grid over ``mode`` and
  ``tau`` runs, warning for its ``"none"`` cells only.
"""

from __future__ import annotations

import io
import pickle
import warnings

import joblib
import numpy as np
import pytest
import torch
from sklearn.model_selection import GridSearchCV

from retrofit import IgnoredSettingWarning, OTabPFNClassifier, OTabPFNRegressor
from tests.helpers.tiny_hosts import tiny_classifier_specs


def _table(n: int = 30, seed: int = 0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    return X, X @ np.array([1.0, -1.0, 0.5]) + 0.1 * rng.normal(size=n)


def _regressor(path, **params) -> OTabPFNRegressor:
    return OTabPFNRegressor(
        model_path=str(path),
        n_estimators=1,
        device="cpu",
        inference_precision=torch.float32,
        random_state=0,
        **params,
    )


def _joblib_round_trip(estimator):
    buffer = io.BytesIO()
    joblib.dump(estimator, buffer)
    buffer.seek(0)
    return joblib.load(buffer)


@pytest.mark.parametrize("mode", ["none", "full-o"])
def test_a_fitted_estimator_pickles_and_joblib_dumps_and_predicts_the_same_bits(tiny_v3_path, mode):
    X, y = _table()
    regressor = _regressor(tiny_v3_path, mode=mode).fit(X[:24], y[:24])
    classifier = OTabPFNClassifier(
        mode=mode,
        model_path=tiny_classifier_specs("tabpfn_v3", n_estimators=1),
        n_estimators=1,
        device="cpu",
        inference_precision=torch.float32,
        random_state=0,
    ).fit(X[:24], y[:24] > 0)
    for fitted, predict in ((regressor, "predict"), (classifier, "predict_proba")):
        want = getattr(fitted, predict)(X[24:])
        for loaded in (pickle.loads(pickle.dumps(fitted)), _joblib_round_trip(fitted)):
            assert type(loaded) is type(fitted)
            assert loaded.settings_ == fitted.settings_
            np.testing.assert_array_equal(getattr(loaded, predict)(X[24:]), want)
    if mode != "none":  # a real patch: the pickled estimator is not the host's
        plain = _regressor(tiny_v3_path, mode="none").fit(X[:24], y[:24])
        assert np.abs(plain.predict(X[24:]) - regressor.predict(X[24:])).max() > 1e-4


def test_settings_given_with_mode_none_warn_once_in_one_line_naming_them(tiny_v3_path):
    X, y = _table()
    with pytest.warns(
        IgnoredSettingWarning, match=r"tau=0\.5, eps_den=0\.001 has no effect"
    ) as got:
        _regressor(tiny_v3_path, mode="none", tau=0.5, eps_den=1e-3).fit(X, y)
    assert len(got) == 1 and "\n" not in str(got[0].message)
    with warnings.catch_warnings():
        warnings.simplefilter("error", IgnoredSettingWarning)
        _regressor(tiny_v3_path, mode="none").fit(X, y)  # nothing given: nothing to say
        _regressor(tiny_v3_path, mode="full-o", tau=0.5).fit(X, y)  # used


def test_a_grid_over_mode_and_tau_runs_and_warns_for_its_none_cells_only(tiny_v3_path):
    X, y = _table()
    grid = GridSearchCV(
        _regressor(tiny_v3_path),
        {"mode": ["none", "full-o"], "tau": [0.5, 2.0]},
        cv=2,
        scoring="neg_mean_squared_error",
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        grid.fit(X, y)
    ignored = [w for w in caught if issubclass(w.category, IgnoredSettingWarning)]
    assert {str(w.message).split(" has no effect")[0] for w in ignored} == {
        "OTabPFNRegressor: tau=0.5",
        "OTabPFNRegressor: tau=2.0",
    }
    scores = grid.cv_results_["mean_test_score"]
    assert np.isfinite(scores).all() and len(scores) == 4
    # The two "none" cells fit the same unpatched host: one score; the patched ones differ.
    params = grid.cv_results_["params"]
    none = [s for s, p in zip(scores, params, strict=True) if p["mode"] == "none"]
    full_o = [s for s, p in zip(scores, params, strict=True) if p["mode"] == "full-o"]
    assert none[0] == none[1] and full_o[0] != full_o[1]
