"""The shipped embedded hosts: their checkpoints, SHA-256, headers, and that they learn."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from tabpfn import TabPFNClassifier, TabPFNRegressor
from tabpfn.architectures import tabpfn_v3
from tabpfn.checkpoint import Checkpoint

import retrofit.models.embedded as embedded
from retrofit.files import sha256_file
from retrofit.models.embedded import (
    EMBEDDED_FILENAME,
    EmbeddedCheckpointError,
    embedded_model_path,
    verify_checkpoint,
)
from tests.helpers.regression_tasks import fit_predict, linear_task


def test_shipped_checkpoint_sha256_matches():
    path = Path(embedded_model_path())
    assert path.name == EMBEDDED_FILENAME and "v3" in path.name
    assert sha256_file(path) == embedded.EMBEDDED_SHA256


def test_corrupted_or_missing_copy_is_rejected(tmp_path):
    copy = tmp_path / EMBEDDED_FILENAME
    shutil.copyfile(embedded_model_path(), copy)
    assert verify_checkpoint(copy, embedded.EMBEDDED_SHA256) == copy.resolve()
    data = bytearray(copy.read_bytes())
    data[len(data) // 2] ^= 0xFF
    copy.write_bytes(bytes(data))
    with pytest.raises(EmbeddedCheckpointError, match="corrupted"):
        verify_checkpoint(copy, embedded.EMBEDDED_SHA256)
    with pytest.raises(ValueError, match="missing"):
        verify_checkpoint(tmp_path / "absent_v3.safetensors", embedded.EMBEDDED_SHA256)


def test_shipped_header_is_a_complete_v3_regressor():
    header = Checkpoint(embedded_model_path()).load()
    assert header["architecture_name"] == "tabpfn_v3"
    config, unused = tabpfn_v3.parse_config(header["config"])
    assert not unused and config.num_buckets > 0 and not config.is_classification
    borders = header["state_dict"]["regression_borders"]
    assert borders.shape == (config.num_buckets + 1,) and bool((borders.diff() > 0).all())
    inference = header["inference_config"]
    assert inference["MAX_CPU_SAMPLES"] >= 5000
    assert isinstance(inference["N_ESTIMATORS"], int) and inference["N_ESTIMATORS"] >= 1


def test_shipped_host_loads_through_tabpfn_and_learns_in_context():
    X, y = linear_task(400, 5, seed=1)
    pred = fit_predict(embedded_model_path(), X, y, 300)
    assert pred.shape == (100,) and np.isfinite(pred).all()
    rmse = np.sqrt(np.mean((pred - y[300:]) ** 2))
    rel = rmse / np.sqrt(np.mean((y[:300].mean() - y[300:]) ** 2))
    assert rel < 0.5  # a near-linear task: far better than the train mean


def test_the_embedded_classifier_is_shipped_with_its_digest():
    path = Path(embedded_model_path("classifier"))
    name = embedded.EMBEDDED_FILENAMES["classifier"]
    assert embedded.embedded_is_shipped("classifier") and path.name == name
    digest = (path.parent / (name + ".sha256")).read_text().split()[0]
    assert sha256_file(path) == digest
    header = Checkpoint(path).load()
    config, unused = tabpfn_v3.parse_config(header["config"])
    assert header["architecture_name"] == "tabpfn_v3" and not unused
    assert config.is_classification and config.max_num_classes == 10


def test_shipped_classifier_loads_through_tabpfn_and_learns_in_context():
    rng = np.random.default_rng(4)
    X = rng.normal(size=(300, 4))
    y = (X[:, 0] + 0.5 * X[:, 1] > 0).astype(int)
    clf = TabPFNClassifier(
        model_path=str(embedded_model_path("classifier")),
        n_estimators=2,
        device="cpu",
        inference_precision=torch.float32,
    ).fit(X[:200], y[:200])
    proba = clf.predict_proba(X[200:])
    assert proba.shape == (100, 2) and np.allclose(proba.sum(axis=1), 1.0, atol=1e-5)
    assert np.mean(proba.argmax(axis=1) == y[200:]) > 0.8  # a linear boundary


def test_shipped_host_accepts_more_than_a_thousand_rows_on_cpu():
    X, y = linear_task(1300, 4, seed=2)
    pred = fit_predict(embedded_model_path(), X, y, 1200)
    assert pred.shape == (100,) and np.isfinite(pred).all()


def test_embedded_resolves_per_kind_from_the_files_shipped(embedded_dir, tiny_v3_path):
    """A kind is shipped when its file and digest are; then "embedded" resolves to it."""
    from retrofit.models.loading import resolve_model

    with pytest.raises(EmbeddedCheckpointError, match="ships no embedded classifier host"):
        embedded_model_path("classifier")
    assert not embedded.embedded_is_shipped("classifier")
    name = embedded.EMBEDDED_FILENAMES["classifier"]
    shutil.copyfile(tiny_v3_path, embedded_dir / name)
    (embedded_dir / (name + ".sha256")).write_text(f"{sha256_file(tiny_v3_path)}  {name}\n")
    assert embedded.embedded_is_shipped("classifier")
    assert embedded_model_path("classifier") == str((embedded_dir / name).resolve())
    assert resolve_model("embedded", "classifier").checkpoint == (embedded_dir / name).resolve()
    (embedded_dir / name).write_bytes(b"replaced")
    with pytest.raises(EmbeddedCheckpointError, match="corrupted"):
        embedded_model_path("classifier")


def test_tabpfns_own_fit_state_saves_and_loads_with_the_embedded_path(tmp_path):
    """The path goes into tabpfn's JSON of parameters (a ``pathlib.Path`` did not)."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 3))
    estimator = TabPFNRegressor(
        model_path=embedded_model_path(),
        n_estimators=1,
        device="cpu",
        inference_precision=torch.float32,
        random_state=0,
    ).fit(X, X[:, 0])
    estimator.save_fit_state(tmp_path / "plain.tabpfn_fit")
    loaded = TabPFNRegressor.load_from_fit_state(tmp_path / "plain.tabpfn_fit", device="cpu")
    np.testing.assert_array_equal(loaded.predict(X[:5]), estimator.predict(X[:5]))
