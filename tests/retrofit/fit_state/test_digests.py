"""A fit state edited after it was saved is refused by its digests, naming the file.

Edits as a user or an attacker makes them: the target moved by 100 in
``y.npy`` (which on an unchecked load moves every prediction by 100),
``n_estimators`` or the ``estimator`` class changed in the manifest, a member
digest dropped. A forger who also recomputes the digests is caught by the
checks behind them: a switched class fails its refit or its weight digests,
always as a ``FitStateError`` naming the file.
"""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

from retrofit import FitStateError, OTabPFNClassifier, OTabPFNRegressor
from retrofit.fit_state.digests import MEMBER_DIGESTS_KEY
from tests.helpers.fit_states import rewrite
from tests.helpers.tiny_models import tiny_v3_classifier_checkpoint


def _npy(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return buffer.getvalue()


def _shifted_target(saved: Path) -> bytes:
    y = np.load(io.BytesIO(zipfile.ZipFile(saved).read("y.npy")))
    return _npy(y + 100.0)


def test_the_unedited_file_loads(saved_fit):
    """The control: the file every other test alters loads as saved."""
    loaded = OTabPFNRegressor.load_from_fit_state(saved_fit, device="cpu")
    assert loaded.settings_["mode"] == "full-o"


def test_a_target_moved_by_100_in_y_npy_is_refused(saved_fit, tmp_path):
    target = rewrite(
        saved_fit, tmp_path / "y.tabpfn_fit", replace={"y.npy": _shifted_target(saved_fit)}
    )
    with pytest.raises(FitStateError, match=r"y\.tabpfn_fit: y\.npy does not match its digest"):
        OTabPFNRegressor.load_from_fit_state(target, device="cpu")


@pytest.mark.parametrize(
    ("name", "edit"),
    [
        ("n_estimators", lambda m: m["params"].update(n_estimators=8)),
        ("random_state", lambda m: m["params"].update(random_state=1)),
        ("estimator", lambda m: m.update(estimator="OTabPFNClassifier")),
        ("model_path", lambda m: m.update(model_path={"one": {"path": "embedded"}})),
        ("versions", lambda m: m["versions"].update(torch="0.0")),
        ("no_digest", lambda m: m.pop("manifest_sha256")),
    ],
)
def test_an_edited_manifest_is_refused(saved_fit, tmp_path, name, edit):
    target = rewrite(saved_fit, tmp_path / f"{name}.tabpfn_fit", edit=edit)
    loader = OTabPFNClassifier if name == "estimator" else OTabPFNRegressor
    with pytest.raises(
        FitStateError, match=rf"{name}\.tabpfn_fit: the manifest does not match its digest"
    ):
        loader.load_from_fit_state(target, device="cpu")


def test_a_member_digest_dropped_by_a_forger_is_refused(saved_fit, tmp_path):
    target = rewrite(
        saved_fit,
        tmp_path / "dropped.tabpfn_fit",
        edit=lambda m: m[MEMBER_DIGESTS_KEY].pop("y.npy"),
        forge=True,
    )
    with pytest.raises(FitStateError, match=r"dropped\.tabpfn_fit: the manifest's member digests"):
        OTabPFNRegressor.load_from_fit_state(target, device="cpu")


def test_a_forged_target_is_loaded_only_with_digests_recomputed(saved_fit, tmp_path):
    """What the digests stop: the same edit, forged, loads and moves every prediction."""
    forged = rewrite(
        saved_fit,
        tmp_path / "forged.tabpfn_fit",
        replace={"y.npy": _shifted_target(saved_fit)},
        forge=True,
    )
    honest = OTabPFNRegressor.load_from_fit_state(saved_fit, device="cpu")
    moved = OTabPFNRegressor.load_from_fit_state(forged, device="cpu")
    X = np.random.default_rng(1).normal(size=(5, 3))
    np.testing.assert_allclose(moved.predict(X) - honest.predict(X), 100.0, rtol=0, atol=1e-3)


def test_a_regressor_fit_forged_into_a_classifier_fit_is_refused(saved_fit, tmp_path):
    target = rewrite(
        saved_fit,
        tmp_path / "switched.tabpfn_fit",
        edit=lambda m: m.update(estimator="OTabPFNClassifier"),
        forge=True,
    )
    with pytest.raises(FitStateError, match=r"switched\.tabpfn_fit: refitting its saved inputs"):
        OTabPFNClassifier.load_from_fit_state(target, device="cpu")


def test_a_classifier_fit_forged_into_a_regressor_fit_is_refused(tmp_path):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 3))
    y = (X[:, 0] > 0).astype(int)
    checkpoint = tiny_v3_classifier_checkpoint(tmp_path)
    path = tmp_path / "classifier.tabpfn_fit"
    OTabPFNClassifier(
        mode="full-o",
        model_path=str(checkpoint),
        n_estimators=2,
        device="cpu",
        inference_precision=torch.float32,
    ).fit(X, y).save_fit_state(path)
    target = rewrite(
        path,
        tmp_path / "switched.tabpfn_fit",
        edit=lambda m: m.update(estimator="OTabPFNRegressor"),
        forge=True,
    )
    with pytest.raises(FitStateError, match=r"switched\.tabpfn_fit: "):
        OTabPFNRegressor.load_from_fit_state(target, device="cpu")


def test_the_fits_sample_weights_are_a_member_under_its_digest(tmp_path, tiny_v3_path):
    """A weighted fit's weights: one more member, named by the digests, refused when edited."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 3))
    y = X[:, 0] + 0.1 * rng.normal(size=40)
    w_N = rng.integers(0, 4, size=40).astype(np.float64)
    path = tmp_path / "weighted.tabpfn_fit"
    OTabPFNRegressor(
        mode="full-o",
        model_path=str(tiny_v3_path),
        n_estimators=2,
        device="cpu",
        inference_precision=torch.float32,
    ).fit(X, y, sample_weight=w_N).save_fit_state(path)
    with zipfile.ZipFile(path) as archive:
        saved_N = np.load(io.BytesIO(archive.read("sample_weight.npy")))
    np.testing.assert_array_equal(saved_N, w_N)
    edited = rewrite(
        path, tmp_path / "w.tabpfn_fit", replace={"sample_weight.npy": _npy(w_N[::-1].copy())}
    )
    with pytest.raises(FitStateError, match=r"w\.tabpfn_fit: sample_weight\.npy does not match"):
        OTabPFNRegressor.load_from_fit_state(edited, device="cpu")
    dropped = rewrite(
        path,
        tmp_path / "d.tabpfn_fit",
        edit=lambda m: m[MEMBER_DIGESTS_KEY].pop("sample_weight.npy"),
        forge=True,
    )
    with pytest.raises(FitStateError, match=r"d\.tabpfn_fit: the manifest's member digests"):
        OTabPFNRegressor.load_from_fit_state(dropped, device="cpu")
