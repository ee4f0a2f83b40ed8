"""What ``predict`` and ``predict-batch`` say about the data and the run before and while fitting.

Each was silent, or spoke tabpfn's Python, on main (issue 48's command-line findings):

* a column of numbers with a stray text cell (a typo, a ``?``) is refused in one
  line naming the column, the data row and the cell (it became a categorical of
  every distinct number), unless ``--categorical`` names it;
* an existing ``--out`` is replaced only with ``--force``, as ``predict-batch``'s
  files are;
* a class that ``--holdout`` or an ``--oof`` fold leaves without a train row,
  tabpfn's CPU row warning (above 1,000 train rows from v3 on, which docs/cli.md
  promises) and a ``--tau`` that ``--mode none`` ignores each reach stderr as
  one warning line, and the run goes on;
* a manifest mixing text and numeric targets names each target column and the
  one ``--task`` that can run both.

Tiny v3 (regressor) and v2 (classifier) checkpoints, or the embedded host, one
float32 estimator on the CPU.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from eval.cli import main
from tests.helpers.commands import FAST, one_error_line
from tests.helpers.tiny_hosts import TINY_MAX_CLASSES, build_tiny_v2, save_tiny_v2_checkpoint


@pytest.fixture(scope="module")
def classifier_checkpoint(tmp_path_factory):
    path = tmp_path_factory.mktemp("ckpt") / "tiny_v2_classifier.safetensors"
    model = build_tiny_v2(max_num_classes=TINY_MAX_CLASSES)
    return save_tiny_v2_checkpoint(model, path, max_num_classes=TINY_MAX_CLASSES)


def _run(capsys, *argv) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _predict(train, target, model, out, *extra):
    return ["predict", "--train", train, "--target", target, "--out", out, "--model", model,
            *FAST, *extra]  # fmt: skip


def _with_stray_cell(path, column, row, cell) -> None:
    frame = pd.read_csv(path)
    frame[column] = frame[column].astype(object)
    frame.loc[row, column] = cell
    frame.to_csv(path, index=False)


@pytest.mark.parametrize("cell", ["x", "?"])
def test_a_numeric_column_with_a_stray_text_cell_is_refused_naming_column_row_and_cell(
    csv_data, model_arg, capsys, cell
):
    _with_stray_cell(csv_data["train"], "b", 7, cell)
    out = csv_data["train"].parent / "p.csv"
    argv = _predict(csv_data["train"], "y", model_arg, out, "--test", csv_data["test"])
    code, _, err = _run(capsys, *argv)
    assert code == 2
    one_error_line(err, "predict")
    assert f"feature column 'b' in {csv_data['train']} holds numbers but text in data row 7" in err
    assert f"({cell!r})" in err and "--categorical b" in err
    assert not out.exists()
    # Declared categorical, the column is taken as it is: its text is categories.
    assert _run(capsys, *argv, "--categorical", "b")[0] == 0
    # The test file is read alike.
    _with_stray_cell(csv_data["test"], "c", 2, "n/a ")
    code, _, err = _run(capsys, *argv, "--categorical", "b", "--force")
    assert code == 2 and f"feature column 'c' in {csv_data['test']}" in err and "row 2" in err


def test_a_column_mostly_of_text_stays_text_for_tabpfn(csv_data, model_arg, capsys):
    frame = pd.read_csv(csv_data["train"])
    frame["city"] = ["paris", "rome", "oslo"] * 9 + ["1", "2", "3"]  # codes among names
    frame.to_csv(csv_data["train"], index=False)
    test = pd.read_csv(csv_data["test"]).assign(city=["rome"] * 10)
    test.to_csv(csv_data["test"], index=False)
    out = csv_data["train"].parent / "p.csv"
    argv = _predict(csv_data["train"], "y", model_arg, out, "--test", csv_data["test"])
    assert _run(capsys, *argv)[0] == 0 and out.exists()


def test_an_existing_out_is_replaced_only_with_force(csv_data, model_arg, capsys):
    out = csv_data["train"].parent / "p.csv"
    out.write_text("mine\n")
    argv = _predict(csv_data["train"], "y", model_arg, out, "--test", csv_data["test"])
    code, _, err = _run(capsys, *argv)
    assert code == 2 and f"--out {out} exists; give --force to replace it" in err
    one_error_line(err, "predict")
    assert out.read_text() == "mine\n"
    assert _run(capsys, *argv, "--force")[0] == 0
    assert list(pd.read_csv(out).columns) == ["row", "y", "prediction"]


def _rare_class_file(folder) -> str:
    rng = np.random.default_rng(0)
    X = rng.normal(size=(30, 2))
    label = np.where(X[:, 0] > 0, "ant", "bee")
    label[7] = "cat"  # one row of its class
    path = folder / "classes.csv"
    pd.DataFrame(X, columns=["a", "b"]).assign(label=label).to_csv(path, index=False)
    return path


def test_a_class_held_out_whole_by_holdout_warns_in_one_line(
    tmp_path, classifier_checkpoint, capsys
):
    train = _rare_class_file(tmp_path)
    # Seed 1's 8 held-out rows of 30 hold row 7, the one row of class 'cat'.
    assert 7 in np.random.default_rng(1).permutation(30)[:8]
    argv = _predict(train, "label", classifier_checkpoint, tmp_path / "p.csv", "--holdout", "0.25")
    code, _, err = _run(capsys, *argv, "--seed", "1")
    assert code == 0
    assert err == (
        "tabpfn-retrofit predict: warning: --holdout 0.25 holds out every row of class 'cat', "
        "so the model cannot predict it; give another --seed, a smaller --holdout or more "
        "rows of it\n"
    )
    assert _run(capsys, *argv, "--seed", "0", "--force")[2] == ""  # seed 0 keeps it in train


def test_a_class_an_oof_fold_lacks_warns_naming_the_fold(tmp_path, classifier_checkpoint, capsys):
    train = _rare_class_file(tmp_path)
    argv = _predict(train, "label", classifier_checkpoint, tmp_path / "p.csv", "--oof", "3")
    code, _, err = _run(capsys, *argv)
    assert code == 0 and err.count("\n") == 1
    assert err.startswith("tabpfn-retrofit predict: warning: cross_val_predict: fold ")
    assert "train rows hold no row of class 'cat'" in err


def test_tabpfns_cpu_row_warning_reaches_stderr(tmp_path, model_arg, capsys):
    rng = np.random.default_rng(1)
    frame = pd.DataFrame(rng.normal(size=(1010, 2)), columns=["a", "b"])
    frame["y"] = frame["a"] - frame["b"]
    frame.iloc[:1001].to_csv(tmp_path / "train.csv", index=False)
    frame.iloc[1001:].to_csv(tmp_path / "test.csv", index=False)
    argv = _predict(tmp_path / "train.csv", "y", model_arg, tmp_path / "p.csv")
    code, _, err = _run(capsys, *argv, "--test", tmp_path / "test.csv")
    assert code == 0
    assert err.startswith(
        "tabpfn-retrofit predict: warning: tabpfn: Running on CPU with more than 1000 samples "
        "may be slow."
    )
    assert err.count("\n") == 1


def test_a_tau_that_mode_none_ignores_warns(csv_data, model_arg, capsys):
    argv = _predict(csv_data["train"], "y", model_arg, csv_data["train"].parent / "p.csv")
    code, _, err = _run(capsys, *argv, "--test", csv_data["test"], "--mode", "none", "--tau", "2")
    assert code == 0
    assert err == (
        "tabpfn-retrofit predict: warning: OTabPFNRegressor: tau=2.0 has no effect with "
        "mode='none' (the unpatched host); it applies to mode='full-o' and 'oattention' only\n"
    )


def test_a_manifest_of_text_and_numeric_targets_names_each_column_and_the_task_that_runs_both(
    tmp_path, csv_data, capsys
):
    labels = _rare_class_file(tmp_path)
    manifest = tmp_path / "m.json"
    manifest.write_text(json.dumps([
        {"name": "classes", "train": str(labels), "test": str(labels), "target": "label"},
        {"name": "numbers", "train": str(csv_data["train"]), "test": str(csv_data["test"]),
         "target": "y"},
    ]))  # fmt: skip
    code, _, err = _run(capsys, "predict-batch", manifest, "--out-dir", tmp_path / "o", *FAST)
    assert code == 2
    one_error_line(err, "predict-batch")
    assert "'label, y'" not in err
    assert f"target column 'label' holds text in dataset 0 (classes) {labels}" in err
    assert f"the target column 'y' of dataset 1 (numbers) {csv_data['train']} holds numbers" in err
    assert "give --task classification if those numbers are class labels" in err
    assert "--task regression" not in err


def test_predict_batch_refuses_a_stray_text_cell_naming_the_dataset(tmp_path, csv_data, capsys):
    _with_stray_cell(csv_data["train"], "a", 4, "1,5")
    manifest = tmp_path / "m.json"
    manifest.write_text(json.dumps([
        {"name": "d", "train": str(csv_data["train"]), "test": str(csv_data["test"]),
         "target": "y"},
    ]))  # fmt: skip
    code, _, err = _run(capsys, "predict-batch", manifest, "--out-dir", tmp_path / "o", *FAST)
    assert code == 2
    one_error_line(err, "predict-batch")
    assert "dataset 0 (d): feature column 'a'" in err and "data row 4 ('1,5')" in err


def test_predict_batch_names_its_option_for_tabpfns_cpu_row_limit(tmp_path, tiny_v3_path, capsys):
    rng = np.random.default_rng(2)
    frame = pd.DataFrame(rng.normal(size=(5010, 2)), columns=["a", "b"])
    frame["y"] = frame["a"] - frame["b"]
    frame.iloc[:5001].to_csv(tmp_path / "train.csv", index=False)
    frame.iloc[5001:].to_csv(tmp_path / "test.csv", index=False)
    manifest = tmp_path / "m.json"
    manifest.write_text(json.dumps([{"train": "train.csv", "test": "test.csv", "target": "y"}]))
    argv = ["predict-batch", manifest, "--out-dir", tmp_path / "o", "--model", tiny_v3_path, *FAST]
    code, _, err = _run(capsys, *argv)
    assert code == 2
    one_error_line(err, "predict-batch")
    assert "more than 5000 samples" in err and "give --ignore-pretraining-limits" in err
    assert "ignore_pretraining_limits" not in err
    assert _run(capsys, *argv, "--ignore-pretraining-limits")[0] == 0
    assert len(pd.read_csv(tmp_path / "o" / "0.csv")) == 9
