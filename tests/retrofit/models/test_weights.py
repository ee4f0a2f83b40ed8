"""Real weights: the v2/v3 aliases and local files.

No test downloads: tabpfn's downloader is replaced by a fake wherever a
download could be tried, and conftest points the model cache at a temp dir.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch
from tabpfn import model_loading
from tabpfn.checkpoint import Checkpoint

from retrofit.classifier import OTabPFNClassifier
from retrofit.errors import SettingsConflictError, WeightsUnavailableError
from retrofit.models import loading, weights
from retrofit.regressor import OTabPFNRegressor
from retrofit.settings import resolve_settings
from tests.helpers.commands import one_error_line, predict_argv, run_cli
from tests.helpers.tiny_hosts import build_tiny_v2, save_tiny_v2_checkpoint
from tests.helpers.tiny_models import tiny_v3_checkpoint

SETTINGS = {"mode": "full-o", "tau": 1.0, "support": "count", "eps_den": 1e-6}
_REAL_HUB_REACHABLE = weights.hub_reachable


@pytest.fixture(autouse=True)
def reachable_hub(monkeypatch) -> None:
    """Pretend the Hugging Face host answers, so the faked downloader is what is tried."""
    monkeypatch.setattr(weights, "hub_reachable", lambda *args, **kwargs: True)


@pytest.mark.parametrize(
    ("version", "file_name"),
    [("v3", "tabpfn-v3-regressor-v3_default.ckpt"), ("v2", "tabpfn-v2-regressor.ckpt")],
)
def test_alias_maps_to_tabpfns_default_file_in_its_cache(cache_dir, version, file_name):
    assert weights.default_checkpoint_path(version) == cache_dir / file_name


def test_default_cache_follows_tabpfn_model_cache_dir():
    # conftest sets TABPFN_MODEL_CACHE_DIR before tabpfn's settings are read.
    expected = Path(os.environ["TABPFN_MODEL_CACHE_DIR"]) / "tabpfn-v3-regressor-v3_default.ckpt"
    assert weights.default_checkpoint_path("v3") == expected


@pytest.mark.parametrize("version", ["v3", "v2"])
def test_offline_download_failure_is_one_line_naming_the_exact_path(
    cache_dir, no_download, version
):
    with pytest.raises(WeightsUnavailableError) as info:
        weights.default_weights(version)
    message = str(info.value)
    target = weights.default_checkpoint_path(version)
    assert "\n" not in message
    assert str(target) in message
    assert target.name in message
    assert "Temporary failure in name resolution" in message
    assert [c[0] for c in no_download] == [target]
    assert no_download[0][2] == "regressor"


@pytest.mark.parametrize(
    ("alias", "gated"), [("auto", True), ("v3.5", True), ("v3", True), ("v2", False)]
)
@pytest.mark.parametrize("offline", ["HF_HUB_OFFLINE", "download fails"])
def test_the_offline_refusal_says_how_to_get_the_weights_and_names_the_stand_in(
    cache_dir, no_download, monkeypatch, alias, gated, offline
):
    """One line: the file and its place, the licence step, the guide, and ``embedded``."""
    if offline == "HF_HUB_OFFLINE":
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(WeightsUnavailableError) as info:
        loading.resolve_model(alias)
    message = str(info.value)
    target = weights.default_checkpoint_path(alias)
    assert "\n" not in message
    assert f"place it at {target}" in message and "docs/real_weights.md" in message
    assert ("accept tabpfn's licence and set TABPFN_TOKEN" in message) is gated
    assert (f"not available for {alias!r}" in message) is (alias == "auto")
    assert message.endswith(
        "model_path='embedded' (Python) or --model embedded (command line) runs the small "
        "offline stand-in shipped with this package"
    )
    assert len(no_download) == (0 if offline == "HF_HUB_OFFLINE" else 1)


def test_the_default_estimator_offline_is_refused_in_that_one_line(cache_dir, no_download):
    X, y = np.zeros((8, 2)), np.arange(8.0)
    for estimator in (OTabPFNRegressor(), OTabPFNClassifier()):
        with pytest.raises(WeightsUnavailableError) as info:
            estimator.fit(X, y)
        message = str(info.value)
        assert "\n" not in message and "not available for 'auto'" in message
        assert "model_path='embedded' (Python)" in message
    assert [call[2] for call in no_download] == ["regressor", "classifier"]


def test_hf_hub_offline_fails_without_trying_a_download(cache_dir, no_download, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(WeightsUnavailableError, match="HF_HUB_OFFLINE"):
        weights.default_weights("v3")
    assert no_download == []


def test_an_unreachable_hub_fails_fast_without_trying_a_download(
    cache_dir, no_download, monkeypatch
):
    """Offline without HF_HUB_OFFLINE is one line, no retry loop."""
    monkeypatch.setattr(weights, "hub_reachable", _REAL_HUB_REACHABLE)
    for name in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)

    def refused(address, timeout=None):
        raise ConnectionRefusedError(f"[Errno 111] refused {address}")

    monkeypatch.setattr(weights.socket, "create_connection", refused)
    with pytest.raises(WeightsUnavailableError, match=r"huggingface\.co cannot be reached") as info:
        weights.default_weights("v2")
    assert "\n" not in str(info.value)
    assert str(weights.default_checkpoint_path("v2")) in str(info.value)
    assert no_download == []  # tabpfn's downloader (and its retries) never ran


def test_the_hub_counts_as_reachable_when_a_connection_opens(monkeypatch):
    opened = []

    class Connection:
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    def connect(address, timeout=None):
        opened.append(address)
        return Connection()

    for name in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(weights.socket, "create_connection", connect)
    assert _REAL_HUB_REACHABLE() is True
    assert opened == [("huggingface.co", 443)]


def test_behind_a_proxy_the_hub_counts_as_reachable_without_connecting(monkeypatch):
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.invalid:3128")
    opened = []
    monkeypatch.setattr(weights.socket, "create_connection", lambda *a, **k: opened.append(a))
    assert _REAL_HUB_REACHABLE() is True
    assert opened == []


def test_download_disabled_fails_without_trying(cache_dir, no_download):
    with pytest.raises(WeightsUnavailableError, match="downloading is off"):
        weights.default_weights("v2", download=False)
    assert no_download == []


def test_a_downloader_exception_is_also_reported_as_unavailable(cache_dir, monkeypatch):
    def raising_download(to, **_):
        raise RuntimeError("licence not accepted\nsecond line")

    monkeypatch.setattr(model_loading, "download_model", raising_download)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    with pytest.raises(WeightsUnavailableError, match="licence not accepted") as info:
        weights.default_weights("v3")
    assert "\n" not in str(info.value)


def test_successful_download_returns_the_cached_file(cache_dir, monkeypatch):
    def fake_download(to, *, version, which, model_name=None):
        Path(to).write_bytes(b"weights")
        return "ok"

    monkeypatch.setattr(model_loading, "download_model", fake_download)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    path = weights.default_weights("v3")
    assert path == cache_dir / "tabpfn-v3-regressor-v3_default.ckpt"
    assert path.read_bytes() == b"weights"


def test_file_already_in_cache_is_used_without_download(cache_dir, no_download):
    target = cache_dir / "tabpfn-v2-regressor.ckpt"
    target.write_bytes(b"x")
    assert weights.default_weights("v2") == target
    assert no_download == []


def test_unknown_version_alias_is_rejected():
    assert not weights.is_version_alias("v4")
    with pytest.raises(ValueError, match="unknown TabPFN version"):
        weights.default_checkpoint_path("v4")


# --- settings a saved retrofit carries ------------------------------------------------


def test_resolve_settings_saved_are_defaults_and_explicit_must_agree():
    unset = dict.fromkeys(SETTINGS)
    assert resolve_settings(unset, SETTINGS).to_dict() == SETTINGS
    assert resolve_settings({"mode": "full-o", "tau": 1}, SETTINGS).to_dict() == SETTINGS
    with pytest.raises(SettingsConflictError, match=r"mode='oattention' \(saved: 'full-o'\)"):
        resolve_settings({**unset, "mode": "oattention"}, SETTINGS)
    with pytest.raises(SettingsConflictError, match=r"tau=2\.0"):
        resolve_settings({"tau": 2.0}, SETTINGS)


# --- through the loader and the estimator -------------------------------------------


def _xy(n=30, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    return X, X @ np.array([1.0, -1.0, 2.0]) + 0.1 * rng.normal(size=n)


def _fit_predict(model_path, **kwargs):
    X, y = _xy()
    estimator = OTabPFNRegressor(
        model_path=model_path,
        n_estimators=1,
        device="cpu",
        inference_precision=torch.float32,
        **kwargs,
    )
    return estimator.fit(X[:20], y[:20]), estimator.predict(X[20:])


@pytest.mark.parametrize("suffix", [".safetensors", ".ckpt"])
def test_a_local_checkpoint_file_loads_and_fits(tmp_path, suffix):
    source = tiny_v3_checkpoint(tmp_path, name="tiny_v3.safetensors")
    path = source
    if suffix == ".ckpt":  # the legacy pickled format of tabpfn's published files
        path = tmp_path / "tiny_v3.ckpt"
        torch.save(Checkpoint(source).load(), path)
    assert loading.resolve_model(str(path)).checkpoint == path.resolve()
    estimator, prediction = _fit_predict(str(path), mode="oattention")
    assert estimator.patch_report_.host == "TabPFNV3"
    assert np.isfinite(prediction).all()


def test_v3_alias_offline_fails_in_fit_with_the_exact_path(cache_dir, no_download):
    with pytest.raises(WeightsUnavailableError, match=r"tabpfn-v3-regressor-v3_default\.ckpt"):
        _fit_predict("v3")
    assert len(no_download) == 1


def test_v2_alias_uses_the_file_in_tabpfns_cache(cache_dir, no_download):
    # A tiny v2 model saved under tabpfn's default v2 file name stands in for the real one.
    tmp = cache_dir / "tiny.safetensors"
    save_tiny_v2_checkpoint(build_tiny_v2(), tmp)
    torch.save(Checkpoint(tmp).load(), cache_dir / "tabpfn-v2-regressor.ckpt")
    tmp.unlink()
    estimator, prediction = _fit_predict("v2", mode="full-o")
    assert no_download == []
    assert estimator.patch_report_.host == "TabPFNV2"
    assert estimator.patch_report_.n_replaced == 2
    assert np.isfinite(prediction).all()


def test_offline_v2_without_hf_hub_offline_fails_fast_in_one_line(
    csv_data, capsys, monkeypatch, tmp_path
):
    """No download is tried, so no retry logging and no wait."""
    monkeypatch.setattr(weights, "hub_reachable", _REAL_HUB_REACHABLE)  # the real check
    cache = tmp_path / "cache"
    monkeypatch.setattr(model_loading, "get_cache_dir", lambda: cache)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    for name in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    tried = []
    monkeypatch.setattr(model_loading, "download_model", lambda *a, **k: tried.append(a))

    def unreachable(address, timeout=None):
        raise OSError("[Errno -2] Name or service not known")

    monkeypatch.setattr(weights.socket, "create_connection", unreachable)
    out = tmp_path / "p.csv"
    code, _, err = run_cli(predict_argv(csv_data, "v2", out), capsys)
    assert code == 2
    one_error_line(err, "predict")
    assert "huggingface.co cannot be reached" in err
    assert str(cache / "tabpfn-v2-regressor.ckpt") in err
    assert tried == [] and not out.exists()
