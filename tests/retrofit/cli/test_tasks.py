"""``--task auto``: the task follows from the model and the target, and is printed with why.

A tiny v3.5 checkpoint (one model for both tasks, as the names ``embedded`` and
the version aliases are) classifies text labels and regresses numbers; a tiny
v3 regressor checkpoint regresses and refuses text labels, naming the way out.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from eval.cli import main
from tests.helpers.tiny_hosts import save_tiny_host_checkpoint

FAST = ["--n-estimators", "2", "--precision", "float32", "--device", "cpu"]
LABELS = np.array(["ant", "bee", "cat"])
N_TRAIN, N_TEST = 30, 10


@pytest.fixture(scope="module")
def both_checkpoint(tmp_path_factory):
    """A tiny v3.5 model: regressor and classifier in one."""
    path = tmp_path_factory.mktemp("ckpt") / "tiny-v3.5.safetensors"
    return save_tiny_host_checkpoint("tabpfn_v3_5", path)


def _files(folder, target_values) -> tuple:
    rng = np.random.default_rng(0)
    X = rng.normal(size=(N_TRAIN + N_TEST, 3))
    frame = pd.DataFrame(X, columns=["a", "b", "c"]).assign(y=target_values(X))
    train, test = folder / "train.csv", folder / "test.csv"
    frame.iloc[:N_TRAIN].to_csv(train, index=False)
    frame.iloc[N_TRAIN:].to_csv(test, index=False)
    return train, test


def _text_labels(X):
    return LABELS[(X[:, 0] > 0).astype(int) + (X[:, 1] > 1).astype(int)]


def _numbers(X):
    return X @ np.array([1.0, -2.0, 0.5])


def _predict(files, out, model, *extra, capsys):
    train, test = files
    argv = ["predict", "--train", str(train), "--test", str(test), "--target", "y"]
    code = main([*argv, "--out", str(out), "--model", str(model), *FAST, *extra])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _status(err: str) -> list[str]:
    return [line for line in err.splitlines() if "] task " in line]


def test_text_labels_are_classified_by_a_model_that_does_both(tmp_path, both_checkpoint, capsys):
    files = _files(tmp_path, _text_labels)
    out = tmp_path / "pred.csv"
    code, stdout, err = _predict(files, out, both_checkpoint, capsys=capsys)
    assert code == 0, err
    assert _status(err) == [
        f"[tabpfn-retrofit] task classification: target column 'y' in {files[0]} holds text "
        f"(data row 0: '{pd.read_csv(files[0])['y'][0]}')"
    ]
    written = pd.read_csv(out)
    classes = sorted(set(pd.read_csv(files[0])["y"]))
    assert list(written.columns) == ["row", "y", "prediction", *classes]
    assert stdout.startswith("accuracy ")


def test_numbers_are_regressed_by_a_model_that_does_both(tmp_path, both_checkpoint, capsys):
    files = _files(tmp_path, _numbers)
    code, stdout, err = _predict(files, tmp_path / "pred.csv", both_checkpoint, capsys=capsys)
    assert code == 0, err
    assert _status(err) == [
        "[tabpfn-retrofit] task regression: target column 'y' is numeric "
        "(for class labels give --task classification)"
    ]
    assert stdout.startswith("RMSE ")


def test_numbers_stay_regression_with_a_regressor(tmp_path, tiny_v3_path, capsys):
    files = _files(tmp_path, _numbers)
    code, stdout, err = _predict(files, tmp_path / "pred.csv", tiny_v3_path, capsys=capsys)
    assert code == 0, err
    assert _status(err) == [
        f"[tabpfn-retrofit] task regression: --model {tiny_v3_path} is a regressor"
    ]
    assert stdout.startswith("RMSE ")


def _refused(code: int, err: str, *words: str) -> None:
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("tabpfn-retrofit predict: error: "), err
    for word in words:
        assert word in err, err


def test_text_labels_for_a_regressor_are_refused_naming_the_way_out(tmp_path, tiny_v3_path, capsys):
    files = _files(tmp_path, _text_labels)
    out = tmp_path / "pred.csv"
    code, _, err = _predict(files, out, tiny_v3_path, "--quiet", capsys=capsys)
    _refused(code, err, "target column 'y'", "is not numeric", "is a regressor", "classifier")
    assert not out.exists()


def test_task_classification_asked_of_a_regressor_names_its_kind_and_the_way_out(
    tmp_path, tiny_v3_path, capsys
):
    files = _files(tmp_path, _numbers)
    out = tmp_path / "pred.csv"
    code, _, err = _predict(
        files, out, tiny_v3_path, "--task", "classification", "--quiet", capsys=capsys
    )
    _refused(code, err, "--task classification", "regressor only", "--task regression")
    assert not out.exists()


def test_a_target_mixing_numbers_and_text_asks_for_the_task(tmp_path, both_checkpoint, capsys):
    files = _files(tmp_path, lambda X: np.where(X[:, 0] > 1.5, "five", "1"))
    out = tmp_path / "pred.csv"
    code, _, err = _predict(files, out, both_checkpoint, "--quiet", capsys=capsys)
    _refused(code, err, "mixes numbers and text", "'five'", "--task classification")
    assert not out.exists()


def test_regression_asked_of_text_labels_names_task_classification(
    tmp_path, both_checkpoint, capsys
):
    files = _files(tmp_path, _text_labels)
    out = tmp_path / "pred.csv"
    code, _, err = _predict(
        files, out, both_checkpoint, "--task", "regression", "--quiet", capsys=capsys
    )
    _refused(code, err, "is not numeric", "--task classification")


def test_a_batch_of_text_and_numeric_targets_asks_for_the_task(tmp_path, both_checkpoint, capsys):
    entries = []
    for name, values in (("numbers", _numbers), ("labels", _text_labels)):
        folder = tmp_path / name
        folder.mkdir()
        train, test = _files(folder, values)
        entries.append({"name": name, "train": str(train), "test": str(test)})
    manifest = tmp_path / "m.json"
    manifest.write_text(json.dumps({"target": "y", "datasets": entries}))
    argv = ["predict-batch", str(manifest), "--out-dir", str(tmp_path / "out")]
    code = main([*argv, "--model", str(both_checkpoint), *FAST, "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    # One target column named (the tester saw "target column 'label, y'"), and only the
    # --task that can run both (the numbers as class labels); regression cannot run text.
    assert "target column 'y' holds text in dataset 1 (labels)" in err
    assert "but the target column 'y' of dataset 0 (numbers)" in err
    assert "give --task classification if those numbers are class labels too" in err
    assert "--task regression" not in err


def test_patching_a_model_that_does_both_names_both_estimators(tmp_path, both_checkpoint, capsys):
    saved_dir = tmp_path / "retrofitted"
    assert main(["patch", "--model", str(both_checkpoint), "--out", str(saved_dir), "--quiet"]) == 0
    printed = capsys.readouterr().out
    assert sorted(p.name for p in saved_dir.iterdir()) == ["retrofit.json"]
    manifest = json.loads((saved_dir / "retrofit.json").read_text())
    assert manifest["kinds"] == ["regressor", "classifier"]
    assert f"saved retrofitted regressor and classifier to {saved_dir}" in printed
    for estimator in ("OTabPFNRegressor", "OTabPFNClassifier"):
        assert f"{estimator}(model_path={str(saved_dir)!r})" in printed


def test_a_batch_of_text_labels_is_classified_by_a_model_that_does_both(
    tmp_path, both_checkpoint, capsys
):
    entries = []
    for name in ("first", "second"):
        folder = tmp_path / name
        folder.mkdir()
        train, test = _files(folder, _text_labels)
        entries.append({"name": name, "train": str(train), "test": str(test)})
    manifest = tmp_path / "m.json"
    manifest.write_text(json.dumps({"target": "y", "datasets": entries}))
    out = tmp_path / "out"
    argv = ["predict-batch", str(manifest), "--out-dir", str(out), "--model", str(both_checkpoint)]
    assert main([*argv, *FAST]) == 0
    err = capsys.readouterr().err
    assert _status(err) == [
        f"[tabpfn-retrofit predict-batch] task classification: target column 'y' in "
        f"dataset 0 (first) {entries[0]['train']} holds text (data row 0: "
        f"'{pd.read_csv(entries[0]['train'])['y'][0]}')"
    ]
    classes = sorted(set(pd.read_csv(entries[0]["train"])["y"]))
    assert list(pd.read_csv(out / "first.csv").columns) == ["row", "y", "prediction", *classes]
