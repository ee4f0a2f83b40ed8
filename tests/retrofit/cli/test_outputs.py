"""The commands' output paths: one that resolves to an input, or cannot be written, is
refused in one line before the fit and before anything is written.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from retrofit.regressor import OTabPFNRegressor
from tests.helpers.commands import FAST, listing, one_error_line, predict_argv, run_cli


@pytest.mark.parametrize("how", ["same path", "relative path", "symbolic link", "hard link"])
@pytest.mark.parametrize("role", ["train", "test"])
def test_out_resolving_to_an_input_is_refused_before_anything_is_written(
    how, role, csv_data, model_arg, capsys, monkeypatch
):
    """``--out`` equal to --train or --test never replaces it."""
    folder = csv_data[role].parent
    monkeypatch.chdir(folder)
    target = csv_data[role]
    if how == "same path":
        out = target
    elif how == "relative path":
        out = Path("sub/..") / target.name
        (folder / "sub").mkdir()
    elif how == "symbolic link":
        out = folder / "link.csv"
        out.symlink_to(target)
    else:
        out = folder / "hard.csv"
        os.link(target, out)
    before = {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}
    code, stdout, err = run_cli(predict_argv(csv_data, model_arg, out), capsys)
    assert code == 2 and stdout == ""
    one_error_line(err, "predict")
    assert f"is the {role} file" in err
    assert {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()} == before


def test_holdout_out_equal_to_the_training_file_is_refused(csv_data, model_arg, capsys):
    """The reported case, ``--train X.csv --holdout 0.25 --out X.csv``."""
    original = csv_data["train"].read_bytes()
    argv = ["predict", "--train", csv_data["train"], "--target", "y", "--holdout", "0.25"]
    code, _, err = run_cli([*argv, "--out", csv_data["train"], "--model", model_arg, *FAST], capsys)
    assert code == 2 and "is the train file" in err
    assert csv_data["train"].read_bytes() == original


@pytest.fixture
def fits(monkeypatch) -> list:
    calls: list = []
    fit = OTabPFNRegressor.fit

    def counting_fit(self, X, y):
        calls.append(len(y))
        return fit(self, X, y)

    monkeypatch.setattr(OTabPFNRegressor, "fit", counting_fit)
    return calls


@pytest.mark.parametrize(
    ("make_out", "expected"),
    [
        (lambda d: d, "is a directory"),
        (lambda d: d / "missing" / "p.csv", "does not exist"),
    ],
)
def test_a_bad_predict_out_fails_before_the_fit(
    make_out, expected, csv_data, model_arg, fits, capsys
):
    """The output is checked before the fit, not after it."""
    folder = csv_data["train"].parent
    before = listing(folder)
    code, _, err = run_cli(predict_argv(csv_data, model_arg, make_out(folder)), capsys)
    assert code == 2 and expected in err
    assert fits == []
    assert listing(folder) == before
