"""``tabpfn-retrofit predict --sample-weight COL``: a train column as each row's weight.

The command's predictions are the estimator's with ``fit(..., sample_weight=)``
on the same rows and weights (the tiny v3 checkpoint, float32, one member):
with ``--test`` bit for bit, with ``--oof`` those of ``cross_val_predict(params=)``;
the column is no feature (a test file without it is fine); a weight column
that is missing, the target, not numbers or negative, and weights with
``--mode none``, are refused in one line.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from sklearn.model_selection import KFold

import retrofit
from eval import cli

FEATURES = ["a", "b", "c"]


@pytest.fixture
def files(tmp_path) -> dict[str, Path]:
    rng = np.random.default_rng(4)
    X = rng.normal(size=(55, 3))
    frame = pd.DataFrame(X, columns=FEATURES)
    frame["y"] = X @ np.array([1.0, -2.0, 0.5]) + 0.1 * rng.normal(size=55)
    frame["w"] = rng.integers(0, 4, size=55).astype(float)
    paths = {"train": tmp_path / "train.csv", "test": tmp_path / "test.csv"}
    frame.iloc[:40].to_csv(paths["train"], index=False)
    frame.iloc[40:].drop(columns="w").to_csv(paths["test"], index=False)
    return paths


def _run(capsys, *argv) -> tuple[int, str]:
    code = cli.main([str(a) for a in argv])
    return code, capsys.readouterr().err


def _estimator(model) -> retrofit.OTabPFNRegressor:
    return retrofit.OTabPFNRegressor(
        model_path=str(model),
        n_estimators=1,
        device="cpu",
        random_state=0,
        inference_precision=torch.float32,
    )


FAST = ["--n-estimators", "1", "--precision", "float32", "--device", "cpu", "--quiet"]


def test_the_weights_column_weights_the_fit_and_is_no_feature(
    files, tiny_v3_path, tmp_path, capsys
):
    out = tmp_path / "pred.csv"
    code, err = _run(
        capsys,
        "predict",
        "--train",
        files["train"],
        "--target",
        "y",
        "--test",
        files["test"],
        "--sample-weight",
        "w",
        "--out",
        out,
        "--model",
        tiny_v3_path,
        *FAST,
    )
    assert code == 0, err
    train, test = pd.read_csv(files["train"]), pd.read_csv(files["test"])
    weighted = _estimator(tiny_v3_path).fit(
        train[FEATURES], train["y"].to_numpy(), sample_weight=train["w"].to_numpy()
    )
    written = pd.read_csv(out)["prediction"].to_numpy()
    np.testing.assert_array_equal(written, weighted.predict(test[FEATURES]))
    plain = _estimator(tiny_v3_path).fit(train[FEATURES], train["y"].to_numpy())
    assert np.abs(written - plain.predict(test[FEATURES])).max() > 1e-4


def test_out_of_fold_predictions_are_cross_val_predicts_with_the_weights(
    files, tiny_v3_path, tmp_path, capsys
):
    out = tmp_path / "oof.csv"
    code, err = _run(
        capsys,
        "predict",
        "--train",
        files["train"],
        "--target",
        "y",
        "--oof",
        "4",
        "--seed",
        "0",
        "--sample-weight",
        "w",
        "--out",
        out,
        "--model",
        tiny_v3_path,
        *FAST,
    )
    assert code == 0, err
    train = pd.read_csv(files["train"])
    expected = retrofit.cross_val_predict(
        _estimator(tiny_v3_path),
        train[FEATURES],
        train["y"].to_numpy(),
        cv=KFold(4, shuffle=True, random_state=0),
        params={"sample_weight": train["w"].to_numpy()},
    )
    np.testing.assert_array_equal(pd.read_csv(out)["prediction"].to_numpy(), expected)


@pytest.mark.parametrize(
    ("column", "edit", "message"),
    [
        ("v", None, "--sample-weight 'v' is no column of"),
        ("y", None, "--sample-weight 'y' is the target column"),
        ("w", "text", "is no number in data row 2"),
        ("w", "negative", "negative weights"),
        ("w", "zeros", "every weight is zero"),
    ],
)
def test_a_bad_weights_column_is_refused_in_one_line(
    files, tiny_v3_path, tmp_path, capsys, column, edit, message
):
    train = pd.read_csv(files["train"])
    if edit == "text":
        train["w"] = train["w"].astype(object)
        train.loc[2, "w"] = "heavy"
    elif edit == "negative":
        train.loc[3, "w"] = -1.0
    elif edit == "zeros":
        train["w"] = 0.0
    train.to_csv(files["train"], index=False)
    out = tmp_path / "pred.csv"
    code, err = _run(
        capsys,
        "predict",
        "--train",
        files["train"],
        "--target",
        "y",
        "--test",
        files["test"],
        "--sample-weight",
        column,
        "--out",
        out,
        "--model",
        tiny_v3_path,
        *FAST,
    )
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1
    assert not out.exists()


def test_weights_with_mode_none_are_refused_in_one_line(files, tiny_v3_path, tmp_path, capsys):
    out = tmp_path / "pred.csv"
    code, err = _run(
        capsys,
        "predict",
        "--train",
        files["train"],
        "--target",
        "y",
        "--test",
        files["test"],
        "--sample-weight",
        "w",
        "--mode",
        "none",
        "--out",
        out,
        "--model",
        tiny_v3_path,
        *FAST,
    )
    assert code == 2 and "'full-o' or 'oattention'" in err
    assert len(err.strip().splitlines()) == 1 and not out.exists()
