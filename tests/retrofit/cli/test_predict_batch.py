"""``tabpfn-retrofit predict-batch`` on a tiny v3 checkpoint."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch

from eval.cli import main
from retrofit import OTabPFNRegressor

SHAPES = [(30, 6, 3), (45, 9, 4), (12, 4, 2)]


@pytest.fixture(scope="module")
def checkpoint(tiny_v3_path):
    return tiny_v3_path


def _write_datasets(folder, shapes=SHAPES, seed=0):
    rng = np.random.default_rng(seed)
    entries = []
    for i, (n, m, c) in enumerate(shapes):
        X = rng.normal(size=(n + m, c))
        frame = pd.DataFrame(X, columns=[f"x{j}" for j in range(c)])
        frame["y"] = X.sum(axis=1) + 0.1 * rng.normal(size=n + m)
        frame[:n].to_csv(folder / f"d{i}_train.csv", index=False)
        frame[n:].to_csv(folder / f"d{i}_test.csv", index=False)
        entries.append({"name": f"d{i}", "train": f"d{i}_train.csv", "test": f"d{i}_test.csv"})
    return entries


def _run(manifest, out, checkpoint, *extra):
    argv = ["predict-batch", str(manifest), "--out-dir", str(out), "--model", str(checkpoint)]
    return main([*argv, "--precision", "float32", "--device", "cpu", "--quiet", *extra])


@pytest.mark.parametrize("kind", ["json", "csv"])
def test_predict_batch_writes_one_file_per_dataset_matching_predict(tmp_path, checkpoint, kind):
    entries = _write_datasets(tmp_path)
    if kind == "json":
        manifest = tmp_path / "m.json"
        manifest.write_text(json.dumps({"target": "y", "datasets": entries}))
        extra = []
    else:
        manifest = tmp_path / "m.csv"
        pd.DataFrame(entries).to_csv(manifest, index=False)
        extra = ["--target", "y"]
    out = tmp_path / "out"
    out.mkdir()
    # A loose bound, so the datasets share padded forwards on a CPU too.
    assert _run(manifest, out, checkpoint, *extra, "--max-padded-fraction", "0.9") == 0
    assert sorted(p.name for p in out.iterdir()) == ["d0.csv", "d1.csv", "d2.csv"]
    for entry in entries:
        written = pd.read_csv(out / f"{entry['name']}.csv")
        train = pd.read_csv(tmp_path / entry["train"])
        test = pd.read_csv(tmp_path / entry["test"])
        est = OTabPFNRegressor(
            model_path=str(checkpoint), inference_precision=torch.float32, device="cpu"
        ).fit(train.drop(columns="y").to_numpy(), train["y"].to_numpy())
        alone = est.predict(test.drop(columns="y").to_numpy())
        assert list(written.columns) == ["row", "y", "prediction"]
        np.testing.assert_allclose(written["y"], test["y"])
        scale = float(train["y"].std())
        assert np.abs(written["prediction"].to_numpy() - alone).max() <= 1e-4 * scale


def test_an_error_names_the_dataset_and_writes_nothing(tmp_path, checkpoint, capsys):
    entries = _write_datasets(tmp_path)
    bad = pd.read_csv(tmp_path / "d1_train.csv")
    bad.loc[3, "y"] = np.nan
    bad.to_csv(tmp_path / "d1_train.csv", index=False)
    manifest = tmp_path / "m.json"
    manifest.write_text(json.dumps(entries))
    out = tmp_path / "out"
    out.mkdir()
    assert _run(manifest, out, checkpoint, "--target", "y") == 2
    err = capsys.readouterr().err
    assert "dataset 1 (d1): target column 'y' in " in err and "is empty in data row 3" in err
    assert list(out.iterdir()) == []


def test_files_are_read_as_predict_reads_them(tmp_path, checkpoint, capsys):
    # One reading for both commands (retrofit.cli.csv_tables): a header naming a
    # column twice is refused (pandas would rename the second "x0.1"), in
    # predict's words, with the dataset named.
    entries = _write_datasets(tmp_path)
    test = pd.read_csv(tmp_path / "d2_test.csv")
    test.to_csv(tmp_path / "d2_test.csv", index=False, header=["x0", "x0", "y"])
    manifest = tmp_path / "m.json"
    manifest.write_text(json.dumps({"target": "y", "datasets": entries}))
    out = tmp_path / "out"
    out.mkdir()
    assert _run(manifest, out, checkpoint) == 2
    err = capsys.readouterr().err
    assert "dataset 2 (d2): test file" in err and "repeats column(s) 'x0'" in err
    assert list(out.iterdir()) == []


def test_a_text_feature_column_is_passed_to_tabpfn_as_predict_does(tmp_path, checkpoint):
    entries = _write_datasets(tmp_path)
    for role in ("train", "test"):
        frame = pd.read_csv(tmp_path / f"d0_{role}.csv")
        frame["city"] = np.where(frame["x0"] > 0, "north", "south")
        frame.to_csv(tmp_path / f"d0_{role}.csv", index=False)
    manifest = tmp_path / "m.json"
    manifest.write_text(json.dumps({"target": "y", "datasets": entries}))
    out = tmp_path / "out"
    out.mkdir()
    assert _run(manifest, out, checkpoint) == 0
    written = pd.read_csv(out / "d0.csv")
    train, test = (pd.read_csv(tmp_path / f"d0_{r}.csv") for r in ("train", "test"))
    alone = (
        OTabPFNRegressor(
            model_path=str(checkpoint), inference_precision=torch.float32, device="cpu"
        )
        .fit(train.drop(columns="y"), train["y"].to_numpy())
        .predict(test.drop(columns="y"))
    )
    scale = float(train["y"].std())
    assert np.abs(written["prediction"].to_numpy() - alone).max() <= 1e-4 * scale


def test_a_manifest_entry_without_a_test_file_is_named(tmp_path, checkpoint, capsys):
    entries = _write_datasets(tmp_path)
    del entries[2]["test"]
    manifest = tmp_path / "m.json"
    manifest.write_text(json.dumps(entries))
    assert _run(manifest, tmp_path, checkpoint, "--target", "y") == 2
    assert "dataset 2 (d2): the manifest gives no 'test' file" in capsys.readouterr().err


def test_existing_prediction_files_are_kept_without_force(tmp_path, checkpoint, capsys):
    entries = _write_datasets(tmp_path)
    manifest = tmp_path / "m.json"
    manifest.write_text(json.dumps({"target": "y", "datasets": entries}))
    (tmp_path / "d0.csv").write_text("keep me\n")
    assert _run(manifest, tmp_path, checkpoint) == 2
    assert "use --force" in capsys.readouterr().err
    assert (tmp_path / "d0.csv").read_text() == "keep me\n"


@pytest.mark.parametrize("bound", ["1.0", "-0.1", "nan"])
def test_a_padded_share_bound_outside_0_1_is_refused_before_any_dataset(
    tmp_path, checkpoint, capsys, bound
):
    manifest = tmp_path / "m.json"
    manifest.write_text(json.dumps({"target": "y", "datasets": _write_datasets(tmp_path)}))
    out = tmp_path / "out"
    out.mkdir()
    assert _run(manifest, out, checkpoint, "--max-padded-fraction", bound) == 2
    assert "max_padded_fraction must be in [0, 1)" in capsys.readouterr().err
    assert list(out.iterdir()) == []


def test_a_directory_given_as_the_manifest_says_so_in_one_line(tmp_path, checkpoint, capsys):
    """A folder given as the manifest was called "manifest not found" though it exists."""
    assert _run(tmp_path, tmp_path / "out", checkpoint) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and f"manifest {tmp_path} is a directory; give the .json" in err
