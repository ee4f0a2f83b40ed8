"""The classifier host's training command: warm start, a short run, its card and curve."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from tabpfn import TabPFNClassifier
from tabpfn.checkpoint import Checkpoint

from hosttraining.classification import card as class_card
from hosttraining.classification import curve as class_curve
from hosttraining.classification import quality as class_quality
from hosttraining.classification import train as train_classifier
from hosttraining.classification.train import (
    TINY_CLASSIFIER_CONFIG,
    warm_start,
)
from hosttraining.common.in_prior import load_model
from hosttraining.common.loop import (
    TINY_MODEL_CONFIG,
    build_model,
    save_checkpoint,
)


def test_warm_start_copies_the_backbone_and_keeps_the_class_heads(tmp_path: Path) -> None:
    regressor = build_model(TINY_MODEL_CONFIG, seed=1)
    path = tmp_path / "reg_v3.safetensors"
    save_checkpoint(regressor, TINY_MODEL_CONFIG, path)
    classifier = build_model(TINY_CLASSIFIER_CONFIG, seed=2)
    transfer = warm_start(classifier, path)
    assert any(n.startswith("icl_blocks.") for n in transfer["copied"])
    assert all(
        n.split(".")[0] in {"many_class_decoder", "icl_y_encoder", "col_y_encoder"}
        for n in transfer["kept"]
    )
    assert {n.split(".")[0] for n in transfer["ignored"]} == {
        "output_projection", "icl_y_encoder", "col_y_encoder"
    }  # fmt: skip
    got, ref = classifier.state_dict(), regressor.state_dict()
    assert all(torch.equal(got[n], ref[n]) for n in transfer["copied"])


def test_a_short_run_writes_a_classifier_that_tabpfn_loads_and_its_card(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], _keep_threads: None
) -> None:
    out = tmp_path / "cls_v3.safetensors"
    argv = ["--out", str(out), "--model", "tiny", "--steps", "2", "--log-every", "1",
            "--init-from", "none"]  # fmt: skip
    assert train_classifier.main(argv) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["steps_done"] == 2 and summary["task"] == "classification"
    header = Checkpoint(out).load()
    assert header["config"]["max_num_classes"] == 10

    rng = np.random.default_rng(0)
    X = rng.normal(size=(90, 4))
    y = (X[:, 0] > 0).astype(int) + (X[:, 1] > 0.5)
    clf = TabPFNClassifier(model_path=str(out), inference_precision=torch.float32)
    proba = clf.fit(X[:60], y[:60]).predict_proba(X[60:])
    assert proba.shape == (30, 3) and np.allclose(proba.sum(axis=1), 1.0, atol=1e-5)

    quality = tmp_path / "quality.json"
    scores = class_quality.in_prior(load_model(checkpoint=out), count=2)
    assert set(scores) == {"tasks", "host", "prior", "logreg", "rf", "hgb"}
    quality.write_text(json.dumps({"in-prior": scores}), encoding="utf-8")
    card = tmp_path / "card" / "MODEL_CARD.md"
    assert class_card.main(["--checkpoint", str(out), "--quality", str(quality),
                            "--out", str(card)]) == 0  # fmt: skip
    text = card.read_text(encoding="utf-8")
    assert "--init-from none" in text and "held-out prior tasks" in text
    assert "shipped as this package's embedded classifier: no (a candidate)" in text
    assert "--out cls_v3.safetensors --model tiny" in text  # the run's own command
    assert (card.parent / class_card.LOSS_CURVE_NAME).is_file()
    assert not (card.parent / "loss_curve.png").exists()  # the regressor card's plot


def test_the_classifier_command_trains_on_tabicl_and_writes_its_held_out_curve(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "cls_v3.safetensors"
    argv = ["--out", str(out), "--model", "tiny", "--steps", "2", "--log-every", "1",
            "--init-from", "none", "--prior", "tabicl", "--min-rows", "60", "--max-rows", "100",
            "--test-rows", "20", "--max-features", "6", "--optimizer", "muon",
            "--lawa-every", "1", "--eval-tasks", "2", "--checkpoint-minutes", "0"]  # fmt: skip
    assert train_classifier.main(argv) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["prior_source"] == "tabicl" and summary["optimizer"] == "muon"
    evals = [json.loads(x) for x in out.with_name(out.name + ".evals.jsonl").open()]
    assert [(e["step"], e["weights"]) for e in evals] == [
        (1, "raw"), (1, "lawa"), (2, "raw"), (2, "lawa")
    ]  # fmt: skip
    assert all(np.isfinite(e[s]["log_loss"]) for e in evals for s in ("project", "tabicl"))
    baselines = json.loads(out.with_name(out.name + ".heldout_baselines.json").read_text())
    assert set(baselines["tabicl"]) == {"prior", "logreg", "rf"}
    log = [json.loads(x) for x in out.with_name(out.name + ".log.jsonl").open()]
    assert [r["tasks_seen"] for r in log] == [2, 4] and all("loss" in r for r in log)

    png = tmp_path / "curve.png"
    assert class_curve.main(["--checkpoint", str(out), "--png", str(png)]) == 0
    series = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    raw = series["suites"]["tabicl"]["raw"]
    assert raw["tasks_seen"] == [2, 4]
    assert raw["log_loss"] == [e["tabicl"]["log_loss"] for e in evals if e["weights"] == "raw"]
    assert series["baselines"]["tabicl"]["logreg"] == baselines["tabicl"]["logreg"]["log_loss"]
    assert png.stat().st_size > 0
    out.with_name(out.name + ".evals.jsonl").unlink()
    assert class_curve.main(["--checkpoint", str(out), "--png", str(png)]) == 2
    assert "--eval-tasks" in capsys.readouterr().err
