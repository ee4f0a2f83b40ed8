"""``python -m lab intervals``: its cases, its counts and its refusals (tiny host)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from sklearn.model_selection import KFold

from eval.paper.datasets import load_dataset, split
from lab.cli import main
from lab.leave_out import interval_coverage
from retrofit import OTabPFNRegressor, prediction_intervals


def test_the_intervals_command_records_each_methods_coverage_of_the_cut_test_rows(
    tiny_v3_path, tmp_path, capsys
):
    out = tmp_path / "leave_out"
    argv = ["intervals", "--model", str(tiny_v3_path), "--datasets", "qsar_fish", "--seeds", "1",
            "--max-train-rows", "15", "--max-test-rows", "30", "--n-estimators", "1",
            "--folds", "3", "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    assert "wrote" in capsys.readouterr().out
    report = json.loads((out / "interval_coverage.json").read_text())
    (case,) = report["cases"]
    assert (case["dataset"], case["seed"], case["status"]) == ("qsar_fish", 1, "ok")
    assert (case["train_rows"], case["test_rows"]) == (15, 30)
    assert set(case["methods"]) == {"jackknife+", "cv+", "split"}
    # Recompute the CV+ case by hand: the seeded prefix of the split, KFold(3).
    X_train, X_test, y_train, y_test = split(load_dataset("qsar_fish"), 1)
    estimator = OTabPFNRegressor(mode="full-o", model_path=str(tiny_v3_path), device="cpu",
                                 n_estimators=1, inference_precision=torch.float32,
                                 ignore_pretraining_limits=True, random_state=1)  # fmt: skip

    got = prediction_intervals(
        estimator, X_train[:15], y_train[:15], X_test[:30], alpha=0.1, method="cv+",
        cv=KFold(3, shuffle=True, random_state=1),
    )  # fmt: skip
    covered = int(got.covers(y_test[:30]).sum())
    assert case["methods"]["cv+"]["covered"] == covered
    assert case["methods"]["cv+"]["mean_width"] == pytest.approx(float(np.mean(got.width_Q)))
    summary = report["summary"]["cv+"]
    assert summary["test_rows"] == 30 and summary["pooled_coverage"] == covered / 30
    md = (out / "interval_coverage.md").read_text()
    assert "| qsar_fish | 1 | 15 | 30 |" in md and "first 15" in md


def test_a_case_that_raises_is_recorded_failed_and_the_command_exits_1(
    tiny_v3_path, tmp_path, monkeypatch
):
    def fails(*args, **kwargs):
        raise RuntimeError("fold engine broke")

    monkeypatch.setattr(interval_coverage, "prediction_intervals", fails)
    out = tmp_path / "leave_out"
    argv = ["intervals", "--model", str(tiny_v3_path), "--datasets", "concrete", "--seeds", "0",
            "--max-train-rows", "10", "--max-test-rows", "5", "--out", str(out)]  # fmt: skip
    assert main(argv) == 1
    report = json.loads((out / "interval_coverage.json").read_text())
    (case,) = report["cases"]
    assert case["status"] == "failed" and case["error"] == "RuntimeError: fold engine broke"
    assert report["summary"]["failed"] == 1
    assert "failed: RuntimeError: fold engine broke" in (out / "interval_coverage.md").read_text()


@pytest.mark.parametrize(
    ("extra", "message"),
    [(["--alpha", "1.5"], "--alpha must be in (0, 1)"), (["--folds", "1"], "--folds must be >= 2")],
)
def test_bad_options_are_one_line_and_exit_2(tiny_v3_path, tmp_path, capsys, extra, message):
    argv = ["intervals", "--model", str(tiny_v3_path), "--out", str(tmp_path / "o"), *extra]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and message in err
    assert not (tmp_path / "o").exists()
