"""``OTabPFNClassifier`` is ``TabPFNClassifier`` with the retrofit's loading (tiny random v3).

``mode="none"`` is tabpfn itself, bit for bit (same process, same shapes, same
checkpoint, float32); a patched mode changes the probabilities; the default
``model_path`` is the shipped embedded classifier, run offline and checked
against its digest (an installation without one refuses ``"embedded"`` with an
error naming the alternatives); the holdout classifiers of ``tuning_config``
are of this class.
"""

from __future__ import annotations

import inspect
import shutil

import numpy as np
import pandas as pd
import pytest
import torch
from sklearn.utils.estimator_checks import estimator_checks_generator
from tabpfn import TabPFNClassifier

import retrofit.models.embedded as embedded
from retrofit import EmbeddedCheckpointError, OTabPFNClassifier, WeightsUnavailableError
from tests.helpers.tiny_models import build_tiny_v3, save_tiny_checkpoint, tiny_v3_config

CONFIG = tiny_v3_config(
    max_num_classes=5, decoder_head_dim=4, decoder_num_heads=2, decoder_use_softmax_scaling=True
)
FIT_MODES = ("fit_preprocessors", "low_memory", "fit_with_cache")
PREDICTIONS = ("predict", "predict_proba", "predict_logits", "predict_raw_logits")


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    folder = tmp_path_factory.mktemp("classifier")
    return save_tiny_checkpoint(
        build_tiny_v3(CONFIG), CONFIG, folder / "tiny_v3_classifier.safetensors"
    )


def _kwargs(path, **extra) -> dict:
    return {
        "model_path": str(path),
        "n_estimators": 2,
        "device": "cpu",
        "inference_precision": torch.float32,
        **extra,
    }


