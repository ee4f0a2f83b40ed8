"""Every version alias (v2.5, v2.6, v3.5, auto) and the estimator on every new host class.

No test downloads: tabpfn's downloader is replaced by a fake that fails like an
offline machine, and conftest points the model cache at a temp dir. Tiny
checkpoints of each new class are written the way tabpfn's loader reads them
(the version comes from the file name) and fitted through ``OTabPFNRegressor``
in every fit mode.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from tabpfn import model_loading
from tabpfn.constants import ModelVersion

from retrofit.errors import EmbeddedCheckpointError, WeightsUnavailableError
from retrofit.models import loading, weights
from retrofit.regressor import OTabPFNRegressor
from retrofit.settings import DEFAULT_TAU_BY_HOST
from tests.helpers.tiny_hosts import save_tiny_host_checkpoint

NEW_ALIASES = {
    "v2.5": "tabpfn-v2.5-regressor-v2.5_default.ckpt",
    "v2.6": "tabpfn-v2.6-regressor-v2.6_default.ckpt",
    "v3.5": "tabpfn-v3.5-20260909.safetensors",
}


@pytest.mark.parametrize(("alias", "file_name"), sorted(NEW_ALIASES.items()))
def test_each_new_alias_is_tabpfns_default_file_in_its_cache(cache_dir, alias, file_name):
    assert weights.is_version_alias(alias)
    assert weights.default_checkpoint_path(alias) == cache_dir / file_name


def test_auto_is_tabpfns_own_default_version(cache_dir, monkeypatch):
    from tabpfn.settings import settings

    assert weights.is_version_alias("auto")
    assert settings.tabpfn.model_version == ModelVersion.V3_5  # what TabPFNRegressor() loads
    assert weights.resolve_version("auto") == "v3.5"
    assert weights.default_checkpoint_path("auto") == cache_dir / NEW_ALIASES["v3.5"]
    # Resolved by tabpfn's resolver, so it follows tabpfn's setting.
    monkeypatch.setattr(settings.tabpfn, "model_version", ModelVersion.V2_6)
    assert weights.default_checkpoint_path("auto") == cache_dir / NEW_ALIASES["v2.6"]


@pytest.mark.parametrize("alias", [*sorted(NEW_ALIASES), "auto"])
def test_offline_each_alias_fails_in_one_line_naming_the_exact_path(cache_dir, no_download, alias):
    with pytest.raises(WeightsUnavailableError) as info:
        weights.default_weights(alias)
    message = str(info.value)
    target = weights.default_checkpoint_path(alias)
    assert "\n" not in message
    assert str(target) in message
    assert "huggingface.co/Prior-Labs/" in message
    assert [c[0] for c in no_download] == [target]


def test_the_estimator_on_auto_offline_names_the_v3_5_file(cache_dir, no_download):
    X, y = np.zeros((8, 2)), np.arange(8.0)
    with pytest.raises(WeightsUnavailableError, match=r"tabpfn-v3\.5-20260909\.safetensors"):
        OTabPFNRegressor(model_path="auto").fit(X, y)


def test_an_unknown_path_lists_every_alias(tmp_path):
    with pytest.raises(loading.CheckpointNotFoundError, match=r"'v2\.5', 'v2\.6', 'v3' or 'v3\.5'"):
        loading.resolve_model(tmp_path / "missing.ckpt")


# ---- tiny checkpoints of each new class through tabpfn's loader and the estimator ----------

FILE_NAMES = {
    "tabpfn_v2_5": "tiny-v2.5-regressor.safetensors",
    "tabpfn_v2_6": "tiny-v2.6-regressor.safetensors",
    "tabpfn_v3_5": "tiny-v3.5-regressor.safetensors",
}


def _checkpoint(name: str, directory: Path) -> Path:
    return save_tiny_host_checkpoint(name, directory / FILE_NAMES[name])


@pytest.mark.parametrize("name", sorted(FILE_NAMES))
def test_estimator_fit_modes_agree_on_every_new_host(tmp_path, name):
    path = _checkpoint(name, tmp_path)
    rng = np.random.default_rng(0)
    X = rng.normal(size=(36, 3))
    y = X @ np.array([1.0, -1.0, 2.0])

    def fit(mode, **kwargs):
        estimator = OTabPFNRegressor(
            model_path=str(path),
            mode=mode,
            n_estimators=1,
            device="cpu",
            inference_precision=torch.float32,
            **kwargs,
        )
        return estimator.fit(X[:28], y[:28])

    reference = fit("full-o")
    assert reference.settings_["tau"] == DEFAULT_TAU_BY_HOST[reference.patch_report_.host]
    expected = reference.predict(X[28:])
    assert np.abs(expected - fit("none").predict(X[28:])).max() > 1e-3  # the patch acts
    np.testing.assert_allclose(fit("full-o", fit_mode="low_memory").predict(X[28:]), expected)
    cached = fit("full-o", fit_mode="fit_with_cache").predict(X[28:])
    # v3.5 stores its cache in int8 by default (tabpfn's default); v2.x in float.
    tol = 5e-2 * np.abs(expected).max() if name == "tabpfn_v3_5" else 1e-5
    np.testing.assert_allclose(cached, expected, rtol=0, atol=tol)


@pytest.mark.parametrize(
    ("name", "version"),
    [
        ("tabpfn_v2_5", ModelVersion.V2_5),
        ("tabpfn_v2_6", ModelVersion.V2_6),
        ("tabpfn_v3_5", ModelVersion.V3_5),
    ],
)
def test_a_saved_retrofit_of_each_host_class_loads_its_base_file_as_that_version(
    tmp_path, name, version
):
    from retrofit.models.saved.save import save_patched

    source = _checkpoint(name, tmp_path)
    save_patched(source, tmp_path / "saved", mode="full-o")
    base = loading.resolve_model(tmp_path / "saved").checkpoint
    assert base == source.resolve()  # the file itself: tabpfn reads its version from its name
    assert model_loading.resolve_model_version(base) == version
    specs = loading.load_host(tmp_path / "saved")
    assert (
        type(specs.model).__name__
        == {"tabpfn_v2_5": "TabPFNV2p5", "tabpfn_v2_6": "TabPFNV2p6", "tabpfn_v3_5": "TabPFNV3p5"}[
            name
        ]
    )


@pytest.mark.parametrize("alias", ["v2.6", "v3"])
def test_resolving_an_alias_for_a_classifier_names_the_classifier_file(
    cache_dir, no_download, alias, embedded_dir
):
    classifier_file = weights.default_checkpoint_path(alias, which="classifier")
    assert classifier_file != weights.default_checkpoint_path(alias)
    with pytest.raises(WeightsUnavailableError) as info:
        loading.resolve_model(alias, "classifier")
    assert str(classifier_file) in str(info.value)
    with pytest.raises(EmbeddedCheckpointError, match="ships no embedded classifier"):
        loading.resolve_model("embedded", "classifier")
