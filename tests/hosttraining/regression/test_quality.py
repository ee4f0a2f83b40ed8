"""The regressor host's quality comparison: every case runs, and a failed case is never averaged."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from tabpfn import validation

from eval.locations import DEFAULT_OUTPUT_ROOT
from hosttraining.regression import quality
from tests.helpers.commands import one_prog_error_line


def test_a_dev_set_over_tabpfns_cpu_guard_runs_whatever_the_shell_says(tiny_v3_path, monkeypatch):
    # wizmir trains on 1,095 rows, over tabpfn's CPU guard of 1,000 rows,
    # which its settings otherwise lift only from the environment.
    monkeypatch.setattr(validation.settings.tabpfn, "allow_cpu_large_dataset", False)
    rows = quality.run_cases(
        "dev",
        ["wizmir"],
        [0],
        tiny_v3_path,
        models=["host"],
        inference_config={"N_ESTIMATORS": 1},
        log=lambda line: None,
    )
    host = next(r for r in rows if r["model"] == "host")
    assert host["n_train"] > 1000
    assert "error" not in host and np.isfinite(host["rel_rmse"])


def _row(dataset: str, model: str, rel: float | None) -> dict:
    row = {"dataset": dataset, "seed": 0, "model": model, "seconds": 0.1}
    if rel is None:
        row["error"] = "RuntimeError: boom"
    else:
        row["rel_rmse"] = rel
    return row


def test_a_model_with_a_failed_case_has_no_mean():
    rows = [
        _row("a", "mean", 1.0),
        _row("a", "host", 0.5),
        _row("a", "rf", 0.4),
        _row("b", "mean", 1.0),
        _row("b", "host", None),
        _row("b", "rf", 0.6),
    ]
    summary = quality.summarize(rows)
    assert summary["failures"] == 1
    # The host's 0.5 on the one case it ran is not set beside RF's mean of two.
    assert summary["mean_rel_rmse"] == {"mean": 1.0, "host": None, "rf": pytest.approx(0.5)}
    assert summary["per_dataset"]["a"]["host"] == 0.5
    assert summary["per_dataset"]["b"]["host"] is None
    # The done-criterion says so rather than vanishing with the mean.
    assert summary["criterion"]["met"] is False and summary["criterion"]["host_le_rf"] is False
    assert summary["criterion"]["no_failures"] is False


def test_the_command_exits_1_and_keeps_the_file_when_a_case_failed(
    tiny_v3_path, tmp_path, monkeypatch, capsys
):
    rows = [_row("a", "mean", 1.0), _row("a", "host", None)]
    monkeypatch.setattr(quality, "run_cases", lambda *args, **kwargs: rows)
    argv = ["--suite", "dev", "--checkpoint", str(tiny_v3_path)]
    code = quality.main([*argv, "--models", "host", "--tag", "t", "--out-dir", str(tmp_path)])
    assert code == 1
    err = capsys.readouterr().err
    assert "1 of 2 cases failed (first: a seed 0 host: RuntimeError: boom)" in err
    written = json.loads((tmp_path / "dev" / "t.json").read_text())
    assert written["summary"]["failures"] == 1 and written["rows"] == rows

    monkeypatch.setattr(quality, "run_cases", lambda *args, **kwargs: rows[:1])
    assert quality.main([*argv, "--tag", "u", "--out-dir", str(tmp_path)]) == 0


def test_the_command_writes_under_the_untracked_folder_and_a_usage_error_is_one_line(capsys):
    assert Path(quality.RESULTS_DIR).parts[0] == DEFAULT_OUTPUT_ROOT.name
    assert quality.main(["--no-such-option"]) == 2
    one_prog_error_line(capsys.readouterr().err, "python -m hosttraining.regression.quality")
