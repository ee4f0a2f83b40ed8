"""``tau`` is validated once, where it enters, and trusted from there to the last block.

Every validation of a presence temperature goes through
:func:`patches.presence.check_tau` (the settings' range check calls it too); the
count below wraps it wherever a module of the library holds it. A fit validates
``tau`` once (the estimator's entry check) and builds every block and O-module
from the settings resolved there; a prediction, whose every forward computes
presence, validates it no more. A user building an O-module directly still
has ``tau`` checked. Run on a tiny perturbed v3 checkpoint, float32, CPU.
"""

from __future__ import annotations

import importlib
import sys

import numpy as np
import pandas as pd
import pytest
import torch

from eval import cli
from patches import ONorm
from retrofit import OTabPFNRegressor
from tests.helpers.tiny_models import tiny_v3_checkpoint

TAU = 0.5


@pytest.fixture
def tau_checks(monkeypatch) -> list[float]:
    """The taus :func:`check_tau` is called with, from now on."""
    original = importlib.import_module("patches.presence").check_tau
    seen: list[float] = []

    def counting(tau):
        seen.append(tau)
        return original(tau)

    for module in list(sys.modules.values()):
        name = getattr(module, "__name__", "") or ""
        if name.split(".")[0] in ("patches", "retrofit", "eval"):
            if getattr(module, "check_tau", None) is original:
                monkeypatch.setattr(module, "check_tau", counting)
    return seen


@pytest.fixture
def checkpoint(tmp_path):
    return tiny_v3_checkpoint(tmp_path / "ckpt", seed=3)


def _data(n: int = 50, d: int = 3):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(n, d))
    y = X @ rng.normal(size=d) + 0.1 * rng.normal(size=n)
    return X[:35], y[:35], X[35:]


@pytest.mark.parametrize("mode", ["oattention", "full-o"])
def test_a_fit_validates_tau_once_and_its_predictions_never(checkpoint, tau_checks, mode):
    X, y, X_test = _data()
    est = OTabPFNRegressor(
        model_path=str(checkpoint),
        mode=mode,
        tau=TAU,
        n_estimators=2,
        device="cpu",
        inference_precision=torch.float32,
    )
    est.fit(X, y)
    assert tau_checks == [TAU]
    assert est.patch_report_.tau == TAU
    prediction = est.predict(X_test)
    assert np.isfinite(prediction).all()
    assert tau_checks == [TAU]  # every forward's presence trusts the settings


def test_the_predict_command_validates_tau_at_its_entry_and_the_estimators(
    checkpoint, tau_checks, tmp_path, capsys
):
    """The command checks its settings before it reads the data, the estimator at fit."""
    X, y, X_test = _data()
    frame = pd.DataFrame(X, columns=["a", "b", "c"]).assign(y=y)
    frame.to_csv(tmp_path / "train.csv", index=False)
    pd.DataFrame(X_test, columns=["a", "b", "c"]).to_csv(tmp_path / "test.csv", index=False)
    argv = [
        "predict",
        "--model", str(checkpoint),
        "--train", str(tmp_path / "train.csv"),
        "--test", str(tmp_path / "test.csv"),
        "--target", "y",
        "--tau", str(TAU),
        "--out", str(tmp_path / "out.csv"),
        "--precision", "float32",
        "--device", "cpu",
        "--quiet",
    ]  # fmt: skip
    assert cli.main(argv) == 0, capsys.readouterr().err
    assert tau_checks == [TAU, TAU]


def test_an_o_module_built_directly_still_checks_its_tau(tau_checks):
    with pytest.raises(ValueError, match="tau must be a finite number > 0"):
        ONorm(torch.nn.LayerNorm(4), tau=-1.0)
    norm = ONorm(torch.nn.LayerNorm(4), tau=TAU)
    assert tau_checks == [-1.0, TAU]
    h = torch.randn(3, 4)
    h[1] = 0.0
    out = norm(h)
    assert (out[1] == 0).all() and out[0].abs().sum() > 0
    assert tau_checks == [-1.0, TAU]  # the forward trusts the checked tau
