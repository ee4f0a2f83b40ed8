"""``predict-batch`` with a ``sample_weight`` column named in the manifest.

One dataset of three names a weight column (a JSON manifest entry's
``"sample_weight"``); its prediction file is ``predict_batched`` with that
dataset's weights (the others' None), bit for bit, the column no feature; a
manifest-wide ``"sample_weight"`` weighs every dataset; a bad column is
refused naming the dataset.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import torch

from eval.cli import main
from retrofit import OTabPFNRegressor

SHAPES = [(30, 6), (45, 9), (20, 4)]


def _write(folder, weighted=(True, True, True)):
    """Three datasets; the train files of the ``weighted`` ones hold a weight column ``w``."""
    rng = np.random.default_rng(6)
    entries, data = [], []
    for i, (n, m) in enumerate(SHAPES):
        X = rng.normal(size=(n + m, 3))
        frame = pd.DataFrame(X, columns=["x0", "x1", "x2"])
        frame["y"] = X.sum(axis=1) + 0.1 * rng.normal(size=n + m)
        frame["w"] = rng.integers(0, 4, size=n + m).astype(float)
        train = frame[:n] if weighted[i] else frame[:n].drop(columns="w")
        train.to_csv(folder / f"d{i}_train.csv", index=False)
        frame[n:].drop(columns="w").to_csv(folder / f"d{i}_test.csv", index=False)
        entries.append({"name": f"d{i}", "train": f"d{i}_train.csv", "test": f"d{i}_test.csv"})
        data.append((frame[:n], frame[n:]))
    return entries, data


def _run(manifest, out, model, capsys):
    argv = ["predict-batch", str(manifest), "--out-dir", str(out), "--model", str(model)]
    code = main([*argv, "--precision", "float32", "--device", "cpu", "--quiet", "--force"])
    return code, capsys.readouterr().err


def _expected(model, data, weighted):
    est = OTabPFNRegressor(model_path=str(model), inference_precision=torch.float32, device="cpu")
    features = ["x0", "x1", "x2"]
    return est.predict_batched(
        [train[features] for train, _ in data],
        [train["y"].to_numpy() for train, _ in data],
        [test[features] for _, test in data],
        sample_weight=[
            train["w"].to_numpy() if w else None
            for (train, _), w in zip(data, weighted, strict=True)
        ],
    )


def test_a_datasets_weight_column_weights_its_fit(tmp_path, tiny_v3_path, capsys):
    entries, data = _write(tmp_path, weighted=(False, True, False))
    entries[1]["sample_weight"] = "w"
    manifest = tmp_path / "m.json"
    manifest.write_text(json.dumps({"target": "y", "datasets": entries}))
    code, err = _run(manifest, tmp_path / "out", tiny_v3_path, capsys)
    assert code == 0, err
    expected = _expected(tiny_v3_path, data, [False, True, False])
    for i, values in enumerate(expected):
        written = pd.read_csv(tmp_path / "out" / f"d{i}.csv")
        np.testing.assert_array_equal(written["prediction"].to_numpy(), values)
    # Every dataset weighted by a manifest-wide column.
    manifest.write_text(
        json.dumps({"target": "y", "sample_weight": "w", "datasets": _write(tmp_path)[0]})
    )
    code, err = _run(manifest, tmp_path / "out", tiny_v3_path, capsys)
    assert code == 0, err
    for i, values in enumerate(_expected(tiny_v3_path, data, [True, True, True])):
        written = pd.read_csv(tmp_path / "out" / f"d{i}.csv")
        np.testing.assert_array_equal(written["prediction"].to_numpy(), values)


def test_a_bad_weight_column_is_refused_naming_the_dataset(tmp_path, tiny_v3_path, capsys):
    entries, _ = _write(tmp_path, weighted=(False, False, True))
    entries[2]["sample_weight"] = "weight"
    manifest = tmp_path / "m.json"
    manifest.write_text(json.dumps({"target": "y", "datasets": entries}))
    code, err = _run(manifest, tmp_path / "out", tiny_v3_path, capsys)
    assert code == 2 and "dataset 2 (d2)" in err and "'weight' is no column" in err
    assert not (tmp_path / "out").exists()
