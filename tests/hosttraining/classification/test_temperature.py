"""The classifier host's temperature: fitted on held-out TabICL tasks and stored."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from tabpfn.checkpoint import Checkpoint

from hosttraining.classification import temperature
from hosttraining.classification.train import TINY_CLASSIFIER_CONFIG
from hosttraining.common.in_prior import HELDOUT_KEY
from hosttraining.common.loop import build_model, save_checkpoint
from hosttraining.priors.tabicl import TabICLPriorConfig, heldout_tabicl_tasks

SMALL = TabICLPriorConfig(min_rows=60, max_rows=100, test_rows=20, max_features=6)


def test_the_fitted_temperature_recovers_the_one_the_labels_were_drawn_at() -> None:
    gen = torch.Generator().manual_seed(1)
    logits = []
    for _ in range(4):
        z_TK = torch.randn(2000, 4, generator=gen, dtype=torch.float64) * 2.0
        y_T = torch.multinomial(torch.softmax(z_TK, dim=-1), 1, generator=gen)[:, 0].numpy()
        logits.append((3.0 * z_TK, y_T))  # overconfident by a factor 3
    fitted = temperature.fit_temperature(logits)
    assert abs(fitted - 3.0) < 0.3, fitted
    assert temperature.mean_log_loss(logits, fitted) < temperature.mean_log_loss(logits, 1.0)


def test_the_temperature_command_fits_on_held_out_tabicl_tasks_and_stores_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "cls_v3.safetensors"
    model = build_model(TINY_CLASSIFIER_CONFIG, seed=0)
    record = {"prior_source": "tabicl", "prior": dataclasses.asdict(SMALL)}
    save_checkpoint(model, TINY_CLASSIFIER_CONFIG, path, extra=record)
    before = Checkpoint(path).load()
    assert temperature.main(["--checkpoint", str(path), "--count", "2", "--write"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["tasks"] == 2 and result["log_loss_fitted"] <= result["log_loss_at_1"]
    after = Checkpoint(path).load()
    assert after["inference_config"]["SOFTMAX_TEMPERATURE"] == result["temperature"] != 1.0
    assert all(
        torch.equal(before["state_dict"][k], after["state_dict"][k]) for k in before["state_dict"]
    )
    curve = heldout_tabicl_tasks(2, SMALL, HELDOUT_KEY)
    fitted_on = temperature.calibration_tasks(record, 2)
    assert not any(np.array_equal(a[0], b[0]) for a in curve for b in fitted_on)
