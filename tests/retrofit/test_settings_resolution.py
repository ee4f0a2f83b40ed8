"""One resolution of the retrofit settings from every entry point.

An unset ``tau`` is the host class's default (0.1 on v2) whether the model is
patched by :func:`retrofit.patch`, the estimator, ``predict``, ``predict-batch``
or ``patch``; ``patch`` records the resolved tau in ``retrofit.json``. Run on a
tiny v2 checkpoint with its zero-initialised projections perturbed, in float32.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch

import retrofit
from eval import cli
from retrofit.errors import InvalidPatchConfigError, SettingsConflictError
from retrofit.regressor import OTabPFNRegressor
from retrofit.settings import DEFAULT_TAU_BY_HOST, resolve_settings
from tests.helpers.tiny_hosts import build_tiny_v2, save_tiny_v2_checkpoint

V2_TAU = DEFAULT_TAU_BY_HOST["TabPFNV2"]
FAST = ["--n-estimators", "1", "--precision", "float32", "--device", "cpu"]
FEATURES = ["a", "b", "c"]


@pytest.fixture(scope="module")
def v2_checkpoint(tmp_path_factory) -> str:
    folder = tmp_path_factory.mktemp("v2")
    return str(save_tiny_v2_checkpoint(build_tiny_v2(), folder / "tiny_v2_regressor.safetensors"))


@pytest.fixture
def data(tmp_path) -> dict[str, object]:
    rng = np.random.default_rng(0)
    X = rng.normal(size=(50, 3))
    y = X @ np.array([1.0, -2.0, 0.5]) + 0.1 * rng.normal(size=len(X))
    frame = pd.DataFrame(X, columns=FEATURES).assign(y=y)
    train, test = tmp_path / "train.csv", tmp_path / "test.csv"
    frame.iloc[:40].to_csv(train, index=False)
    frame.iloc[40:].to_csv(test, index=False)
    return {"train": train, "test": test, "frame": frame}


def _estimator_predictions(model: str, data, **settings) -> np.ndarray:
    frame = data["frame"]
    estimator = OTabPFNRegressor(
        model_path=model,
        n_estimators=1,
        device="cpu",
        random_state=0,
        inference_precision=torch.float32,
        **settings,
    ).fit(frame[FEATURES][:40].to_numpy(), frame["y"][:40].to_numpy())
    return estimator.predict(frame[FEATURES][40:].to_numpy())


def _differs(a: np.ndarray, b: np.ndarray) -> bool:
    return float(np.abs(a - b).max()) > 1e-4 * float(np.abs(b).max())


def test_an_unset_tau_resolves_to_the_host_classes_default_else_saved_else_given():
    unset = {"mode": None, "tau": None, "support": None, "eps_den": None}
    assert resolve_settings(unset, host="TabPFNV2").tau == V2_TAU
    assert resolve_settings(unset, host="TabPFNV3").tau == DEFAULT_TAU_BY_HOST["TabPFNV3"]
    assert resolve_settings({"tau": 3.0}, host="TabPFNV2").tau == 3.0
    saved = {"mode": "oattention", "tau": 0.5, "support": "mass", "eps_den": 0.0}
    assert resolve_settings(unset, saved, host="TabPFNV2").to_dict() == saved
    with pytest.raises(SettingsConflictError):
        resolve_settings({"tau": 2.0}, saved, host="TabPFNV2")
    # patch writes a new directory: what it is given replaces the saved setting.
    assert resolve_settings({"tau": 2.0}, saved, host="TabPFNV2", replace_saved=True).tau == 2.0
    with pytest.raises(InvalidPatchConfigError, match="tau is unset"):
        resolve_settings(unset)  # no host: no default tau to fall back on


def test_the_estimator_and_patch_give_a_v2_model_the_same_default_tau(v2_checkpoint, data):
    estimator = OTabPFNRegressor(model_path=v2_checkpoint, n_estimators=1, device="cpu")
    estimator.fit(data["frame"][FEATURES][:40].to_numpy(), data["frame"]["y"][:40].to_numpy())
    assert estimator.settings_["tau"] == V2_TAU == estimator.patch_report_.tau
    assert retrofit.patch(build_tiny_v2(), "full-o").tau == V2_TAU


def test_predict_without_tau_uses_the_v2_hosts_default(v2_checkpoint, data, tmp_path, capsys):
    out = tmp_path / "pred.csv"
    argv = ["predict", "--train", data["train"], "--target", "y", "--test", data["test"]]
    code = cli.main([str(a) for a in [*argv, "--model", v2_checkpoint, "--out", out, *FAST]])
    assert code == 0
    assert f"tau {V2_TAU}" in capsys.readouterr().err
    written = pd.read_csv(out)["prediction"].to_numpy()
    at_default = _estimator_predictions(v2_checkpoint, data, tau=V2_TAU)
    np.testing.assert_array_equal(written, at_default)
    assert _differs(written, _estimator_predictions(v2_checkpoint, data, tau=1.0))


def test_predict_batch_without_tau_agrees_with_predict_on_v2(v2_checkpoint, data, tmp_path):
    manifest = tmp_path / "m.json"
    entries = [{"name": "d0", "train": "train.csv", "test": "test.csv", "target": "y"}]
    manifest.write_text(json.dumps(entries))
    out_dir, pred = tmp_path / "out", tmp_path / "pred.csv"
    out_dir.mkdir()
    argv = ["predict-batch", manifest, "--out-dir", out_dir, "--model", v2_checkpoint]
    assert cli.main([str(a) for a in [*argv, *FAST, "--quiet"]]) == 0
    argv = ["predict", "--train", data["train"], "--target", "y", "--test", data["test"]]
    code = cli.main([str(a) for a in [*argv, "--model", v2_checkpoint, "--out", pred, *FAST]])
    assert code == 0
    batched = pd.read_csv(out_dir / "d0.csv")["prediction"].to_numpy()
    alone = pd.read_csv(pred)["prediction"].to_numpy()
    # tabpfn's fused forward against predict's: float32 rounding, not a tau apart.
    np.testing.assert_allclose(batched, alone, rtol=1e-5, atol=1e-5)
    assert _differs(batched, _estimator_predictions(v2_checkpoint, data, tau=1.0))


def test_patch_without_tau_saves_the_v2_hosts_default_and_predicts_with_it(
    v2_checkpoint, data, tmp_path
):
    out = tmp_path / "saved"
    assert cli.main(["patch", "--model", v2_checkpoint, "--out", str(out), "--quiet"]) == 0
    manifest = json.loads((out / "retrofit.json").read_text())
    assert manifest["settings"]["tau"] == V2_TAU
    np.testing.assert_array_equal(
        _estimator_predictions(str(out), data), _estimator_predictions(v2_checkpoint, data)
    )


@pytest.mark.parametrize("command", ["predict", "predict-batch", "patch"])
def test_help_says_an_unset_tau_is_the_hosts_default(command, capsys):
    with pytest.raises(SystemExit):
        cli.main([command, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "the host's default" in text
    assert "default 1.0)" not in text


def test_eval_and_report_without_tau_use_the_v2_hosts_default(v2_checkpoint, tmp_path, capsys):
    store = tmp_path / "store"
    argv = ["eval", "--model", v2_checkpoint, "--datasets", "qsar_fish", "--seeds", "0",
            "--n-estimators", "1", "--max-train-rows", "40", "--max-test-rows", "12",
            "--store", str(store), "--committed", "none", "--no-progress"]  # fmt: skip
    assert cli.main(argv) == 0
    rows = [json.loads(p.read_text()) for p in (store / "runs").glob("*.json")]
    assert sorted(r["tau"] for r in rows if r["mode"] != "none") == [V2_TAU, V2_TAU]
    session = json.loads(next((store / "sessions").glob("*.json")).read_text())
    assert session["host_default_tau"] == V2_TAU
    out = tmp_path / "report"
    report = ["report", "--store", str(store), "--out", str(out), "--committed", "none",
              "--partial"]  # fmt: skip
    assert cli.main(report) == 0
    table = (out / "cases.csv").read_text()
    assert f",{V2_TAU}," in table and ",1.0," not in table
