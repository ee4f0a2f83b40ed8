"""``tabpfn-retrofit predict`` for classification, on a tiny v2 classifier checkpoint.

The probabilities the command writes are ``OTabPFNClassifier.predict_proba`` on the
same data, settings and seed in the same process: the same computation on the same
shapes, compared within the classifier bound of ``tests/helpers/exactness.py``.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch

from eval.cli import main
from retrofit import OTabPFNClassifier
from tests.helpers.exactness import CLASSIFIER_PROBA_ULPS, assert_within_ulps
from tests.helpers.tiny_hosts import TINY_MAX_CLASSES, build_tiny_v2, save_tiny_v2_checkpoint

FAST = ["--n-estimators", "2", "--precision", "float32", "--device", "cpu", "--quiet"]
LABELS = np.array(["ant", "bee", "cat"])
N_TRAIN, N_TEST = 36, 12


@pytest.fixture(scope="module")
def classifier_checkpoint(tmp_path_factory):
    path = tmp_path_factory.mktemp("ckpt") / "tiny_v2_classifier.safetensors"
    model = build_tiny_v2(max_num_classes=TINY_MAX_CLASSES)
    return save_tiny_v2_checkpoint(model, path, max_num_classes=TINY_MAX_CLASSES)


@pytest.fixture
def files(tmp_path):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(N_TRAIN + N_TEST, 3))
    y = LABELS[(X[:, 0] > 0).astype(int) + (X[:, 1] > 1).astype(int)]
    frame = pd.DataFrame(X, columns=["a", "b", "c"]).assign(label=y)
    train, test = tmp_path / "train.csv", tmp_path / "test.csv"
    frame.iloc[:N_TRAIN].to_csv(train, index=False)
    frame.iloc[N_TRAIN:].to_csv(test, index=False)
    return train, test


def _predict(train, test, out, checkpoint, *extra):
    argv = ["predict", "--train", str(train), "--target", "label", "--out", str(out)]
    return main([*argv, "--test", str(test), "--model", str(checkpoint), *FAST, *extra])


@pytest.mark.parametrize("task", [[], ["--task", "classification"]], ids=["inferred", "given"])
def test_predict_writes_labels_and_class_probabilities(
    tmp_path, files, classifier_checkpoint, capsys, task
):
    train, test = files
    out = tmp_path / "pred.csv"
    assert _predict(train, test, out, classifier_checkpoint, *task) == 0
    written = pd.read_csv(out)
    train_frame, test_frame = pd.read_csv(train), pd.read_csv(test)
    est = OTabPFNClassifier(
        model_path=str(classifier_checkpoint),
        inference_precision=torch.float32,
        device="cpu",
        n_estimators=2,
        random_state=0,
    ).fit(train_frame.drop(columns="label"), train_frame["label"])
    proba = est.predict_proba(test_frame.drop(columns="label"))
    classes = list(est.classes_)
    assert list(written.columns) == ["row", "label", "prediction", *classes]
    assert_within_ulps(
        torch.from_numpy(written[classes].to_numpy()),
        torch.from_numpy(np.asarray(proba, dtype=np.float64)),
        ulps=CLASSIFIER_PROBA_ULPS[torch.float32],
        dtype=torch.float32,
    )
    assert list(written["prediction"]) == list(est.classes_[np.argmax(proba, axis=1)])
    accuracy = float(np.mean(written["prediction"] == test_frame["label"]))
    printed = capsys.readouterr().out.strip()
    assert printed == f"accuracy {accuracy:.6g} on {N_TEST} rows with a known label"


def test_a_holdout_is_classified_too(tmp_path, files, classifier_checkpoint):
    train, _ = files
    out = tmp_path / "pred.csv"
    argv = ["predict", "--train", str(train), "--target", "label", "--holdout", "0.25"]
    assert main([*argv, "--out", str(out), "--model", str(classifier_checkpoint), *FAST]) == 0
    written = pd.read_csv(out)
    assert len(written) == round(0.25 * N_TRAIN)
    probabilities = written.drop(columns=["row", "label", "prediction"]).to_numpy()
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, rtol=1e-6)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--output-type", "median"], "--output-type and --quantiles are for regression"),
        (["--quantiles", "0.5"], "--output-type and --quantiles are for regression"),
    ],
)
def test_regression_outputs_are_refused_for_a_classifier(
    tmp_path, files, classifier_checkpoint, capsys, extra, message
):
    train, test = files
    out = tmp_path / "pred.csv"
    assert _predict(train, test, out, classifier_checkpoint, *extra) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
    assert not out.exists()


def test_a_class_named_like_an_output_column_is_refused(tmp_path, classifier_checkpoint, capsys):
    frame = pd.DataFrame({"a": np.arange(12.0), "label": ["prediction", "other"] * 6})
    train, test = tmp_path / "train.csv", tmp_path / "test.csv"
    frame.to_csv(train, index=False)
    frame.drop(columns="label").to_csv(test, index=False)
    out = tmp_path / "pred.csv"
    assert _predict(train, test, out, classifier_checkpoint) == 2
    assert "class label(s) ['prediction']" in capsys.readouterr().err
    assert not out.exists()


def test_embedded_without_a_shipped_classifier_fails_in_one_line(
    tmp_path, files, capsys, embedded_dir
):
    train, test = files
    out = tmp_path / "pred.csv"
    argv = ["predict", "--train", str(train), "--target", "label", "--test", str(test)]
    argv += ["--model", "embedded"]
    assert main([*argv, "--out", str(out), "--task", "classification", "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert "ships no embedded classifier host" in err and len(err.splitlines()) == 1
    assert not out.exists()


def test_one_text_label_in_train_leaves_integer_test_labels_equal_to_their_class(
    tmp_path, classifier_checkpoint, capsys
):
    # The hostile tester's files: integer labels in both, one 'x' among the train
    # ones, so pandas reads the train column as text and the test column as integers;
    # the rare 'x' is absent from the test file. The command printed "accuracy 0".
    rng = np.random.default_rng(3)
    X = rng.normal(size=(N_TRAIN + N_TEST, 3))
    frame = pd.DataFrame(X, columns=["a", "b", "c"]).assign(label=(X[:, 0] > 0).astype(int))
    train_frame = frame.iloc[:N_TRAIN].astype({"label": object})
    train_frame.loc[5, "label"] = "x"
    train, test = tmp_path / "train.csv", tmp_path / "test.csv"
    train_frame.to_csv(train, index=False)
    frame.iloc[N_TRAIN:].to_csv(test, index=False)
    assert pd.read_csv(train)["label"].dtype.kind not in "iuf"  # the trap is set: text
    assert pd.read_csv(test)["label"].dtype.kind == "i"
    out = tmp_path / "pred.csv"
    assert _predict(train, test, out, classifier_checkpoint, "--task", "classification") == 0

    # The labels as the files show them: the same text in both files.
    y_train = pd.read_csv(train, dtype={"label": str})["label"]
    y_test = pd.read_csv(test, dtype={"label": str})["label"].to_numpy()
    est = OTabPFNClassifier(
        model_path=str(classifier_checkpoint),
        inference_precision=torch.float32,
        device="cpu",
        n_estimators=2,
        random_state=0,
    ).fit(pd.read_csv(train).drop(columns="label"), y_train)
    predicted = est.predict(pd.read_csv(test).drop(columns="label"))
    accuracy = float(np.mean(predicted == y_test))
    assert 0 < accuracy  # the tiny random host gets some right: 0 would be the old bug
    written = pd.read_csv(out, dtype=str)
    assert list(written["prediction"]) == list(predicted)
    assert list(written["label"]) == list(y_test)
    printed = capsys.readouterr().out.strip()
    assert printed == f"accuracy {accuracy:.6g} on {N_TEST} rows with a known label"


def test_patching_a_classifier_records_its_kind_and_names_the_estimator(
    tmp_path, files, classifier_checkpoint, capsys
):
    saved_dir = tmp_path / "retrofitted"
    argv = ["patch", "--model", str(classifier_checkpoint), "--mode", "full-o"]
    assert main([*argv, "--out", str(saved_dir), "--quiet"]) == 0
    printed = capsys.readouterr().out
    assert sorted(p.name for p in saved_dir.iterdir()) == ["retrofit.json"]
    manifest = json.loads((saved_dir / "retrofit.json").read_text())
    assert manifest["kinds"] == ["classifier"] and manifest["base"]["kind"] == "classifier"
    assert f"saved retrofitted classifier to {saved_dir}" in printed
    assert f"OTabPFNClassifier(model_path={str(saved_dir)!r})" in printed
    assert "OTabPFNRegressor" not in printed

    # What the hint says works: the saved classifier predicts as the patched checkpoint.
    train_frame, test_frame = (pd.read_csv(f) for f in files)

    def proba(model_path, **settings):
        est = OTabPFNClassifier(
            model_path=str(model_path),
            inference_precision=torch.float32,
            device="cpu",
            n_estimators=2,
            random_state=0,
            **settings,
        ).fit(train_frame.drop(columns="label"), train_frame["label"])
        return est.predict_proba(test_frame.drop(columns="label"))

    from_dir = proba(saved_dir)
    assert np.array_equal(from_dir, proba(classifier_checkpoint, mode="full-o"))
    assert not np.allclose(from_dir, proba(classifier_checkpoint, mode="none"), atol=1e-6)


def test_patch_help_names_both_estimators(capsys):
    with pytest.raises(SystemExit):
        main(["patch", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "OTabPFNClassifier(model_path=DIR)" in text
    assert "as an adapter" in text and "No weights are copied" in text


def test_float_written_test_labels_equal_the_integer_classes_of_a_train_file_with_text(
    tmp_path, classifier_checkpoint, capsys
):
    # pandas writes an integer label column with a missing cell as 0.0 / 1.0; beside a
    # train file with one text label every "1.0" missed its class "1": accuracy 0.
    rng = np.random.default_rng(4)
    X = rng.normal(size=(N_TRAIN + N_TEST, 3))
    frame = pd.DataFrame(X, columns=["a", "b", "c"]).assign(label=(X[:, 0] > 0).astype(int))
    train_frame = frame.iloc[:N_TRAIN].astype({"label": object})
    train_frame.loc[5, "label"] = "x"
    test_frame = frame.iloc[N_TRAIN:].astype({"label": float})
    test_frame.iloc[0, test_frame.columns.get_loc("label")] = np.nan
    train, test = tmp_path / "train.csv", tmp_path / "test.csv"
    train_frame.to_csv(train, index=False)
    test_frame.to_csv(test, index=False)
    assert "1.0" in test.read_text()  # the trap is set: floats in the test file
    out = tmp_path / "pred.csv"
    assert _predict(train, test, out, classifier_checkpoint, "--task", "classification") == 0
    written = pd.read_csv(out, dtype=str)
    known = written["label"].notna()
    assert set(written.loc[known, "label"]) <= {"0", "1"}
    accuracy = float(np.mean(written.loc[known, "prediction"] == written.loc[known, "label"]))
    assert accuracy > 0
    printed = capsys.readouterr().out.strip()
    assert printed == f"accuracy {accuracy:.6g} on {int(known.sum())} rows with a known label"
