"""The command line's CSV tables: repeated column names and infinite features are refused
in one line that names the file, the column and the row, before anything is written.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tests.helpers.commands import one_error_line, predict_argv, run_cli


def test_a_repeated_column_in_a_header_is_refused_naming_file_and_column(
    csv_data, model_arg, capsys
):
    """Pandas would silently rename the second ``a`` to ``a.1``."""
    train = csv_data["train"].parent / "dup.csv"
    train.write_text("a,b,a,y\n1,2,3,4\n2,3,4,5\n3,4,5,6\n")
    argv = predict_argv(
        {"train": train, "test": csv_data["test"]}, model_arg, train.parent / "p.csv"
    )
    code, _, err = run_cli(argv, capsys)
    assert code == 2
    one_error_line(err, "predict")
    assert f"train file {train} repeats column(s) 'a'" in err
    assert not (train.parent / "p.csv").exists()


def test_a_test_column_is_never_matched_to_a_train_column_named_a_dot_1(
    model_arg, capsys, tmp_path
):
    """Test ``a,a`` must not feed train's literal ``a.1``."""
    rng = np.random.default_rng(1)
    X = rng.normal(size=(20, 2))
    train = tmp_path / "train.csv"
    pd.DataFrame(X, columns=["a", "a.1"]).assign(y=X.sum(1)).to_csv(train, index=False)
    test = tmp_path / "test.csv"
    test.write_text("a,a\n0.1,0.2\n0.3,0.4\n")
    out = tmp_path / "p.csv"
    code, _, err = run_cli(predict_argv({"train": train, "test": test}, model_arg, out), capsys)
    assert code == 2
    one_error_line(err, "predict")
    assert f"test file {test} repeats column(s) 'a'" in err
    assert not out.exists()


@pytest.mark.parametrize("role", ["train", "test"])
def test_an_infinite_feature_names_the_file_the_column_and_the_row(
    role, csv_data, model_arg, capsys
):
    """Not tabpfn's bare "Input X contains infinity": the file, the column, the row."""
    frame = pd.read_csv(csv_data[role])
    frame.loc[2, "b"] = np.inf
    frame.to_csv(csv_data[role], index=False)
    out = csv_data["train"].parent / "p.csv"
    code, _, err = run_cli(predict_argv(csv_data, model_arg, out), capsys)
    assert code == 2
    one_error_line(err, "predict")
    assert (
        f"feature column 'b' in {csv_data[role]} holds an infinite value (data row 2: inf)" in err
    )
    assert not out.exists()