def _numeric(n=40, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    return X, (X[:, 0] + 0.3 * rng.normal(size=n) > 0).astype(int) + (X[:, 1] > 1)


def _frame(n=40, seed=0):
    rng = np.random.default_rng(seed)
    X = pd.DataFrame(
        {
            "x": rng.normal(size=n),
            "colour": pd.Categorical(rng.choice(["red", "green"], size=n)),
            "city": rng.choice(["Oslo", "Lima", None], size=n).astype(object),
        }
    )
    return X, np.where(X["x"] > 0, "high", "low")


@pytest.mark.parametrize("fit_mode", FIT_MODES)
@pytest.mark.parametrize("data", [_numeric, _frame], ids=["numpy", "pandas-with-text-labels"])
def test_mode_none_is_tabpfn_bit_for_bit(checkpoint, fit_mode, data):
    X, y = data()
    ours = OTabPFNClassifier(mode="none", **_kwargs(checkpoint, fit_mode=fit_mode)).fit(
        X[:30], y[:30]
    )
    theirs = TabPFNClassifier(**_kwargs(checkpoint, fit_mode=fit_mode)).fit(X[:30], y[:30])
    for method in PREDICTIONS:
        a, b = getattr(ours, method)(X[30:]), getattr(theirs, method)(X[30:])
        assert np.array_equal(a, b), method
    assert ours.patch_report_ is None
    assert list(ours.classes_) == list(theirs.classes_)


@pytest.mark.parametrize("mode", ["oattention", "full-o"])
def test_a_patched_classifier_changes_the_probabilities(checkpoint, mode):
    X, y = _numeric()
    base = OTabPFNClassifier(mode="none", **_kwargs(checkpoint)).fit(X[:30], y[:30])
    est = OTabPFNClassifier(mode=mode, **_kwargs(checkpoint)).fit(X[:30], y[:30])
    proba = est.predict_proba(X[30:])
    assert np.isfinite(proba).all()
    assert np.allclose(proba.sum(axis=1), 1.0)
    assert np.abs(proba - base.predict_proba(X[30:])).max() > 1e-4
    paths = [m.path for m in est.patch_report_.modules]
    assert "many_class_decoder" in paths
    assert est.settings_["mode"] == mode


def test_embedded_is_refused_for_a_classifier_not_shipped_with_the_alternatives_named(
    embedded_dir,
):
    est = OTabPFNClassifier(model_path="embedded", device="cpu")
    with pytest.raises(EmbeddedCheckpointError, match="ships no embedded classifier host"):
        est.fit(*_numeric())


def test_the_default_model_is_tabpfns_auto_as_the_parents():
    assert OTabPFNClassifier().model_path == "auto"
    parent = inspect.signature(TabPFNClassifier.__init__).parameters["model_path"].default
    assert OTabPFNClassifier().model_path == parent == TabPFNClassifier().model_path


def test_embedded_is_the_shipped_classifier_and_runs_offline(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TABPFN_MODEL_CACHE_DIR", str(tmp_path / "cache"))
    X, y = _numeric(120, seed=3)
    common = {
        "model_path": "embedded",
        "n_estimators": 2,
        "device": "cpu",
        "inference_precision": torch.float32,
    }
    # Mode none is plain tabpfn on the shipped classifier file, bit for bit.
    base = OTabPFNClassifier(mode="none", **common).fit(X[:90], y[:90])
    plain_common = {k: v for k, v in common.items() if k != "model_path"}
    shipped = str(embedded.embedded_model_path("classifier"))
    plain = TabPFNClassifier(model_path=shipped, **plain_common).fit(X[:90], y[:90])
    np.testing.assert_array_equal(base.predict_proba(X[90:]), plain.predict_proba(X[90:]))
    # The default (full-o) patches it, predicts every test row and learns the task.
    est = OTabPFNClassifier(**common).fit(X[:90], y[:90])
    proba = est.predict_proba(X[90:])
    assert est.model_path == "embedded" and est.settings_["mode"] == "full-o"
    assert proba.shape == (30, len(np.unique(y[:90]))) and np.isfinite(proba).all()
    assert np.abs(proba - base.predict_proba(X[90:])).max() > 0
    majority = np.mean(y[90:] == np.bincount(y[:90]).argmax())
    assert np.mean(est.predict(X[90:]) == y[90:]) > majority
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").iterdir())


def test_embedded_refuses_a_tampered_copy_of_the_shipped_classifier(monkeypatch, tmp_path):
    name = embedded.EMBEDDED_FILENAMES["classifier"]
    folder = tmp_path / "embedded"
    folder.mkdir()
    shutil.copyfile(embedded.embedded_model_path("classifier"), folder / name)
    shutil.copyfile(embedded._HERE / (name + ".sha256"), folder / (name + ".sha256"))
    monkeypatch.setattr(embedded, "_HERE", folder)
    X, y = _numeric()
    kwargs = {"n_estimators": 1, "device": "cpu", "inference_precision": torch.float32}
    OTabPFNClassifier(model_path="embedded", **kwargs).fit(X, y)  # the untouched copy passes
    data = bytearray((folder / name).read_bytes())
    data[len(data) // 2] ^= 0x01
    (folder / name).write_bytes(bytes(data))
    with pytest.raises(EmbeddedCheckpointError, match="corrupted or was replaced") as info:
        OTabPFNClassifier(model_path="embedded", **kwargs).fit(X, y)
    message = str(info.value)
    assert str((folder / name).resolve()) in message and "reinstall" in message
    assert len(message.splitlines()) == 1


def test_auto_is_tabpfns_default_classifier_and_offline_says_where_to_put_it(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TABPFN_MODEL_CACHE_DIR", str(tmp_path))
    with pytest.raises(WeightsUnavailableError, match="classifier weights are not available"):
        OTabPFNClassifier(model_path="auto", device="cpu").fit(*_numeric())


def test_tuning_classifiers_are_of_this_class_with_its_settings(checkpoint):
    est = OTabPFNClassifier(mode="oattention", tau=2.0, **_kwargs(checkpoint))
    est.categorical_features_indices_ = None
    holdout = est._get_tuning_classifier(n_estimators=1)
    assert type(holdout) is OTabPFNClassifier
    assert (holdout.mode, holdout.tau, holdout.n_estimators) == ("oattention", 2.0, 1)
    assert holdout.fit_mode == "fit_preprocessors" and holdout.tuning_config is None


# scikit-learn generates its sample-weight checks because fit takes sample_weight; in
# float64 every one passes in both patched modes (float32's row-order floor is above
# the equivalence check's rtol: test_regressor.py marks it there).
@pytest.mark.parametrize("mode", ["full-o", "oattention"])
def test_sklearn_sample_weight_checks_pass_in_float64(checkpoint, mode):
    estimator = OTabPFNClassifier(
        mode=mode, **_kwargs(checkpoint, inference_precision=torch.float64)
    )
    ran = []
    for est, check in estimator_checks_generator(estimator, expected_failed_checks={}):
        name = getattr(check, "func", check).__name__
        if "sample_weight" in name:
            check(est)
            ran.append(name)
    assert sorted(ran) == [
        "check_all_zero_sample_weights_error",
        "check_classifiers_one_label_sample_weights",
        "check_sample_weight_equivalence_on_dense_data",
        "check_sample_weights_list",
        "check_sample_weights_not_an_array",
        "check_sample_weights_not_overwritten",
        "check_sample_weights_pandas_series",
        "check_sample_weights_shape",
    ]


@pytest.mark.parametrize("mode", ["none", "full-o"])
def test_predict_log_proba_is_the_log_of_predict_proba_and_serves_sklearns_cross_val_predict(
    checkpoint, mode
):
    from sklearn.model_selection import cross_val_predict

    X, y = _numeric()
    clf = OTabPFNClassifier(mode=mode, **_kwargs(checkpoint))
    fitted = clf.fit(X[:30], y[:30])
    np.testing.assert_array_equal(
        fitted.predict_log_proba(X[30:]), np.log(fitted.predict_proba(X[30:]))
    )
    # scikit-learn asks the estimator for the method: tabpfn's classifier has none.
    assert not hasattr(TabPFNClassifier(), "predict_log_proba")
    log_proba = cross_val_predict(clf, X, y, cv=2, method="predict_log_proba")
    proba = cross_val_predict(clf, X, y, cv=2, method="predict_proba")
    np.testing.assert_array_equal(log_proba, np.log(proba))
