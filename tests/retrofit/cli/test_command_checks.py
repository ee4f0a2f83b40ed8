"""What ``predict``, ``predict-batch`` and saved directories refuse or repair.

Items 5, 8, 11 and 13: ``--out-dir`` is created; ``--precision float64`` works
for same-shape datasets; ``--force`` never overwrites an input; a target named
like an output column is refused; quantiles 0 and 1 are refused; a manifest or
``retrofit.json`` field of the wrong type, a repeated key and a modified patch
digest are one line naming the file and field; tabpfn's errors name the dataset.
Every refusal is one line on stderr with exit status 2. Tiny perturbed v3
checkpoint, float32 unless float64 is the subject.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from eval import cli

FAST = ["--n-estimators", "1", "--device", "cpu", "--quiet"]
SAME = [(30, 6, 3), (30, 6, 3)]  # (train, test, features)


@pytest.fixture(scope="module")
def checkpoint(tiny_v3_path) -> str:
    return str(tiny_v3_path)


def _write_datasets(folder: Path, shapes=SAME, target: str = "y") -> list[dict[str, str]]:
    rng = np.random.default_rng(0)
    entries = []
    for i, (n, m, c) in enumerate(shapes):
        X = rng.normal(size=(n + m, c))
        frame = pd.DataFrame(X, columns=[f"x{j}" for j in range(c)])
        frame[target] = X.sum(axis=1) + 0.1 * rng.normal(size=n + m)
        frame[:n].to_csv(folder / f"d{i}_train.csv", index=False)
        frame[n:].to_csv(folder / f"d{i}_test.csv", index=False)
        entries.append({"name": f"d{i}", "train": f"d{i}_train.csv", "test": f"d{i}_test.csv"})
    return entries


def _manifest(folder: Path, entries, target: str = "y", name: str = "m.json") -> Path:
    path = folder / name
    if name.endswith(".json"):
        path.write_text(json.dumps({"target": target, "datasets": entries}))
    else:
        pd.DataFrame([{**e, "target": target} for e in entries]).to_csv(path, index=False)
    return path


def _run(argv, capsys) -> tuple[int, str]:
    code = cli.main([str(a) for a in argv])
    return code, capsys.readouterr().err


def _batch(manifest, out_dir, checkpoint, *extra) -> list:
    return ["predict-batch", manifest, "--out-dir", out_dir, "--model", checkpoint, *FAST, *extra]


def _refused(code: int, err: str, *words: str) -> None:
    assert code == 2 and err.count("\n") == 1, err
    for word in words:
        assert word in err, err


# --- predict-batch --------------------------------------------------------------------


def test_predict_batch_creates_a_missing_out_dir(checkpoint, tmp_path, capsys):
    manifest = _manifest(tmp_path, _write_datasets(tmp_path))
    out = tmp_path / "preds" / "run1"
    code, err = _run(_batch(manifest, out, checkpoint, "--precision", "float32"), capsys)
    assert code == 0, err
    assert sorted(p.name for p in out.iterdir()) == ["d0.csv", "d1.csv"]


def test_a_failed_predict_batch_leaves_no_out_dir_it_made(checkpoint, tmp_path, capsys):
    entries = _write_datasets(tmp_path)
    entries[1]["test"] = "missing.csv"
    out = tmp_path / "preds"
    code, err = _run(_batch(_manifest(tmp_path, entries), out, checkpoint), capsys)
    _refused(code, err, "dataset 1 (d1)")
    assert not out.exists()


def test_predict_batch_runs_float64_on_datasets_of_one_shape(checkpoint, tmp_path, capsys):
    manifest = _manifest(tmp_path, _write_datasets(tmp_path))
    out = tmp_path / "out"
    code, err = _run(_batch(manifest, out, checkpoint, "--precision", "float64"), capsys)
    assert code == 0, err
    for name in ("d0", "d1"):
        assert np.isfinite(pd.read_csv(out / f"{name}.csv")["prediction"]).all()


@pytest.mark.parametrize("which", ["train", "test", "manifest"])
def test_predict_batch_force_never_overwrites_an_input(checkpoint, tmp_path, capsys, which):
    entries = _write_datasets(tmp_path)
    name = "m.csv"
    if which == "manifest":
        entries[0]["name"] = "m"  # out-dir/m.csv is the CSV manifest
    else:
        entries[0]["name"] = f"d0_{which}"  # out-dir/d0_train.csv is dataset 0's train file
    manifest = _manifest(tmp_path, entries, name=name)
    victim = manifest if which == "manifest" else tmp_path / entries[0][which]
    before = victim.read_bytes()
    code, err = _run(_batch(manifest, tmp_path, checkpoint, "--force"), capsys)
    _refused(code, err, "would replace", str(victim.name))
    assert victim.read_bytes() == before


@pytest.mark.parametrize("target", ["row", "prediction"])
def test_predict_batch_refuses_a_target_named_like_an_output_column(
    checkpoint, tmp_path, capsys, target
):
    manifest = _manifest(tmp_path, _write_datasets(tmp_path, target=target), target=target)
    code, err = _run(_batch(manifest, tmp_path / "out", checkpoint), capsys)
    _refused(code, err, "dataset 0 (d0)", repr(target), "output column")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("field", "value"), [("train", 5), ("test", ["a.csv"]), ("target", 3), ("name", 1.5)]
)
def test_a_manifest_field_of_the_wrong_type_names_the_entry_and_field(
    checkpoint, tmp_path, capsys, field, value
):
    entries = _write_datasets(tmp_path)
    entries[1][field] = value
    manifest = _manifest(tmp_path, entries)
    code, err = _run(_batch(manifest, tmp_path / "out", checkpoint), capsys)
    _refused(code, err, "dataset 1", repr(field), "must be text")


def test_tabpfns_own_errors_name_the_dataset(checkpoint, tmp_path, capsys):
    # Same shapes, so tabpfn's predict_batched runs; dataset 1's test file has text
    # in a column that is numbers in its train file, which tabpfn refuses.
    entries = _write_datasets(tmp_path)
    test = pd.read_csv(tmp_path / "d1_test.csv")
    test["x0"] = test["x0"].astype(object)
    test.loc[2, "x0"] = "abc"
    test.to_csv(tmp_path / "d1_test.csv", index=False)
    code, err = _run(_batch(_manifest(tmp_path, entries), tmp_path / "out", checkpoint), capsys)
    _refused(code, err, "dataset 1 (d1)")


# --- predict ----------------------------------------------------------------------------


def _predict(checkpoint, folder: Path, target: str, *extra) -> list:
    return [
        "predict",
        "--train",
        folder / "d0_train.csv",
        "--test",
        folder / "d0_test.csv",
        "--target",
        target,
        "--model",
        checkpoint,
        "--out",
        folder / "pred.csv",
        *FAST,
        *extra,
    ]


@pytest.mark.parametrize("quantiles", ["0,0.5", "0.5,1", "0,1"])
def test_predict_refuses_quantiles_0_and_1(checkpoint, tmp_path, capsys, quantiles):
    _write_datasets(tmp_path)
    code, err = _run(_predict(checkpoint, tmp_path, "y", "--quantiles", quantiles), capsys)
    _refused(code, err, "strictly between 0 and 1")
    assert not (tmp_path / "pred.csv").exists()


@pytest.mark.parametrize(
    ("target", "extra"),
    [("row", []), ("prediction", []), ("quantile_0.5", ["--quantiles", "0.5"])],
)
def test_predict_refuses_a_target_named_like_an_output_column(
    checkpoint, tmp_path, capsys, target, extra
):
    _write_datasets(tmp_path, target=target)
    code, err = _run(_predict(checkpoint, tmp_path, target, *extra), capsys)
    _refused(code, err, repr(target), "output column")
    assert not (tmp_path / "pred.csv").exists()


# --- saved retrofits ------------------------------------------------------------------


@pytest.fixture
def saved_dir(checkpoint, tmp_path, capsys) -> Path:
    out = tmp_path / "saved"
    assert cli.main(["patch", "--model", checkpoint, "--out", str(out), "--quiet"]) == 0
    capsys.readouterr()
    return out


def _predict_with(saved_dir: Path, tmp_path: Path) -> list:
    _write_datasets(tmp_path)
    return _predict(str(saved_dir), tmp_path, "y")


def test_a_retrofit_json_naming_a_key_twice_is_refused(saved_dir, tmp_path, capsys):
    manifest = saved_dir / "retrofit.json"
    text = manifest.read_text()
    # json would keep the last "tau" silently.
    manifest.write_text(text.replace('"tau": ', '"tau": 5.0, "tau": ', 1))
    code, err = _run(_predict_with(saved_dir, tmp_path), capsys)
    _refused(code, err, str(manifest), "'tau' twice")


def test_a_retrofit_json_whose_patch_digest_was_changed_is_refused(saved_dir, tmp_path, capsys):
    manifest = saved_dir / "retrofit.json"
    data = json.loads(manifest.read_text())
    data["patch_digest"] = "0" * 16
    manifest.write_text(json.dumps(data))
    code, err = _run(_predict_with(saved_dir, tmp_path), capsys)
    _refused(code, err, str(manifest), "patch_digest '0000000000000000'")


@pytest.mark.parametrize(
    ("path", "value", "field"),
    [
        (("settings", "tau"), "abc", "field settings: tau must be"),
        (("settings", "mode"), 3, "field settings: unknown mode 3"),
        (("base", "path"), 5, "field base.path must be text"),
        (("base", "sha256"), None, "field base.sha256 must be text"),
        (("base", "kind"), "regression", "field base.kind must be one of"),
        (("kinds",), "regressor", "field kinds must list"),
        (("patch_digest",), 12, "field patch_digest must be text"),
    ],
)
def test_a_retrofit_json_field_of_the_wrong_type_names_the_file_and_field(
    saved_dir, tmp_path, capsys, path, value, field
):
    manifest = saved_dir / "retrofit.json"
    data = json.loads(manifest.read_text())
    parent = data
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = value
    manifest.write_text(json.dumps(data))
    code, err = _run(_predict_with(saved_dir, tmp_path), capsys)
    _refused(code, err, str(manifest), field)
