"""The one-command retrofit end to end: ``tabpfn-retrofit predict`` and ``patch``.

Runs ``eval.cli.main`` in process (plus one subprocess run of the installed
console script) in a temporary directory, on the embedded host once it ships
and on a tiny v3 checkpoint until then. Every error case must exit non-zero
with exactly one line on stderr and leave no output file behind.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from tabpfn import model_loading

import retrofit
from eval import cli
from retrofit.files import sha256_file
from retrofit.models import saved
from retrofit.regressor import OTabPFNRegressor

EMBEDDED = (
    Path(__file__).parents[3] / "retrofit/models/embedded/tabpfn_v3_embedded_regressor.safetensors"
)
FAST = ["--n-estimators", "1", "--precision", "float32", "--device", "cpu", "--quiet"]
N_TRAIN, N_TEST = 40, 15


@pytest.fixture
def data(tmp_path) -> dict[str, Path]:
    rng = np.random.default_rng(0)
    X = rng.normal(size=(N_TRAIN + N_TEST, 3))
    y = X @ np.array([1.0, -2.0, 0.5]) + 0.1 * rng.normal(size=len(X))
    frame = pd.DataFrame(X, columns=["a", "b", "c"]).assign(y=y)
    frame.loc[5, "b"] = np.nan  # a missing feature value is fine
    paths = {name: tmp_path / f"{name}.csv" for name in ("train", "test", "unlabelled")}
    frame.iloc[:N_TRAIN].to_csv(paths["train"], index=False)
    frame.iloc[N_TRAIN:].to_csv(paths["test"], index=False)
    frame.iloc[N_TRAIN:].drop(columns="y").to_csv(paths["unlabelled"], index=False)
    return paths


def _args(*parts) -> list[str]:
    """An argv: string parts split on spaces, paths kept whole."""
    return [
        token
        for part in parts
        for token in (part.split() if isinstance(part, str) else [str(part)])
    ]


def _run(argv, capsys) -> tuple[int, str, str]:
    code = cli.main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _estimator_predictions(model, train, test, **settings) -> np.ndarray:
    tr, te = pd.read_csv(train), pd.read_csv(test)
    features = ["a", "b", "c"]
    estimator = OTabPFNRegressor(
        model_path=model,
        n_estimators=1,
        device="cpu",
        random_state=0,
        inference_precision=torch.float32,
        **settings,
    )
    estimator.fit(tr[features].to_numpy(), tr["y"].to_numpy())
    return estimator.predict(te[features].to_numpy())


def _listing(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


# --- predict ----------------------------------------------------------------------


def test_predict_with_a_test_file_writes_predictions_and_prints_rmse(data, model_arg, capsys):
    out = data["train"].parent / "pred.csv"
    code, stdout, _ = _run(
        _args(
            "predict --train",
            data["train"],
            "--target y --test",
            data["test"],
            "--mode full-o --out",
            out,
            "--model",
            model_arg,
            *FAST,
        ),
        capsys,
    )
    assert code == 0
    pred = pd.read_csv(out)
    assert list(pred.columns) == ["row", "y", "prediction"]
    assert pred["row"].tolist() == list(range(N_TEST))
    assert np.isfinite(pred["prediction"]).all()
    rmse = float(np.sqrt(np.mean((pred["prediction"] - pred["y"]) ** 2)))
    assert stdout.startswith("RMSE ")
    assert float(stdout.split()[1]) == pytest.approx(rmse, rel=1e-5)
    # Same settings through the estimator: bit-identical predictions.
    expected = _estimator_predictions(model_arg, data["train"], data["test"], mode="full-o")
    assert np.array_equal(pred["prediction"].to_numpy(), expected)


def test_predict_without_target_in_test_prints_no_rmse(data, model_arg, capsys):
    out = data["train"].parent / "pred.csv"
    code, stdout, _ = _run(
        _args(
            "predict --train",
            data["train"],
            "--target y --test",
            data["unlabelled"],
            "--out",
            out,
            "--model",
            model_arg,
            *FAST,
        ),
        capsys,
    )
    assert code == 0
    assert list(pd.read_csv(out).columns) == ["row", "prediction"]
    assert "RMSE" not in stdout


def test_predict_holdout_splits_train_with_the_seed(data, model_arg, capsys):
    folder = data["train"].parent
    args = ["predict", "--train", data["train"], "--target", "y", "--holdout", "0.25"]
    args += ["--model", model_arg, *FAST]
    assert _run([*args, "--out", folder / "p1.csv"], capsys)[0] == 0
    assert _run([*args, "--out", folder / "p2.csv"], capsys)[0] == 0
    assert _run([*args, "--seed", "7", "--out", folder / "p3.csv"], capsys)[0] == 0
    p1, p2, p3 = (pd.read_csv(folder / f"p{i}.csv") for i in (1, 2, 3))
    train = pd.read_csv(data["train"])
    assert len(p1) == round(0.25 * N_TRAIN)
    assert np.array_equal(p1["y"].to_numpy(), train["y"].to_numpy()[p1["row"]])
    pd.testing.assert_frame_equal(p1, p2)
    assert p1["row"].tolist() != p3["row"].tolist()


def test_patch_then_predict_from_the_directory_is_bit_identical(data, model_arg, capsys, tmp_path):
    saved_dir = tmp_path / "retrofitted"
    code, stdout, _ = _run(
        _args(
            "patch --model", model_arg, "--mode oattention --tau 0.5 --out", saved_dir, "--quiet"
        ),
        capsys,
    )
    assert code == 0 and "saved retrofitted regressor" in stdout
    assert _listing(saved_dir) == ["retrofit.json"]  # an adapter: no weights
    manifest = json.loads((saved_dir / "retrofit.json").read_text())
    assert manifest["settings"] == {
        "mode": "oattention",
        "tau": 0.5,
        "support": "count",
        "eps_den": 1e-6,
    }
    assert len(manifest["patch_digest"]) == 16
    source = EMBEDDED if model_arg == "embedded" else Path(model_arg)
    named = {"name": "embedded"} if model_arg == "embedded" else {"path": model_arg}
    assert manifest["base"] == {**named, "kind": "regressor", "sha256": sha256_file(source)}

    out = tmp_path / "pred.csv"
    code, _, _ = _run(
        _args(
            "predict --train",
            data["train"],
            "--target y --test",
            data["test"],
            "--model",
            saved_dir,
            "--out",
            out,
            *FAST,
        ),
        capsys,
    )
    assert code == 0
    from_dir = pd.read_csv(out)["prediction"].to_numpy()
    direct = _estimator_predictions(
        model_arg, data["train"], data["test"], mode="oattention", tau=0.5
    )
    assert np.array_equal(from_dir, direct)
    via_estimator = _estimator_predictions(saved_dir, data["train"], data["test"])
    assert np.array_equal(from_dir, via_estimator)
    # A real patch: the unpatched host predicts differently.
    host = _estimator_predictions(model_arg, data["train"], data["test"], mode="none")
    assert not np.allclose(from_dir, host, rtol=0, atol=1e-6)


def test_a_saved_directory_refuses_conflicting_settings(data, model_arg, capsys, tmp_path):
    saved_dir = tmp_path / "retrofitted"
    assert _run(["patch", "--model", model_arg, "--out", saved_dir, "--quiet"], capsys)[0] == 0
    out = tmp_path / "pred.csv"
    code, _, err = _run(
        _args(
            "predict --train",
            data["train"],
            "--target y --test",
            data["test"],
            "--model",
            saved_dir,
            "--mode oattention --out",
            out,
            *FAST,
        ),
        capsys,
    )
    assert code == 2
    assert err.count("\n") == 1 and "mode='oattention' (saved: 'full-o')" in err
    assert not out.exists()


def test_a_base_changed_since_patch_is_refused_in_one_line(data, model_arg, capsys, tmp_path):
    base = tmp_path / "host_v3.safetensors"
    shutil.copyfile(EMBEDDED if model_arg == "embedded" else model_arg, base)
    saved_dir = tmp_path / "retrofitted"
    assert _run(["patch", "--model", base, "--out", saved_dir, "--quiet"], capsys)[0] == 0
    expected = sha256_file(base)
    base.write_bytes(base.read_bytes()[:-1] + bytes([base.read_bytes()[-1] ^ 0xFF]))
    out = tmp_path / "pred.csv"
    code, _, err = _run(
        _args(
            "predict --train",
            data["train"],
            "--target y --test",
            data["test"],
            "--model",
            saved_dir,
            "--out",
            out,
            *FAST,
        ),
        capsys,
    )
    assert code == 2 and err.count("\n") == 1 and "changed since the retrofit was saved" in err
    assert f"expected SHA-256 {expected[:12]}, found {sha256_file(base)[:12]}" in err
    assert not out.exists()


# --- errors: one line, non-zero, nothing written ----------------------------------------


def _write(folder: Path, name: str, content: bytes | str) -> Path:
    path = folder / name
    path.write_bytes(content.encode() if isinstance(content, str) else content)
    return path


PREDICT_ERRORS = {
    "missing train file": (lambda d: {"--train": d / "nope.csv"}, "train file not found"),
    "empty train file": (lambda d: {"--train": _write(d, "e.csv", "")}, "is empty"),
    "unparsable CSV": (
        lambda d: {"--train": _write(d, "bad.csv", 'a,b,y\n1,2,3\n4,"5,6\n7,8\n')},
        "cannot read train file",
    ),
    "header only": (lambda d: {"--train": _write(d, "h.csv", "a,b,y\n")}, "no data rows"),
    "one train row": (  # was tabpfn's "Found array with 1 sample(s)", naming no file
        lambda d: {"--train": _write(d, "one.csv", "a,b,y\n1,2,3\n")},
        "one.csv has 1 data row; fitting needs at least 2",
    ),
    "train is a directory": (  # was "train file not found" for a folder that exists
        lambda d: {"--train": d},
        "is a directory; give the CSV file itself",
    ),
    "missing target column": (lambda d: {"--target": "price"}, "target column 'price' not in"),
    "non-numeric target": (
        lambda d: {"--train": _write(d, "t.csv", "a,b,c,y\n1,2,3,4\n2,3,4,five\n3,4,5,6\n")},
        "target column 'y' in",
    ),
    "quantiles with a point output": (
        lambda d: {"--output-type": "mean", "--quantiles": "0.5"},
        "--quantiles needs --output-type quantiles",
    ),
    "quantile out of range": (lambda d: {"--quantiles": "0.1,1.5"}, "strictly between 0 and 1"),
    "quantile not a number": (lambda d: {"--quantiles": "0.1,half"}, "numbers separated"),
    "unknown categorical column": (
        lambda d: {"--categorical": "a,zz"},
        "--categorical names no feature column zz",
    ),
    "unknown mode": (lambda d: {"--mode": "full"}, "unknown mode 'full'"),
    "bad tau": (lambda d: {"--tau": "-1"}, "tau must be"),
    "unknown support": (lambda d: {"--support": "size"}, "unknown support"),
    "test lacks a feature": (
        lambda d: {"--test": _write(d, "tl.csv", "a,c\n1,2\n")},
        "lacks feature column(s): b",
    ),
    "missing test file": (lambda d: {"--test": d / "none.csv"}, "test file not found"),
    "test and holdout": (lambda d: {"--holdout": "0.2"}, "exactly one of --test"),
    "missing model file": (lambda d: {"--model": d / "missing.ckpt"}, "no such file"),
    "model of the wrong type": (
        lambda d: {"--model": _write(d, "model.bin", b"x")},
        "not a TabPFN checkpoint",
    ),
    "output folder missing": (lambda d: {"--out": d / "no/such/pred.csv"}, "does not exist"),
}


@pytest.mark.parametrize("case", list(PREDICT_ERRORS))
def test_predict_errors_are_one_line_with_nonzero_exit_and_no_output(case, data, model_arg, capsys):
    folder = data["train"].parent
    make, expected = PREDICT_ERRORS[case]
    options = {
        "--train": data["train"],
        "--target": "y",
        "--test": data["test"],
        "--out": folder / "pred.csv",
        "--model": model_arg,
    }
    options.update(make(folder))
    before = _listing(folder)
    argv = ["predict", *[str(x) for kv in options.items() for x in kv], *FAST]
    code, stdout, err = _run(argv, capsys)
    assert code == 2
    assert err.count("\n") == 1, err
    assert err.startswith("tabpfn-retrofit predict: error: ")
    assert expected in err
    assert stdout == ""
    assert _listing(folder) == before  # no prediction file, no temporary file


def test_holdout_out_of_range_is_one_line(data, model_arg, capsys):
    argv = ["predict", "--train", data["train"], "--target", "y", "--holdout", "1.5"]
    argv += ["--out", data["train"].parent / "p.csv", "--model", model_arg, *FAST]
    code, _, err = _run(argv, capsys)
    assert code == 2 and err.count("\n") == 1 and "0 < F < 1" in err


def test_a_crash_while_writing_leaves_no_partial_prediction_file(
    data, model_arg, capsys, monkeypatch
):
    folder = data["train"].parent
    before = _listing(folder)

    def broken_to_csv(self, fh, **kwargs):
        fh.write("row,prediction\n0,")
        raise OSError("No space left on device")

    monkeypatch.setattr(pd.DataFrame, "to_csv", broken_to_csv)
    argv = ["predict", "--train", data["train"], "--target", "y", "--test", data["test"]]
    argv += ["--out", folder / "pred.csv", "--model", model_arg, *FAST]
    code, _, err = _run(argv, capsys)
    assert code == 2 and "No space left on device" in err and err.count("\n") == 1
    assert _listing(folder) == before


def test_an_existing_prediction_file_survives_a_failed_run(data, model_arg, capsys):
    out = _write(data["train"].parent, "pred.csv", "old content\n")
    argv = ["predict", "--train", data["train"], "--target", "price", "--test", data["test"]]
    # --force: the run may replace the file, and fails later, on the missing target.
    code, _, err = _run([*argv, "--out", out, "--force", "--model", model_arg, *FAST], capsys)
    assert code == 2 and "'price' not in" in err and out.read_text() == "old content\n"


def test_patch_errors_leave_no_directory(model_arg, capsys, tmp_path):
    out = tmp_path / "d"
    cases = [
        (["--mode", "fullo"], "unknown mode"),
        (["--model", tmp_path / "nope.safetensors"], "no such file"),
        (["--eps-den", "-1"], "eps_den must be"),
    ]
    for extra, expected in cases:
        code, _, err = _run(
            ["patch", "--model", model_arg, "--out", out, "--quiet", *extra], capsys
        )
        assert code == 2 and err.count("\n") == 1 and expected in err, err
        assert err.startswith("tabpfn-retrofit patch: error: ")
        assert _listing(tmp_path) == []


def test_patch_refuses_an_existing_directory_unless_forced(model_arg, capsys, tmp_path):
    out = tmp_path / "d"
    assert _run(["patch", "--model", model_arg, "--out", out, "--quiet"], capsys)[0] == 0
    code, _, err = _run(
        ["patch", "--model", model_arg, "--mode", "none", "--out", out, "--quiet"], capsys
    )
    assert code == 2 and "already exists" in err
    assert saved.read_saved(out).settings.mode == "full-o"
    code, _, _ = _run(
        ["patch", "--model", model_arg, "--mode", "none", "--out", out, "--force", "--quiet"],
        capsys,
    )
    assert code == 0 and saved.read_saved(out).settings.mode == "none"
    assert _listing(tmp_path) == ["d"]


def test_unsupported_architecture_is_refused_before_writing(capsys, tmp_path, monkeypatch):
    from tabpfn.architectures import ARCHITECTURES
    from tabpfn.architectures.shared.bar_distribution import FullSupportBarDistribution
    from tabpfn.architectures.tabpfn_v2_6 import TabPFNV2p6
    from tabpfn.checkpoint import save_as_safetensors

    import retrofit.hosts  # noqa: F401 -- registers the tables
    from retrofit.hosts.common import base as tables

    # Every tabpfn 9.2 regressor class has a table: drop v2.6's to stand for an unknown one.
    monkeypatch.delitem(tables._HOST_PATCHERS, TabPFNV2p6)
    arch = ARCHITECTURES["tabpfn_v2_6"]
    config = {"emsize": 8, "nlayers": 1, "nhead": 2, "num_thinking_rows": 2}
    parsed, _ = arch.parse_config({**config, "num_buckets": 8, "max_num_classes": 0})
    model = arch.get_architecture(parsed)
    criterion = FullSupportBarDistribution(torch.linspace(-3.0, 3.0, 9))
    state = {f"criterion.{k}": v for k, v in criterion.state_dict().items()}
    checkpoint = {
        "state_dict": {**model.state_dict(), **state},
        "config": {**config, "num_buckets": 8, "max_num_classes": 0},
        "architecture_name": "tabpfn_v2_6",
    }
    source = tmp_path / "tiny-v2.6.safetensors"
    save_as_safetensors(checkpoint, source)
    code, _, err = _run(["patch", "--model", source, "--out", tmp_path / "d", "--quiet"], capsys)
    assert code == 2 and err.count("\n") == 1
    assert "UnsupportedArchitectureError" in err and "TabPFNV2p6" in err
    assert _listing(tmp_path) == [source.name]


def test_offline_v3_is_one_line_naming_where_to_put_the_file(data, capsys, monkeypatch, tmp_path):
    cache = tmp_path / "cache"
    monkeypatch.setattr(model_loading, "get_cache_dir", lambda: cache)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(
        model_loading, "download_model", lambda to, **_: [OSError("Network is unreachable")]
    )
    out = data["train"].parent / "pred.csv"
    code, _, err = _run(
        _args(
            "predict --train",
            data["train"],
            "--target y --test",
            data["test"],
            "--model v3 --out",
            out,
            *FAST,
        ),
        capsys,
    )
    assert code == 2 and err.count("\n") == 1
    assert "WeightsUnavailableError" in err
    assert str(cache / "tabpfn-v3-regressor-v3_default.ckpt") in err
    assert not out.exists()


# --- help and the installed entry point -------------------------------------------------


@pytest.mark.parametrize(
    ("command", "options"),
    [
        (
            "predict",
            [
                "--train",
                "--target",
                "--test",
                "--holdout",
                "--out",
                "--model",
                "--mode",
                "--tau",
                "--support",
                "--eps-den",
                "--seed",
                "--n-estimators",
                "--precision",
                "--output-type",
                "--quantiles",
                "--categorical",
                "--ignore-pretraining-limits",
                "--oof",
                "--force",
            ],
        ),
        ("patch", ["--model", "--mode", "--tau", "--support", "--eps-den", "--out", "--force"]),
    ],
)
def test_help_documents_every_option(command, options, capsys):
    with pytest.raises(SystemExit) as info:
        cli.main([command, "--help"])
    assert info.value.code == 0
    text = capsys.readouterr().out
    for option in options:
        assert option in text, option
    for word in ("embedded", "v3", "v2", "full-o", "oattention"):
        assert word in text


def test_the_installed_console_script_runs_predict(data, model_arg, tmp_path):
    script = shutil.which("tabpfn-retrofit", path=str(Path(sys.executable).parent))
    assert script is not None, "the console script is not installed (pip install -e .)"
    out = tmp_path / "pred.csv"
    result = subprocess.run(
        _args(
            script,
            "predict --train",
            data["train"],
            "--target y --holdout 0.2 --out",
            out,
            "--model",
            model_arg,
            *FAST,
        ),
        capture_output=True,
        text=True,
        env={**os.environ, "TABPFN_NO_BROWSER": "1", "HF_HUB_OFFLINE": "1"},
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("RMSE ")
    assert len(pd.read_csv(out)) == round(0.2 * N_TRAIN)


# --- output types, text and categorical columns, the CPU row limit ----------------------


def _fitted(model, frame, **params) -> OTabPFNRegressor:
    estimator = OTabPFNRegressor(
        model_path=model,
        n_estimators=1,
        device="cpu",
        random_state=0,
        inference_precision=torch.float32,
        **params,
    )
    return estimator.fit(frame.drop(columns="y"), frame["y"].to_numpy())


def _predict_argv(data, model_arg, out, *extra):
    return _args(
        "predict --train", data["train"], "--target y --test", data["test"], "--out", out,
        "--model", model_arg, *FAST, *extra,
    )  # fmt: skip


def test_predict_quantiles_writes_one_column_per_quantile(data, model_arg, capsys):
    out = data["train"].parent / "q.csv"
    code, stdout, _ = _run(_predict_argv(data, model_arg, out, "--quantiles 0.05,0.5,0.95"), capsys)
    assert code == 0 and "RMSE" not in stdout
    pred = pd.read_csv(out)
    assert list(pred.columns) == ["row", "y", "quantile_0.05", "quantile_0.5", "quantile_0.95"]
    test = pd.read_csv(data["test"]).drop(columns="y")
    expected = _fitted(model_arg, pd.read_csv(data["train"])).predict(
        test, output_type="quantiles", quantiles=[0.05, 0.5, 0.95]
    )
    for column, values in zip(pred.columns[2:], expected, strict=True):
        np.testing.assert_array_equal(pred[column].to_numpy(), values)
    assert (pred["quantile_0.05"] <= pred["quantile_0.95"]).all()


def test_predict_output_type_quantiles_defaults_to_tabpfns_nine(data, model_arg, capsys):
    out = data["train"].parent / "q9.csv"
    assert _run(_predict_argv(data, model_arg, out, "--output-type quantiles"), capsys)[0] == 0
    assert list(pd.read_csv(out).columns)[2:] == [f"quantile_{q / 10:g}" for q in range(1, 10)]


@pytest.mark.parametrize("output_type", ["median", "mode"])
def test_predict_point_output_types_match_the_estimator(data, model_arg, capsys, output_type):
    out = data["train"].parent / "p.csv"
    code, stdout, _ = _run(
        _predict_argv(data, model_arg, out, f"--output-type {output_type}"), capsys
    )
    assert code == 0 and stdout.startswith("RMSE ")
    test = pd.read_csv(data["test"]).drop(columns="y")
    expected = _fitted(model_arg, pd.read_csv(data["train"])).predict(test, output_type=output_type)
    np.testing.assert_array_equal(pd.read_csv(out)["prediction"].to_numpy(), expected)


def test_text_and_declared_categorical_columns_are_tabpfns_categoricals(
    model_arg, capsys, tmp_path
):
    rng = np.random.default_rng(1)
    n = N_TRAIN + N_TEST
    frame = pd.DataFrame(
        {
            "a": rng.normal(size=n),
            "city": rng.choice(["Oslo", "Lima", "Pune"], size=n),
            "grade": rng.integers(1, 4, size=n),
        }
    )
    frame["y"] = frame["a"] + (frame["city"] == "Oslo") * 2.0 + frame["grade"] * 0.5
    frame.loc[3, "city"] = None
    frame.iloc[:N_TRAIN].to_csv(tmp_path / "train.csv", index=False)
    frame.iloc[N_TRAIN:].to_csv(tmp_path / "test.csv", index=False)
    data = {"train": tmp_path / "train.csv", "test": tmp_path / "test.csv"}
    out = tmp_path / "pred.csv"
    assert _run(_predict_argv(data, model_arg, out, "--categorical grade"), capsys)[0] == 0
    train, test = pd.read_csv(data["train"]), pd.read_csv(data["test"]).drop(columns="y")
    estimator = _fitted(model_arg, train, categorical_features_indices=[2])
    np.testing.assert_array_equal(pd.read_csv(out)["prediction"], estimator.predict(test))
    assert estimator.categorical_features_indices_ is not None


def test_more_than_5000_cpu_rows_need_ignore_pretraining_limits(model_arg, capsys, tmp_path):
    rng = np.random.default_rng(2)
    frame = pd.DataFrame(rng.normal(size=(5010, 2)), columns=["a", "b"])
    frame["y"] = frame["a"] - frame["b"]
    frame.iloc[:5001].to_csv(tmp_path / "train.csv", index=False)
    frame.iloc[5001:].to_csv(tmp_path / "test.csv", index=False)
    data = {"train": tmp_path / "train.csv", "test": tmp_path / "test.csv"}
    out = tmp_path / "pred.csv"
    code, _, err = _run(_predict_argv(data, model_arg, out), capsys)
    # The command's option, not tabpfn's Python argument.
    assert code == 2 and err.count("\n") == 1 and "give --ignore-pretraining-limits" in err
    assert "ignore_pretraining_limits" not in err and "more than 5000 samples" in err
    assert not out.exists()
    assert _run(_predict_argv(data, model_arg, out, "--ignore-pretraining-limits"), capsys)[0] == 0
    assert np.isfinite(pd.read_csv(out)["prediction"]).all()


def test_patch_reaches_the_embedded_classifier_with_task_classification(capsys, tmp_path):
    """``patch --model embedded`` could patch only the embedded regressor."""
    out = tmp_path / "cls"
    argv = ["patch", "--model", "embedded", "--task", "classification", "--out", str(out)]
    assert cli.main([*argv, "--quiet"]) == 0
    printed = capsys.readouterr().out
    assert "saved retrofitted classifier to " in printed
    assert f"OTabPFNClassifier(model_path={str(out)!r})" in printed
    assert "OTabPFNRegressor" not in printed
    meta = json.loads((out / "retrofit.json").read_text())
    classifier_file = retrofit.embedded_model_path(which="classifier")
    assert meta["base"] == {"name": "embedded", "kind": "classifier",
                            "sha256": sha256_file(classifier_file)}  # fmt: skip
    assert meta["kinds"] == ["classifier"]
    rng = np.random.default_rng(0)
    x = rng.normal(size=(40, 3))
    y = (x[:, 0] > 0).astype(int)
    clf = retrofit.OTabPFNClassifier(model_path=str(out), n_estimators=1,
                            inference_precision=torch.float32).fit(x, y)  # fmt: skip
    assert clf.predict_proba(x).shape == (40, 2)
    # A task the model cannot run is one line naming its kind, as predict's --task.
    assert cli.main(["patch", "--model", str(classifier_file), "--task", "regression",
                     "--out", str(tmp_path / "r"), "--quiet"]) == 2  # fmt: skip
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "which is a classifier only; give --task classification" in err
