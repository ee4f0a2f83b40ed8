"""Real weights (v2/v3 aliases, local files) and saved retrofit directories.

No test downloads: tabpfn's downloader is replaced by a fake wherever a
download could be tried, and conftest points the model cache at a temp dir.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from tabpfn import model_loading
from tabpfn.checkpoint import Checkpoint

from retrofit.classifier import OTabPFNClassifier
from retrofit.errors import SavedModelError, SettingsConflictError, WeightsUnavailableError
from retrofit.files import sha256_file
from retrofit.models import loading, saved, weights
from retrofit.models.saved.save import save_patched
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


# --- saved retrofit directories ------------------------------------------------


def test_saved_dir_round_trip_keeps_weights_and_settings(tmp_path):
    source = tiny_v3_checkpoint(tmp_path, name="tiny_v3.safetensors")
    out = tmp_path / "retrofitted"
    result = saved.write_saved(source, out, settings=SETTINGS, patch_digest="abc", source_label="x")
    assert sorted(p.name for p in out.iterdir()) == [
        "retrofit.json",
        "tabpfn_v3_regressor_retrofit.safetensors",
    ]
    assert "v3" in result.checkpoint.name
    assert model_loading.resolve_model_version(result.checkpoint).value == "v3"
    assert result.settings == SETTINGS
    manifest = json.loads((out / "retrofit.json").read_text())
    assert manifest["source"]["sha256"] == sha256_file(source)
    assert manifest["weights"]["sha256"] == sha256_file(result.checkpoint)
    assert manifest["patch_digest"] == "abc"
    assert set(manifest["versions"]) >= {"tabpfn", "torch", "tabpfn-retrofit"}
    original = Checkpoint(source).load()
    copy = Checkpoint(result.checkpoint).load()
    assert copy["config"] == original["config"]
    assert copy["inference_config"] == original["inference_config"]
    assert copy["state_dict"].keys() == original["state_dict"].keys()
    for key, tensor in original["state_dict"].items():
        assert torch.equal(copy["state_dict"][key], tensor), key
    assert saved.is_saved_dir(out)
    assert not saved.is_saved_dir(source)


def test_tampered_weights_fail_the_sha256_check(tmp_path):
    source = tiny_v3_checkpoint(tmp_path)
    out = saved.write_saved(source, tmp_path / "d", settings=SETTINGS).directory
    weights_file = next(out.glob("*.safetensors"))
    data = bytearray(weights_file.read_bytes())
    data[-1] ^= 0xFF
    weights_file.write_bytes(bytes(data))
    with pytest.raises(SavedModelError, match="SHA-256 mismatch"):
        saved.load_saved(out)


def test_malformed_saved_dirs_fail_clearly(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(SavedModelError, match=r"no retrofit\.json"):
        saved.load_saved(empty)
    (empty / "retrofit.json").write_text("{not json")
    with pytest.raises(SavedModelError, match="cannot read"):
        saved.load_saved(empty)
    (empty / "retrofit.json").write_text(json.dumps({"format": "other/9"}))
    with pytest.raises(SavedModelError, match="format"):
        saved.load_saved(empty)


def test_existing_output_is_refused_unless_overwrite(tmp_path):
    source = tiny_v3_checkpoint(tmp_path)
    out = tmp_path / "d"
    saved.write_saved(source, out, settings=SETTINGS)
    with pytest.raises(FileExistsError):
        saved.write_saved(source, out, settings={**SETTINGS, "mode": "oattention"})
    assert saved.load_saved(out).settings["mode"] == "full-o"
    saved.write_saved(source, out, settings={**SETTINGS, "mode": "oattention"}, overwrite=True)
    assert saved.load_saved(out).settings["mode"] == "oattention"
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


def test_a_failed_write_leaves_nothing(tmp_path, monkeypatch):
    source = tiny_v3_checkpoint(tmp_path)

    def broken_save(checkpoint, path):
        Path(path).write_bytes(b"partial")
        raise OSError("disk full")

    monkeypatch.setattr(saved, "save_as_safetensors", broken_save)
    with pytest.raises(OSError, match="disk full"):
        saved.write_saved(source, tmp_path / "d", settings=SETTINGS)
    assert sorted(p.name for p in tmp_path.iterdir()) == [source.name]


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


def test_a_v2_source_saves_as_a_v2_directory_that_loads_and_fits(cache_dir, no_download, tmp_path):
    source = save_tiny_v2_checkpoint(build_tiny_v2(), tmp_path / "tiny_regressor.safetensors")
    result = save_patched(str(source), tmp_path / "v2dir", mode="oattention", tau=0.5)
    assert result.checkpoint.name == "tabpfn_v2_regressor_retrofit.safetensors"
    assert model_loading.resolve_model_version(result.checkpoint).value == "v2"
    assert "architecture_name" not in Checkpoint(result.checkpoint).load()  # as in v2 files
    assert result.manifest["architecture_name"] == "tabpfn_v2"
    from_dir, prediction = _fit_predict(str(result.directory))
    assert from_dir.settings_ == {
        "mode": "oattention",
        "tau": 0.5,
        "support": "count",
        "eps_den": 1e-6,
    }
    assert from_dir.patch_report_.host == "TabPFNV2"
    _, direct = _fit_predict(str(source), mode="oattention", tau=0.5)
    assert np.array_equal(prediction, direct)


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
