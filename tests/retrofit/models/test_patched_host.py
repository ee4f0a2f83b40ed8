"""An estimator loads, verifies and patches its host once, and never lets tabpfn change it.

:mod:`retrofit.models.patched_host` on tiny perturbed v3 checkpoints: refits
reuse the patched host; a rewritten file, ``set_params`` of a setting or of
``model_path``, and any in-place change to the host load it again; a forced
cast goes to a copy of the fit's own; predictions are bit-identical to the
path that loads and patches at every fit (same shapes, same process).
"""

from __future__ import annotations

import copy
import os
import pickle
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from sklearn.base import clone
from tabpfn import ModelSpecs, TabPFNRegressor

import retrofit.files
import retrofit.models.patched_host as patched_host
import retrofit.patcher
from retrofit import OTabPFNRegressor
from retrofit.errors import SettingsConflictError
from retrofit.models.saved.save import save_patched
from retrofit.settings import resolve_settings, resolved_mode
from tests.helpers.tiny_models import tiny_v3_checkpoint


def _est(path: Path | str, **kwargs) -> OTabPFNRegressor:
    params = {
        "model_path": str(path),
        "n_estimators": 2,
        "device": "cpu",
        "inference_precision": torch.float32,
    }
    return OTabPFNRegressor(**{**params, **kwargs})


