"""``tabpfn-retrofit predict-batch`` for classification, on a tiny v2 classifier checkpoint."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch

from eval.cli import main
from retrofit import OTabPFNClassifier
from retrofit.cli.tasks import model_kinds
from tests.helpers.exactness import CLASSIFIER_PROBA_ULPS, assert_within_ulps
from tests.helpers.tiny_hosts import TINY_MAX_CLASSES, build_tiny_v2, save_tiny_v2_checkpoint

# (train rows, test rows, features, classes)
SHAPES = [(30, 6, 3, 2), (45, 9, 4, 4), (14, 4, 3, 3)]
LABELS = np.array(["ant", "bee", "cat", "dog"])


@pytest.fixture(scope="module")
def classifier_checkpoint(tmp_path_factory):
    path = tmp_path_factory.mktemp("ckpt") / "tiny_v2_classifier.safetensors"
    model = build_tiny_v2(max_num_classes=TINY_MAX_CLASSES)
    return save_tiny_v2_checkpoint(model, path, max_num_classes=TINY_MAX_CLASSES)


def _write_datasets(folder, shapes=SHAPES, seed=0):
    rng = np.random.default_rng(seed)
    entries = []
    for i, (n, m, c, k) in enumerate(shapes):
        X = rng.normal(size=(n + m, c))
        y = rng.integers(0, k, size=n + m)
        y[:k] = np.arange(k)
        frame = pd.DataFrame(X, columns=[f"x{j}" for j in range(c)])
        frame["y"] = LABELS[y]
        frame[:n].to_csv(folder / f"d{i}_train.csv", index=False)
        frame[n:].to_csv(folder / f"d{i}_test.csv", index=False)
        entries.append({"name": f"d{i}", "train": f"d{i}_train.csv", "test": f"d{i}_test.csv"})
    return entries


def _run(manifest, out, checkpoint, *extra):
    argv = ["predict-batch", str(manifest), "--out-dir", str(out), "--model", str(checkpoint)]
    argv += ["--precision", "float32", "--device", "cpu", "--n-estimators", "2", "--quiet"]
    return main([*argv, "--max-padded-fraction", "0.9", *extra])


def test_the_task_is_the_models(classifier_checkpoint, tiny_v3_path):
    assert model_kinds(str(classifier_checkpoint)) == ("classifier",)
    assert model_kinds(str(tiny_v3_path)) == ("regressor",)
    assert model_kinds("embedded") == ("regressor", "classifier")


@pytest.mark.parametrize("task", [[], ["--task", "classification"]], ids=["inferred", "given"])
def test_predict_batch_writes_class_probabilities_matching_predict_proba(
    tmp_path, classifier_checkpoint, task
):
    entries = _write_datasets(tmp_path)
    manifest = tmp_path / "m.json"
    manifest.write_text(json.dumps({"target": "y", "datasets": entries}))
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    out = tmp_path / "out"
    assert _run(manifest, out, classifier_checkpoint, *task) == 0
    for entry, (_, _, _, k) in zip(entries, SHAPES, strict=True):
        written = pd.read_csv(out / f"{entry['name']}.csv")
        train = pd.read_csv(tmp_path / entry["train"])
        test = pd.read_csv(tmp_path / entry["test"])
        est = OTabPFNClassifier(
            model_path=str(classifier_checkpoint),
            inference_precision=torch.float32,
            device="cpu",
            n_estimators=2,
        ).fit(train.drop(columns="y"), train["y"])
        alone = est.predict_proba(test.drop(columns="y"))
        assert list(written.columns) == ["row", "y", "prediction", *LABELS[:k]]
        assert list(est.classes_) == list(LABELS[:k])
        assert_within_ulps(
            torch.from_numpy(written[list(LABELS[:k])].to_numpy()),
            torch.from_numpy(alone.astype(np.float64)),
            ulps=CLASSIFIER_PROBA_ULPS[torch.float32],
            dtype=torch.float32,
        )
        np.testing.assert_array_equal(written["prediction"], est.predict(test.drop(columns="y")))
        np.testing.assert_array_equal(written["y"], test["y"])
    # The inputs are as they were.
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()} == before


def test_a_prediction_file_may_not_replace_an_input(tmp_path, classifier_checkpoint, capsys):
    entries = _write_datasets(tmp_path)
    entries[1]["name"] = "d1_train"  # its prediction file would be d1_train.csv
    manifest = tmp_path / "m.json"
    manifest.write_text(json.dumps({"target": "y", "datasets": entries}))
    before = (tmp_path / "d1_train.csv").read_bytes()
    assert _run(manifest, tmp_path, classifier_checkpoint, "--force") == 2
    assert "would replace the train file of dataset 1" in capsys.readouterr().err
    assert (tmp_path / "d1_train.csv").read_bytes() == before


def test_a_class_named_like_an_output_column_is_refused(tmp_path, classifier_checkpoint, capsys):
    entries = _write_datasets(tmp_path)
    train = pd.read_csv(tmp_path / "d2_train.csv")
    train.loc[train["y"] == "ant", "y"] = "prediction"
    train.to_csv(tmp_path / "d2_train.csv", index=False)
    manifest = tmp_path / "m.json"
    manifest.write_text(json.dumps({"target": "y", "datasets": entries}))
    out = tmp_path / "out"
    assert _run(manifest, out, classifier_checkpoint) == 2
    err = capsys.readouterr().err
    assert "dataset 2 (d2)" in err and "name an output column" in err
    assert not out.exists()


def test_same_shape_files_of_other_class_sets_or_label_kinds_are_classified(
    tmp_path, classifier_checkpoint
):
    # One shape, three class sets: text labels, integer labels, fewer text labels.
    entries = _write_datasets(tmp_path, shapes=[(30, 6, 3, 3), (30, 6, 3, 3), (30, 6, 3, 2)])
    for part in ("train", "test"):
        as_ints = pd.read_csv(tmp_path / f"d1_{part}.csv")
        as_ints["y"] = as_ints["y"].map({label: k for k, label in enumerate(LABELS)})
        as_ints.to_csv(tmp_path / f"d1_{part}.csv", index=False)
    manifest = tmp_path / "m.json"
    manifest.write_text(json.dumps({"target": "y", "datasets": entries}))
    out = tmp_path / "out"
    assert _run(manifest, out, classifier_checkpoint) == 0
    for entry in entries:
        written = pd.read_csv(out / f"{entry['name']}.csv")
        train = pd.read_csv(tmp_path / entry["train"])
        test = pd.read_csv(tmp_path / entry["test"])
        est = OTabPFNClassifier(
            model_path=str(classifier_checkpoint),
            inference_precision=torch.float32,
            device="cpu",
            n_estimators=2,
        ).fit(train.drop(columns="y"), train["y"])
        columns = [str(c) for c in est.classes_]
        assert list(written.columns) == ["row", "y", "prediction", *columns]
        assert_within_ulps(
            torch.from_numpy(written[columns].to_numpy()),
            torch.from_numpy(est.predict_proba(test.drop(columns="y")).astype(np.float64)),
            ulps=CLASSIFIER_PROBA_ULPS[torch.float32],
            dtype=torch.float32,
        )
