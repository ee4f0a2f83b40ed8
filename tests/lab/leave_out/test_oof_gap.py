"""``python -m lab oof-gap``: its peers, distances, records and refusals (tiny hosts)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from sklearn.model_selection import KFold

from eval.paper.datasets import load_dataset, split
from lab.cli import main
from lab.leave_out import oof_gap
from retrofit import OTabPFNRegressor, cross_val_predict
from tests.helpers.exactness import MODEL_ULPS
from tests.helpers.tiny_hosts import TINY_MAX_CLASSES, build_tiny_v2, save_tiny_v2_checkpoint


def _gap(model, out, *extra):
    argv = ["oof-gap", "--model", str(model), "--n-estimators", "2", "--folds", "3",
            "--out", str(out), *extra]  # fmt: skip
    return main(argv)


def test_a_regression_case_records_every_peer_and_the_transductive_one_is_cross_val_predict(
    tiny_v3_path, tmp_path, capsys
):
    out = tmp_path / "gap"
    extra = ["--datasets", "qsar_fish", "--seeds", "1", "--max-train-rows", "20"]
    assert _gap(tiny_v3_path, out, *extra) == 0
    assert "wrote" in capsys.readouterr().out
    report = json.loads((out / "oof_gap.json").read_text())
    (case,) = report["cases"]
    assert (case["dataset"], case["seed"], case["status"], case["train_rows"]) == (
        "qsar_fish",
        1,
        "ok",
        20,
    )
    assert set(case["peers"]) == set(oof_gap.PEERS)
    X, _, y, _ = split(load_dataset("qsar_fish"), 1)
    estimator = OTabPFNRegressor(mode="full-o", model_path=str(tiny_v3_path), device="cpu",
                                 n_estimators=2, inference_precision=torch.float32,
                                 ignore_pretraining_limits=True, random_state=1)  # fmt: skip
    want = cross_val_predict(estimator, X[:20], y[:20], cv=KFold(3, shuffle=True, random_state=1))
    rmse = float(np.sqrt(np.mean((want - y[:20]) ** 2)))
    assert case["peers"]["transductive"]["metric"] == pytest.approx(rmse, rel=1e-12)
    # per_fold is the refits within the float32 model bound, in units of the std.
    bound = MODEL_ULPS[torch.float32] * torch.finfo(torch.float32).eps * max(1, np.abs(want).max())
    assert case["largest_difference"]["per_fold - sklearn_refits"] <= bound / np.std(y[:20])
    md = (out / "oof_gap.md").read_text()
    assert "| qsar_fish | 1 | 20 |" in md and "first 20" in md


def test_a_classification_case_measures_probabilities_and_log_loss(tmp_path):
    path = tmp_path / "tiny_v2_classifier.safetensors"
    model = build_tiny_v2(max_num_classes=TINY_MAX_CLASSES)
    checkpoint = save_tiny_v2_checkpoint(model, path, max_num_classes=TINY_MAX_CLASSES)
    out = tmp_path / "gap"
    extra = ["--suite", "offline_cls6", "--datasets", "breast_cancer", "--seeds", "0",
             "--max-train-rows", "24"]  # fmt: skip
    assert _gap(checkpoint, out, *extra) == 0
    report = json.loads((out / "oof_gap.json").read_text())
    (case,) = report["cases"]
    assert report["task"] == "classification" and report["splitter"] == "StratifiedKFold"
    assert all(0 <= d <= 1 for d in case["largest_difference"].values())  # in probability
    assert case["peers"]["sklearn_refits"]["change"] == 0
    assert "log loss" in (out / "oof_gap.md").read_text()


def test_a_case_that_raises_is_recorded_failed_and_the_command_exits_1(
    tiny_v3_path, tmp_path, monkeypatch
):
    def fails(*args, **kwargs):
        raise RuntimeError("fold engine broke")

    monkeypatch.setattr(oof_gap, "cross_val_predict", fails)
    out = tmp_path / "gap"
    assert _gap(tiny_v3_path, out, "--cases", "1", "--max-train-rows", "10") == 1
    report = json.loads((out / "oof_gap.json").read_text())
    (case,) = report["cases"]  # --cases 1: the suite's first case only
    assert case["status"] == "failed" and case["error"] == "RuntimeError: fold engine broke"
    assert report["summary"]["failed"] == 1 and report["max_cases"] == 1
    assert "failed: RuntimeError: fold engine broke" in (out / "oof_gap.md").read_text()


@pytest.mark.parametrize(
    ("extra", "message"),
    [(["--folds", "1"], "--folds must be >= 2"), (["--cases", "0"], "--cases must be >= 1")],
)
def test_bad_options_are_one_line_and_exit_2(tiny_v3_path, tmp_path, capsys, extra, message):
    argv = ["oof-gap", "--model", str(tiny_v3_path), "--out", str(tmp_path / "o"), *extra]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and message in err
    assert not (tmp_path / "o").exists()
