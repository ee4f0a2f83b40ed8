"""What ``OTabPFNRegressor(model_path=...)`` takes, and that every model it loads is patched.

Tiny random v3 checkpoints (perturbed zero-inits), float32 on the CPU.
"""

from __future__ import annotations

import inspect
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from tabpfn import ModelSpecs, TabPFNRegressor
from tabpfn.architectures import tabpfn_v3_5
from tabpfn.constants import ModelVersion
from tabpfn.inference_config import InferenceConfig
from tabpfn.model_loading import prepend_cache_path

import retrofit
import retrofit.estimator_base
import retrofit.models.patched_host
from retrofit import OTabPFNRegressor, is_patched, load_host, save_patched
from retrofit.hosts.v3.v3 import OTabPFNV3
from retrofit.models.loading import resolve_model
from tests.helpers.tiny_models import tiny_v3_checkpoint


@pytest.fixture(scope="module")
def checkpoints(tiny_v3_path, tmp_path_factory):
    other = tiny_v3_checkpoint(tmp_path_factory.mktemp("ckpt"), seed=1, name="other_v3.safetensors")
    return str(tiny_v3_path), str(other)


def _est(model_path, **kwargs) -> OTabPFNRegressor:
    params = {"n_estimators": 2, "device": "cpu", "inference_precision": torch.float32}
    return OTabPFNRegressor(model_path=model_path, **{**params, **kwargs})


