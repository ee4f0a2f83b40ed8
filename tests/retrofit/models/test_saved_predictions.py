"""A saved retrofit predicts what its base with the same settings predicts, bit for bit.

The adapter holds no weight: loading it loads the base file itself and patches
it with the recorded settings, so an estimator given the adapter and one given
the base plus those settings run the same model through the same computation
(float32, one estimator, same seed): the predictions are compared with
``np.array_equal``. Each case also shows the settings matter (the unpatched
base predicts otherwise). On the embedded regressor and classifier and on a
tiny random v2.6 host saved as a checkpoint file.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from retrofit.classifier import OTabPFNClassifier
from retrofit.models.saved.save import save_patched
from retrofit.regressor import OTabPFNRegressor
from tests.helpers.tiny_hosts import save_tiny_host_checkpoint

SETTINGS = {"mode": "oattention", "tau": 0.5, "support": "mass", "eps_den": 1e-4}

rng = np.random.default_rng(0)
X = rng.normal(size=(48, 4))
Y_REGRESSION = X @ np.array([1.0, -2.0, 0.5, 0.0]) + 0.1 * rng.normal(size=48)
Y_CLASSES = (X[:, 0] + X[:, 1] > 0).astype(int) + (X[:, 2] > 1).astype(int)


def _predictions(estimator_class, model_path, **settings) -> np.ndarray:
    estimator = estimator_class(
        model_path=model_path,
        n_estimators=1,
        device="cpu",
        random_state=0,
        inference_precision=torch.float32,
        **settings,
    )
    if estimator_class is OTabPFNClassifier:
        estimator.fit(X[:36], Y_CLASSES[:36])
        return estimator.predict_proba(X[36:])
    estimator.fit(X[:36], Y_REGRESSION[:36])
    return estimator.predict(X[36:], output_type="quantiles", quantiles=[0.1, 0.5, 0.9])


def _assert_adapter_is_base_plus_settings(estimator_class, base, out, which) -> None:
    saved = save_patched(base, out, which=which, **SETTINGS)
    assert saved.settings.to_dict() == SETTINGS
    from_adapter = np.asarray(_predictions(estimator_class, str(out)))
    direct = np.asarray(_predictions(estimator_class, base, **SETTINGS))
    assert from_adapter.dtype == direct.dtype and np.isfinite(from_adapter).all()
    assert np.array_equal(from_adapter, direct)
    unpatched = np.asarray(_predictions(estimator_class, base, mode="none"))
    assert not np.allclose(from_adapter, unpatched, rtol=0, atol=1e-6)


def test_an_adapter_of_the_embedded_regressor_predicts_its_base_with_the_settings(tmp_path):
    _assert_adapter_is_base_plus_settings(OTabPFNRegressor, "embedded", tmp_path / "a", "regressor")


def test_an_adapter_of_the_embedded_classifier_predicts_its_base_with_the_settings(tmp_path):
    _assert_adapter_is_base_plus_settings(
        OTabPFNClassifier, "embedded", tmp_path / "a", "classifier"
    )


@pytest.mark.parametrize("name", ["tabpfn_v2_6", "tabpfn_v3_5"])
def test_an_adapter_of_a_tiny_checkpoint_file_predicts_its_base_with_the_settings(tmp_path, name):
    version = name.removeprefix("tabpfn_").replace("_", ".")
    base = save_tiny_host_checkpoint(name, tmp_path / f"tiny-{version}-regressor.safetensors")
    _assert_adapter_is_base_plus_settings(OTabPFNRegressor, str(base), tmp_path / "a", "regressor")
