"""``tabpfn-retrofit predict --oof K``: out-of-fold predictions for every row of the train file.

The file the command writes is :func:`retrofit.cross_val_predict` on the same
data, settings, seed and folds (``KFold(K)`` shuffled by ``--seed``) in the
same process: the same computation on the same shapes, so the regression
predictions are bit-identical and the probabilities within the classifier
bound of ``tests/helpers/exactness.py``. Tiny v3 (regressor) and v2
(classifier) checkpoints, zero-inits perturbed. Every refusal is one line and
leaves no file.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from sklearn.model_selection import KFold

import retrofit
from eval.cli import main
from retrofit import OTabPFNClassifier, OTabPFNRegressor
from tests.helpers.exactness import CLASSIFIER_PROBA_ULPS, assert_within_ulps
from tests.helpers.tiny_hosts import TINY_MAX_CLASSES, build_tiny_v2, save_tiny_v2_checkpoint

FAST = ["--n-estimators", "2", "--precision", "float32", "--device", "cpu", "--quiet"]
LABELS = np.array(["ant", "bee", "cat"])
N_ROWS = 30


@pytest.fixture(scope="module")
def classifier_checkpoint(tmp_path_factory):
    path = tmp_path_factory.mktemp("ckpt") / "tiny_v2_classifier.safetensors"
    model = build_tiny_v2(max_num_classes=TINY_MAX_CLASSES)
    return save_tiny_v2_checkpoint(model, path, max_num_classes=TINY_MAX_CLASSES)


@pytest.fixture
def train(tmp_path):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(N_ROWS, 3))
    y = X @ np.array([1.0, -2.0, 0.5]) + 0.1 * rng.normal(size=N_ROWS)
    label = LABELS[(X[:, 0] > 0).astype(int) + (X[:, 1] > 1).astype(int)]
    path = tmp_path / "train.csv"
    pd.DataFrame(X, columns=["a", "b", "c"]).assign(y=y, label=label).to_csv(path, index=False)
    return path


def _oof(train, target, model, out, *extra):
    argv = ["predict", "--train", str(train), "--target", target, "--out", str(out)]
    return main([*argv, "--model", str(model), *FAST, *extra])


def _settings(**kwargs):
    base = {"device": "cpu", "n_estimators": 2, "inference_precision": torch.float32}
    return {**base, "random_state": 0, **kwargs}


@pytest.mark.parametrize(("output_type", "preprocessing"), [("mean", None), ("median", "per_fold")])
def test_oof_writes_every_train_row_as_cross_val_predict_and_prints_the_rmse(
    tmp_path, train, tiny_v3_path, capsys, output_type, preprocessing
):
    out = tmp_path / "oof.csv"
    frame = pd.read_csv(train).drop(columns="label")
    frame.to_csv(train, index=False)
    extra = ["--oof", "4", "--output-type", output_type]
    if preprocessing is not None:
        extra += ["--oof-preprocessing", preprocessing]
    assert _oof(train, "y", tiny_v3_path, out, *extra) == 0
    written = pd.read_csv(out)
    assert list(written.columns) == ["row", "y", "prediction"]
    assert written["row"].tolist() == list(range(N_ROWS))
    estimator = OTabPFNRegressor(model_path=str(tiny_v3_path), **_settings())
    method = "predict" if output_type == "mean" else output_type
    want = retrofit.cross_val_predict(
        estimator,
        frame[["a", "b", "c"]],
        frame["y"].to_numpy(),
        cv=KFold(4, shuffle=True, random_state=0),
        method=method,
        preprocessing=preprocessing or "transductive",  # the command's default
    )
    # The CSV keeps 17 significant digits: a float64 round-trips exactly.
    np.testing.assert_array_equal(written["prediction"].to_numpy(), want)
    rmse = float(np.sqrt(np.mean((want - frame["y"].to_numpy()) ** 2)))
    assert (
        capsys.readouterr().out.strip() == f"RMSE {rmse:.6g} on {N_ROWS} rows with a known target"
    )


def test_oof_classifies_with_every_class_as_a_column(tmp_path, train, classifier_checkpoint):
    out = tmp_path / "oof.csv"
    frame = pd.read_csv(train).drop(columns="y")
    frame.to_csv(train, index=False)
    assert _oof(train, "label", classifier_checkpoint, out, "--oof", "3", "--seed", "2") == 0
    written = pd.read_csv(out)
    classes = sorted(set(frame["label"]))
    assert list(written.columns) == ["row", "label", "prediction", *classes]
    estimator = OTabPFNClassifier(
        model_path=str(classifier_checkpoint), **_settings(random_state=2)
    )
    proba = retrofit.cross_val_predict(
        estimator,
        frame[["a", "b", "c"]],
        frame["label"].to_numpy(dtype=object),
        cv=KFold(3, shuffle=True, random_state=2),
        method="predict_proba",
    )
    assert_within_ulps(
        torch.from_numpy(written[classes].to_numpy()),
        torch.from_numpy(np.asarray(proba, dtype=np.float64)),
        ulps=CLASSIFIER_PROBA_ULPS[torch.float32],
        dtype=torch.float32,
    )
    assert list(written["prediction"]) == list(np.asarray(classes)[np.argmax(proba, axis=1)])


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (["--oof", "1"], "--oof needs 2 <= K <= 30"),
        (["--oof", "31"], "--oof needs 2 <= K <= 30"),
        (
            ["--oof", "4", "--holdout", "0.2"],
            "exactly one of --test TEST.csv, --holdout F or --oof K",
        ),
        (["--oof", "4", "--output-type", "quantiles"], "--oof writes one value per row"),
        (  # the command's words, not the library's Python advice (mode='full-o', sklearn's)
            ["--oof", "4", "--mode", "none"],
            "--oof needs a patched mode, not none: its folds share one null-padded batch; "
            "give --mode full-o or --mode oattention",
        ),
        (["--holdout", "0.2", "--oof-preprocessing", "per_fold"], "goes with --oof K"),
    ],
)
def test_oof_refusals_are_one_line_and_write_nothing(
    tmp_path, train, tiny_v3_path, capsys, extra, expected
):
    frame = pd.read_csv(train).drop(columns="label")
    frame.to_csv(train, index=False)
    out = tmp_path / "oof.csv"
    assert _oof(train, "y", tiny_v3_path, out, *extra) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("tabpfn-retrofit predict: error: ")
    assert expected in err
    assert not out.exists()