def _data(n=50, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    return X, X @ rng.normal(size=3)


def _fit_predict(est):
    X, y = _data()
    return est.fit(X[:35], y[:35]).predict(X[35:])


def test_the_default_model_path_is_tabpfns_auto_and_embedded_is_the_shipped_host():
    assert OTabPFNRegressor().model_path == "auto"
    parent = inspect.signature(TabPFNRegressor.__init__).parameters["model_path"].default
    assert OTabPFNRegressor().model_path == parent == TabPFNRegressor().model_path
    assert resolve_model("embedded").tabpfn_model_path("regressor") == str(
        retrofit.embedded_model_path()
    )
    # "auto" is the file tabpfn's "auto" loads (v3.5 in 9.2); offline, one line naming it.
    with pytest.raises(retrofit.WeightsUnavailableError, match=r"tabpfn-v3\.5-20260909"):
        resolve_model("auto")
    assert resolve_model(None).tabpfn_model_path("regressor") is None
    # The Python API's loader resolves the same default as the estimators and commands.
    assert inspect.signature(retrofit.load_host).parameters["model_path"].default == "auto"
    with pytest.raises(retrofit.WeightsUnavailableError, match=r"model_path='embedded'"):
        retrofit.load_host()


def test_tabpfns_own_checkpoint_names_pass_through_for_tabpfn_to_download(tmp_path):
    name = prepend_cache_path("tabpfn-v2-regressor.ckpt")
    assert resolve_model(name).tabpfn_model_path("regressor") == name
    with pytest.raises(retrofit.CheckpointNotFoundError, match="no such file"):
        resolve_model(str(tmp_path / "other_v3.safetensors"))
    with pytest.raises(retrofit.InvalidModelPathError):
        resolve_model(3)


def test_create_default_for_version_builds_an_otabpfnregressor():
    est = OTabPFNRegressor.create_default_for_version(ModelVersion.V3, mode="oattention")
    assert type(est) is OTabPFNRegressor and est.mode == "oattention"
    assert est.model_path == TabPFNRegressor.create_default_for_version(ModelVersion.V3).model_path


def test_a_list_of_a_checkpoint_and_a_saved_directory_patches_every_model(checkpoints, tmp_path):
    saved = tmp_path / "saved"
    save_patched(checkpoints[0], saved, mode="oattention", tau=0.5)
    est = _est([checkpoints[0], str(saved)])
    pred = _fit_predict(est)
    assert np.isfinite(pred).all()
    assert len(est.models_) == 2 and all(isinstance(m, OTabPFNV3) for m in est.models_)
    assert [r.tau for r in est.patch_reports_] == [0.5, 0.5]  # the saved settings apply
    assert est.settings_["mode"] == "oattention"
    with pytest.raises(ValueError, match="patch_reports_"):
        _ = est.patch_report_


def test_saved_directories_with_different_settings_conflict(checkpoints, tmp_path):
    save_patched(checkpoints[0], tmp_path / "a", mode="oattention", tau=0.5)
    save_patched(checkpoints[0], tmp_path / "b", mode="oattention", tau=2.0)
    with pytest.raises(retrofit.SettingsConflictError, match="different settings"):
        _est([str(tmp_path / "a"), str(tmp_path / "b")]).fit(*_data())


def test_a_modelspecs_model_is_patched_as_a_copy_and_predicts_as_its_checkpoint(checkpoints):
    specs = load_host(checkpoints[0])
    est = _est(specs, mode="full-o")
    pred = _fit_predict(est)
    assert not is_patched(specs.model)  # the caller's model is left as it was
    assert est.models_[0] is not specs.model and is_patched(est.models_[0])
    np.testing.assert_array_equal(pred, _fit_predict(_est(checkpoints[0], mode="full-o")))
    unpatched = _est(specs, mode="none")
    _fit_predict(unpatched)
    assert unpatched.models_[0] is specs.model  # by reference, as tabpfn uses it


def test_a_list_mixing_modelspecs_and_files_loads_the_files(checkpoints):
    est = _est([load_host(checkpoints[0]), checkpoints[1]], mode="oattention")
    assert np.isfinite(_fit_predict(est)).all()
    assert len(est.patch_reports_) == 2 and all(is_patched(m) for m in est.models_)


def test_two_different_checkpoints_ensemble_differently_from_one(checkpoints):
    one = _fit_predict(_est(checkpoints[0], mode="full-o"))
    two = _fit_predict(_est(list(checkpoints), mode="full-o"))
    assert not np.array_equal(one, two)


def test_an_architecture_without_a_patch_table_is_refused_by_name(monkeypatch):
    from retrofit.hosts.common import base as tables

    # Every tabpfn 9.2 regressor class has a table; drop v3.5's to stand for an unknown one.
    monkeypatch.delitem(tables._HOST_PATCHERS, tabpfn_v3_5.TabPFNV3p5)
    config = tabpfn_v3_5.TabPFNV3p5Config(
        embed_dim=8,
        dist_embed_num_blocks=1,
        dist_embed_num_heads=2,
        dist_embed_num_inducing_points=4,
        feat_agg_num_blocks=1,
        feat_agg_num_heads=2,
        feat_agg_num_cls_tokens=2,
        nlayers=1,
        icl_num_heads=2,
        softmax_scaling_mlp_hidden_dim=8,
        decoder_num_heads=2,
        decoder_head_dim=4,
        num_buckets=16,
        max_num_classes=0,
    )
    specs = ModelSpecs(
        model=tabpfn_v3_5.get_architecture(config),
        architecture_config=config,
        # tabpfn has no default config for v3.5; the model is refused before one is read.
        inference_config=InferenceConfig.get_default(
            task_type="regression", model_version=ModelVersion.V2_5
        ),
    )
    with pytest.raises(retrofit.UnsupportedArchitectureError, match=r"TabPFNV3p5.*TabPFNV3"):
        _est(specs, mode="full-o").fit(*_data())
    assert not is_patched(specs.model)


def test_tuning_regressors_are_patched_too(checkpoints, monkeypatch):
    patched = []
    original = retrofit.patcher.patch_with_settings

    def counting(model, settings):
        patched.append(settings.mode)
        return original(model, settings)

    # The one patching step of kept hosts and of models loaded at every fit.
    monkeypatch.setattr(retrofit.patcher, "patch_with_settings", counting)
    tuning = {"calibrate_temperature": True, "tuning_holdout_frac": 0.5, "tuning_n_folds": 1}
    X, y = _data(n=90)
    est = _est(checkpoints[0], mode="oattention", tuning_config=tuning)
    with pytest.warns(UserWarning, match="recommend tuning"):
        est.fit(X, y)
    assert patched == ["oattention", "oattention"]  # the estimator's model, the holdout's
    assert np.isfinite(est.predict(X)).all()


def test_a_pandas_frame_with_categorical_and_text_columns_fits_patched(checkpoints):
    rng = np.random.default_rng(0)
    X = pd.DataFrame(
        {
            "x": rng.normal(size=50),
            "colour": pd.Categorical(rng.choice(["red", "green"], size=50)),
            "city": rng.choice(["Oslo", "Lima", None], size=50).astype(object),
        }
    )
    y = X["x"].to_numpy() + (X["colour"] == "red").to_numpy()
    base = _est(checkpoints[0], mode="none").fit(X[:35], y[:35])
    identity = _est(checkpoints[0], mode="full-o", tau=1e-30, eps_den=0.0).fit(X[:35], y[:35])
    real = _est(checkpoints[0], mode="full-o").fit(X[:35], y[:35])
    reference = base.predict(X[35:], output_type="quantiles")
    scale = np.abs(np.stack(reference)).max()
    for q_identity, q_ref in zip(
        identity.predict(X[35:], output_type="quantiles"), reference, strict=True
    ):
        assert np.abs(q_identity - q_ref).max() <= 1e-6 * scale
    assert np.abs(real.predict(X[35:]) - base.predict(X[35:])).max() > 1e-4 * scale


def test_more_than_1000_cpu_rows_warn_and_more_than_5000_raise_as_in_tabpfn(checkpoints):
    X, y = _data(n=1001)
    with pytest.warns(UserWarning, match="more than 1000 samples"):
        _est(checkpoints[0], n_estimators=1).fit(X, y)
    X, y = _data(n=5001)
    with pytest.raises(RuntimeError, match="more than 5000 samples"):
        _est(checkpoints[0]).fit(X, y)


def test_a_fit_state_of_a_checkpoint_file_reloads_as_the_same_estimator(checkpoints, tmp_path):
    est = _est(checkpoints[0], mode="oattention")
    before = _fit_predict(est)
    est.save_fit_state(tmp_path / "state.tabpfn_fit")
    loaded = OTabPFNRegressor.load_from_fit_state(tmp_path / "state.tabpfn_fit")
    assert type(loaded) is OTabPFNRegressor and loaded.settings_ == est.settings_
    X, _ = _data()
    np.testing.assert_array_equal(loaded.predict(X[35:]), before)


@pytest.mark.parametrize("mode", ["oattention", "full-o"])
def test_gradients_reach_an_upstream_module_through_a_patched_model(checkpoints, mode):
    torch.manual_seed(0)
    upstream = torch.nn.Linear(3, 3)
    X_train, X_test = upstream(torch.randn(30, 3)), upstream(torch.randn(8, 3))
    est = _est(checkpoints[0], mode=mode, n_estimators=1, differentiable_input=True)
    est.set_params(ignore_pretraining_limits=True)
    est.fit_with_differentiable_input(X_train, torch.randn(30))
    logits, _, _ = est.forward(X_test, use_inference_mode=True)
    logits.float().logsumexp(0).sum().backward()
    grad = upstream.weight.grad
    assert grad is not None and torch.isfinite(grad).all() and grad.abs().sum() > 0


def test_one_resolver_takes_every_model_path_and_gives_one_result_type(checkpoints, tmp_path):
    save_patched(checkpoints[0], tmp_path / "saved", mode="oattention", tau=0.5)
    specs = load_host(checkpoints[0])
    listed = resolve_model([checkpoints[1], str(tmp_path / "saved"), specs])
    assert type(listed) is retrofit.ResolvedModel and listed.is_list and listed.by_reference
    assert listed.entries[2] is specs and listed.saved_settings["tau"] == 0.5
    one = resolve_model(specs)
    assert type(one) is retrofit.ResolvedModel and one.entries == (specs,)
    with pytest.raises(retrofit.InvalidModelPathError, match="not one checkpoint file"):
        load_host(listed)


def test_a_file_of_another_suffix_is_refused_by_the_estimator_as_load_host_refuses_it(
    checkpoints, tmp_path
):
    other = tmp_path / "tiny_v3.pt"
    other.write_bytes(Path(checkpoints[0]).read_bytes())
    with pytest.raises(retrofit.CorruptCheckpointError, match=r"tiny_v3\.pt.*not a TabPFN"):
        load_host(str(other))
    with pytest.raises(retrofit.CorruptCheckpointError, match=r"tiny_v3\.pt.*not a TabPFN"):
        _fit_predict(_est(str(other)))


def test_a_bare_name_in_tabpfns_model_cache_loads_as_tabpfn_finds_it(checkpoints, cache_dir):
    (cache_dir / "cached_v3.safetensors").write_bytes(Path(checkpoints[0]).read_bytes())
    assert resolve_model("cached_v3.safetensors").checkpoint == cache_dir / "cached_v3.safetensors"
    assert load_host("cached_v3.safetensors").model is not None