def _data(n: int = 50, d: int = 3, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = X @ rng.normal(size=d) + 0.1 * rng.normal(size=n)
    return X[:35], y[:35], X[35:]


def _fit_predict(est: OTabPFNRegressor, seed: int = 0) -> np.ndarray:
    X, y, X_test = _data(seed=seed)
    return est.fit(X, y).predict(X_test)


@pytest.fixture
def calls(monkeypatch) -> Counter:
    """Counts host loads, patches and file hashes."""
    counts: Counter = Counter()

    def counting(name, fn):
        def wrapped(*args, **kwargs):
            counts[name] += 1
            return fn(*args, **kwargs)

        return wrapped

    monkeypatch.setattr(
        patched_host,
        "initialize_tabpfn_model",
        counting("load", patched_host.initialize_tabpfn_model),
    )
    monkeypatch.setattr(
        retrofit.patcher,
        "patch_with_settings",
        counting("patch", retrofit.patcher.patch_with_settings),
    )
    monkeypatch.setattr(retrofit.files, "sha256_file", counting("hash", retrofit.files.sha256_file))
    return counts


@pytest.fixture
def checkpoint(tmp_path) -> Path:
    return tiny_v3_checkpoint(tmp_path / "ckpt", seed=3)


def test_refits_load_verify_and_patch_a_saved_host_once(tmp_path, checkpoint, calls):
    saved = tmp_path / "saved"
    save_patched(checkpoint, saved, mode="full-o", tau=2.0)
    os.utime(checkpoint)  # the base gets a new identity: its digest is not known
    calls.clear()
    est = _est(saved)
    for seed in range(3):
        _fit_predict(est, seed)
    assert calls == {"load": 1, "patch": 1, "hash": 1}
    assert est.patch_report_.tau == 2.0
    _est(saved).fit(*_data()[:2])  # another estimator: its own host, the file's digest known
    assert calls == {"load": 2, "patch": 2, "hash": 1}


@pytest.mark.parametrize("mode", ["oattention", "full-o"])
def test_a_kept_host_predicts_bit_identically_to_loading_at_every_fit(
    checkpoint, mode, monkeypatch
):
    est = _est(checkpoint, mode=mode)
    kept = [_fit_predict(est, seed) for seed in range(3)]
    monkeypatch.setattr(patched_host, "host_key", lambda *args, **kwargs: None)
    every_fit = [_fit_predict(_est(checkpoint, mode=mode), seed) for seed in range(3)]
    for a, b in zip(kept, every_fit, strict=True):
        np.testing.assert_array_equal(a, b)
    unpatched = _fit_predict(_est(checkpoint, mode="none"))
    assert np.abs(kept[0] - unpatched).max() > 1e-6  # the kept host is patched


def test_mode_none_loads_as_tabpfn_does_at_every_fit(checkpoint, calls):
    est = _est(checkpoint, mode="none")
    _fit_predict(est)
    first = est.model_
    _fit_predict(est)
    assert est.model_ is not first  # tabpfn built it again
    assert calls == {}  # nothing loaded, patched or hashed beside tabpfn
    assert est.patch_reports_ == [] and est.settings_["mode"] == "none"


def test_a_rewritten_checkpoint_is_loaded_again(tmp_path, checkpoint, calls):
    est = _est(checkpoint)
    before = _fit_predict(est)
    tiny_v3_checkpoint(checkpoint.parent, seed=4, name=checkpoint.name)  # same path
    after = _fit_predict(est)
    assert calls["load"] == 2
    fresh = tiny_v3_checkpoint(tmp_path / "fresh", seed=4, name=checkpoint.name)
    np.testing.assert_array_equal(after, _fit_predict(_est(fresh)))
    assert np.abs(after - before).max() > 1e-6


def test_set_params_of_a_setting_or_the_model_path_loads_again(tmp_path, checkpoint, calls):
    est = _est(checkpoint)
    _fit_predict(est)
    est.set_params(tau=2.0)
    _fit_predict(est)
    assert calls["load"] == 2 and est.patch_report_.tau == 2.0
    other = tiny_v3_checkpoint(tmp_path / "other", seed=5)
    est.set_params(model_path=str(other))
    pred = _fit_predict(est)
    assert calls["load"] == 3
    np.testing.assert_array_equal(pred, _fit_predict(_est(other, tau=2.0)))
    assert "_patched_hosts" not in clone(est).__dict__  # a clone loads its own


def test_a_forced_cast_reaches_neither_the_next_fit_nor_another_estimator(checkpoint, calls):
    est = _est(checkpoint)
    reference = _fit_predict(est)
    host = est.model_
    weights = {k: v.clone() for k, v in host.state_dict().items()}
    est.set_params(inference_precision=torch.float64)
    _fit_predict(est)
    assert est.model_ is not host  # tabpfn casts this fit's model: a copy of its own
    assert next(est.model_.parameters()).dtype == torch.float64
    other = clone(est).set_params(inference_precision=torch.float64)
    _fit_predict(other)
    est.set_params(inference_precision=torch.float32)
    np.testing.assert_array_equal(_fit_predict(est), reference)
    assert est.model_ is host and calls["load"] == 2  # est's host once, the clone's once
    for name, value in host.state_dict().items():
        assert value.dtype == torch.float32
        assert torch.equal(value, weights[name])


def test_a_host_changed_in_place_is_loaded_again(checkpoint, calls):
    est = _est(checkpoint)
    reference = _fit_predict(est)
    with torch.no_grad():
        next(est.model_.parameters()).add_(1.0)  # as a training step would
    np.testing.assert_array_equal(_fit_predict(est), reference)
    assert calls["load"] == 2
    # Handed by reference to a plain tabpfn estimator that casts it in place.
    spec = ModelSpecs(
        model=est.model_,
        architecture_config=est.configs_[0],
        inference_config=est.inference_config_,
        norm_criterion=est.znorm_space_bardist_,
    )
    X, y, X_test = _data()
    plain = TabPFNRegressor(model_path=spec, device="cpu", inference_precision=torch.float64)
    plain.fit(X, y).predict(X_test)
    np.testing.assert_array_equal(_fit_predict(est), reference)
    assert calls["load"] == 3


def test_pickles_and_copies_leave_the_kept_host_out(checkpoint):
    est = _est(checkpoint)
    reference = _fit_predict(est)
    assert "_patched_hosts" in est.__dict__
    X_test = _data()[2]
    for twin in (pickle.loads(pickle.dumps(est)), copy.deepcopy(est)):
        assert "_patched_hosts" not in twin.__dict__
        np.testing.assert_array_equal(twin.predict(X_test), reference)
        np.testing.assert_array_equal(_fit_predict(twin), reference)
    assert "_patched_hosts" in est.__dict__  # pickling did not drop the original's


@pytest.mark.parametrize("saved_mode", [None, "none", "oattention"])
@pytest.mark.parametrize("given", [None, "none", "oattention", "full-o"])
def test_the_mode_that_chooses_the_loading_path_is_the_one_the_settings_resolve_to(
    given, saved_mode
):
    requested = {"mode": given, "tau": None, "support": None, "eps_den": None}
    saved = None
    if saved_mode is not None:
        saved = {"mode": saved_mode, "tau": 1.0, "support": "count", "eps_den": 1e-6}
    try:
        expected = resolve_settings(requested, saved, host="TabPFNV3").mode
    except SettingsConflictError:
        return  # refused when the host is loaded, whichever path loads it
    assert resolved_mode(requested, saved) == expected
