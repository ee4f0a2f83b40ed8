"""The regressor's curve command: a short recipe run's relative RMSE against tables seen."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hosttraining.regression import curve, pretrain


def test_the_curve_of_a_recipe_run_follows_its_evals_and_baselines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "reg_v3.safetensors"
    argv = ["--out", str(out), "--model", "tiny", "--steps", "2", "--threads", "1",
            "--prior", "tabicl", "--min-rows", "60", "--max-rows", "100", "--test-rows", "20",
            "--max-features", "4", "--lawa-every", "1", "--eval-tasks", "1",
            "--checkpoint-minutes", "0"]  # fmt: skip
    assert pretrain.main(argv) == 0
    capsys.readouterr()
    png = tmp_path / "curve.png"
    assert curve.main(["--checkpoint", str(out), "--png", str(png)]) == 0
    series = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    evals = [json.loads(x) for x in out.with_name(out.name + ".evals.jsonl").open()]
    baselines = json.loads(out.with_name(out.name + ".heldout_baselines.json").read_text())
    for suite in ("project", "tabicl"):
        for weights in ("raw", "lawa"):
            mine = [e for e in evals if e["weights"] == weights]
            assert series["suites"][suite][weights] == {
                "tasks_seen": [e["tasks_seen"] for e in mine],
                "rel_rmse": [e[suite]["rel_rmse"] for e in mine],
            }
        assert series["baselines"][suite] == {
            name: scores["rel_rmse"] for name, scores in baselines[suite].items()
        }
    assert png.stat().st_size > 0
    out.with_name(out.name + ".heldout_baselines.json").unlink()
    assert curve.main(["--checkpoint", str(out), "--png", str(png)]) == 2
    assert "--eval-tasks" in capsys.readouterr().err


def test_two_runs_on_the_same_tasks_share_one_picture(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    outs = []
    for name, width in (("narrow", "8"), ("wide", "16")):
        out = tmp_path / name / "reg_v3.safetensors"
        out.parent.mkdir()
        argv = ["--out", str(out), "--model", "tiny", "--embed-dim", width, "--steps", "2",
                "--threads", "1", "--prior", "tabicl", "--min-rows", "60", "--max-rows", "100",
                "--test-rows", "20", "--max-features", "4", "--lawa-every", "1",
                "--eval-tasks", "1", "--checkpoint-minutes", "0"]  # fmt: skip
        assert pretrain.main(argv) == 0
        outs.append(out)
    capsys.readouterr()
    png = tmp_path / "versus.png"
    assert (
        curve.main(["--checkpoint", str(outs[0]), "--versus", str(outs[1]), "--png", str(png)]) == 0
    )
    series = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert series["left_out"] == {}
    for suite in ("project", "tabicl"):
        assert list(series["suites"][suite]) == ["narrow", "wide"]
        for name, out in zip(("narrow", "wide"), outs, strict=True):
            lawa = [
                json.loads(x)
                for x in out.with_name(out.name + ".evals.jsonl").open()
                if json.loads(x)["weights"] == "lawa"
            ]
            assert series["suites"][suite][name]["rel_rmse"] == [e[suite]["rel_rmse"] for e in lawa]
    # Different widths learn differently: the picture compares two curves.
    assert series["suites"]["project"]["narrow"] != series["suites"]["project"]["wide"]
    assert png.stat().st_size > 0
