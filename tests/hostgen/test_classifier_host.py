"""The embedded classifier host's recipe: class prior, warm start, training entry, card."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from tabpfn import TabPFNClassifier
from tabpfn.checkpoint import Checkpoint

from hostgen import class_card, class_quality, train_classifier
from hostgen.class_prior import (
    CLASS_PRIOR_V2,
    IGNORE,
    ClassPriorConfig,
    linear_task,
    sample_class_batch,
    to_classes,
)
from hostgen.in_prior import HELDOUT_KEY, load_model
from hostgen.prior import PriorConfig
from hostgen.train import TINY_MODEL_CONFIG, build_model, save_checkpoint
from hostgen.train_classifier import TINY_CLASSIFIER_CONFIG, warm_start
from retrofit.files import sha256_file
from retrofit.models import embedded

SMALL = ClassPriorConfig(regression=PriorConfig(max_rows=120, small_max_rows=80, version=2))


@pytest.fixture
def _keep_threads():
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def test_context_labels_are_every_code_below_k_and_unseen_query_classes_are_ignored() -> None:
    for i in range(6):
        batch = sample_class_batch(np.random.default_rng([7, i]), SMALL)
        for b, k in enumerate(batch.n_classes_B):
            train = batch.y_train_NB[:, b].long()
            assert sorted(set(train.tolist())) == list(range(k))
            test = batch.y_test_TB[:, b]
            assert test.dtype == torch.int64 and int(test.min()) >= IGNORE
            assert int(test.max()) < k
    again = sample_class_batch(np.random.default_rng([7, 5]), SMALL)
    assert torch.equal(again.y_test_TB, batch.y_test_TB)  # a batch depends on its seed only


def test_class_counts_span_two_to_ten_with_a_third_binary_and_imbalance() -> None:
    rng = np.random.default_rng(0)
    y_N = rng.normal(size=400)
    ks, smallest = [], []
    for _ in range(300):
        labels, k = to_classes(rng, y_N, 300, ClassPriorConfig(p_label_noise=0.0))
        ks.append(k)
        smallest.append(np.bincount(labels[labels != IGNORE]).min() / 400)
    assert min(ks) >= 1 and max(ks) == 10
    assert 0.25 < np.mean(np.array(ks) == 2) < 0.45
    assert np.mean(np.array(smallest) < 0.05) > 0.2  # imbalanced tasks are common


def test_version_2_mixes_wide_linear_batches_within_the_cell_bound() -> None:
    cfg = dataclasses.replace(CLASS_PRIOR_V2, regression=SMALL.regression)
    widths, linear = [], 0
    for i in range(60):
        batch = sample_class_batch(np.random.default_rng([8, i]), cfg)
        rows, _, d = batch.x_RBC.shape
        widths.append(d)
        linear += d > SMALL.regression.max_features
        assert rows * d <= max(cfg.linear_max_cells, 16 * d)
        for b, k in enumerate(batch.n_classes_B):
            assert sorted(set(batch.y_train_NB[:, b].long().tolist())) == list(range(k))
        assert torch.isfinite(batch.x_RBC).all()
    assert max(widths) > 40 and linear > 5  # wide tables are drawn, and often
    # Version 1 (p_linear = 0) never draws a linear batch.
    for i in range(30):
        old = sample_class_batch(np.random.default_rng([8, i]), SMALL)
        assert old.x_RBC.shape[2] <= SMALL.regression.max_features


def test_linear_tasks_carry_signal_a_linear_model_finds() -> None:
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    gains = []
    for i in range(12):
        rng = np.random.default_rng([9, i])
        x_ND, labels_N, k = linear_task(rng, 600, 12, 450, ClassPriorConfig(p_label_noise=0.0))
        assert x_ND.shape == (600, 12) and k >= 1
        keep = labels_N[450:] != IGNORE
        if k < 2:
            continue
        model = make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000))
        model.fit(x_ND[:450], labels_N[:450])
        majority = np.mean(labels_N[450:][keep] == np.bincount(labels_N[:450]).argmax())
        gains.append(model.score(x_ND[450:][keep], labels_N[450:][keep]) - majority)
    # Separations range from hard to easy: on most tasks a linear model beats the majority.
    assert np.mean(np.array(gains) > 0.05) > 0.6


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


def test_the_shipped_classifier_card_is_the_shipped_files_and_says_where_it_stands() -> None:
    path = embedded.embedded_model_path("classifier")  # verifies the digest
    digest = sha256_file(path)
    card = (path.parent / class_card.CARD_NAME).read_text(encoding="utf-8")
    # Beside the regressor's card and curve, under names of its own.
    assert (
        class_card.CARD_NAME != "MODEL_CARD.md" and class_card.LOSS_CURVE_NAME != "loss_curve.png"
    )
    assert (path.parent / "MODEL_CARD.md").is_file() and (path.parent / "loss_curve.png").is_file()
    assert (path.parent / class_card.LOSS_CURVE_NAME).is_file()
    assert f"sha256 `{digest}`" in card
    assert "shipped as this package's embedded classifier: yes" in card
    quality = json.loads((path.parent / "classifier_quality.json").read_text(encoding="utf-8"))
    host, logreg = (quality["offline_cls6"][m]["log_loss"] for m in ("host", "logreg"))
    assert f"log loss {host:.3f} on `offline_cls6`" in card
    assert f"against logistic regression's {logreg:.3f}" in card
    assert ("does not clear the bar" in card) == (host >= logreg)


def test_the_card_of_a_shipped_host_below_the_bar_says_so(tmp_path: Path) -> None:
    quality = tmp_path / "quality.json"
    scores = {"cases": 18, "host": {"log_loss": 0.5}, "logreg": {"log_loss": 0.3}}
    quality.write_text(json.dumps({"offline_cls6": scores}), encoding="utf-8")
    lines = class_card._standing_lines(quality, shipped=True)
    assert "log loss 0.500 on `offline_cls6` (18 cases)" in lines[0]
    assert "does not clear the bar" in lines[0] and "OTabPFNClassifier()" in lines[1]
    scores["host"]["log_loss"] = 0.2
    quality.write_text(json.dumps({"offline_cls6": scores}), encoding="utf-8")
    assert class_card._standing_lines(quality, shipped=True) == [
        "- where it stands: log loss 0.200 on `offline_cls6` (18 cases) against logistic "
        "regression's 0.300: it clears the bar (beat logistic regression)"
    ]


def test_held_out_class_tasks_use_seed_keys_no_training_run_reaches() -> None:
    first = class_quality.heldout_class_tasks(2)
    assert [t[2] for t in first] == [t[2] for t in class_quality.heldout_class_tasks(2)]
    assert HELDOUT_KEY > 2**30  # training seeds are small integers


def test_the_dev_suite_shares_no_dataset_with_offline_cls6() -> None:
    from eval.paper.datasets import OFFLINE_CLS6_DATASETS, load_dataset

    evaluation = {load_dataset(name).shape for name in OFFLINE_CLS6_DATASETS}
    for name in class_quality.DEV_DATASETS:
        X, y = class_quality.load_dev_dataset(name)
        assert X.shape not in evaluation and name not in OFFLINE_CLS6_DATASETS
        assert 2 <= len(np.unique(y)) <= 10
