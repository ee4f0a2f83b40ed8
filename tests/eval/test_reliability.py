"""Reliability of the command line and the store: each test says what used to go wrong.

Bad input, outputs that must not be written, permissions, ``--force``,
killed writers, one-line messages and two ``eval`` processes on one store.
The commands run in process through ``eval.cli.main`` on a tiny v3 checkpoint
(or the embedded host) with one estimator.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from tabpfn import model_loading

import retrofit
from eval import cli
from eval.errors import CheckpointChangedError
from eval.paper import command as eval_command_module
from eval.paper import execution
from eval.paper.execution import run_suite
from eval.paper.spec import make_tasks
from eval.paper.store import (
    claim_run,
    read_row,
    release_claim,
    run_path,
    runs_dir,
    write_row,
    write_session,
)
from retrofit.cli.console import run_command
from retrofit.errors import RetrofitWarning
from retrofit.models import saved, weights
from retrofit.regressor import OTabPFNRegressor

FAST = ["--n-estimators", "1", "--precision", "float32", "--device", "cpu", "--quiet"]
EVAL_FAST = ["--n-estimators", "1", "--max-train-rows", "40", "--max-test-rows", "12"]
EVAL_CASES = ["--datasets", "qsar_fish", "--seeds", "0", "--no-progress"]
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def model_arg(request) -> str:
    """``embedded`` once the shipped host verifies, else a tiny v3 checkpoint."""
    try:
        retrofit.embedded_model_path()
        return "embedded"
    except Exception:  # not shipped yet, or mid-update
        pass
    return str(request.getfixturevalue("tiny_v3_path"))


@pytest.fixture(scope="module")
def tiny_ckpt(tiny_v3_path) -> Path:
    return tiny_v3_path


@pytest.fixture
def data(tmp_path) -> dict[str, Path]:
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 3))
    frame = pd.DataFrame(X, columns=["a", "b", "c"]).assign(y=X @ np.array([1.0, -2.0, 0.5]))
    paths = {"train": tmp_path / "train.csv", "test": tmp_path / "test.csv"}
    frame.iloc[:30].to_csv(paths["train"], index=False)
    frame.iloc[30:].to_csv(paths["test"], index=False)
    return paths


@pytest.fixture
def umask():
    """Sets the process umask for one test and restores it afterwards."""
    previous = os.umask(0o022)
    os.umask(previous)
    yield lambda value: os.umask(value)
    os.umask(previous)


def _run(argv, capsys) -> tuple[int, str, str]:
    code = cli.main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _one_error_line(err: str, command: str) -> None:
    assert err.count("\n") == 1, err
    assert err.startswith(f"tabpfn-retrofit {command}: error: "), err


def _listing(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def _mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _predict(data, model_arg, out, *extra) -> list:
    return ["predict", "--train", data["train"], "--target", "y", "--test", data["test"],
            "--out", out, "--model", model_arg, *FAST, *extra]  # fmt: skip


# --- item 5: repeated column names ---------------------------------------------------


def test_a_repeated_column_in_a_header_is_refused_naming_file_and_column(data, model_arg, capsys):
    """Pandas would silently rename the second ``a`` to ``a.1``."""
    train = data["train"].parent / "dup.csv"
    train.write_text("a,b,a,y\n1,2,3,4\n2,3,4,5\n3,4,5,6\n")
    argv = _predict({"train": train, "test": data["test"]}, model_arg, train.parent / "p.csv")
    code, _, err = _run(argv, capsys)
    assert code == 2
    _one_error_line(err, "predict")
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
    code, _, err = _run(_predict({"train": train, "test": test}, model_arg, out), capsys)
    assert code == 2
    _one_error_line(err, "predict")
    assert f"test file {test} repeats column(s) 'a'" in err
    assert not out.exists()


# --- item 15, command-line parts: inf in a feature, a directory without retrofit.json ---


@pytest.mark.parametrize("role", ["train", "test"])
def test_an_infinite_feature_names_the_file_the_column_and_the_row(role, data, model_arg, capsys):
    """Tabpfn said only "Input X contains infinity"."""
    frame = pd.read_csv(data[role])
    frame.loc[2, "b"] = np.inf
    frame.to_csv(data[role], index=False)
    out = data["train"].parent / "p.csv"
    code, _, err = _run(_predict(data, model_arg, out), capsys)
    assert code == 2
    _one_error_line(err, "predict")
    assert f"feature column 'b' in {data[role]} holds an infinite value (data row 2: inf)" in err
    assert not out.exists()


def test_a_model_directory_without_retrofit_json_says_that_file_is_missing(data, capsys, tmp_path):
    """ "is a directory, not a checkpoint" did not say what was missing."""
    folder = tmp_path / "model"
    folder.mkdir()
    code, _, err = _run(_predict(data, folder, tmp_path / "p.csv"), capsys)
    assert code == 2
    _one_error_line(err, "predict")
    assert "it has no retrofit.json" in err


# --- item 6: --out resolving to an input ------------------------------------------------


@pytest.mark.parametrize("how", ["same path", "relative path", "symbolic link", "hard link"])
@pytest.mark.parametrize("role", ["train", "test"])
def test_out_resolving_to_an_input_is_refused_before_anything_is_written(
    how, role, data, model_arg, capsys, monkeypatch
):
    """``--out`` equal to --train or --test never replaces it."""
    folder = data[role].parent
    monkeypatch.chdir(folder)
    target = data[role]
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
    code, stdout, err = _run(_predict(data, model_arg, out), capsys)
    assert code == 2 and stdout == ""
    _one_error_line(err, "predict")
    assert f"is the {role} file" in err
    assert {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()} == before


def test_holdout_out_equal_to_the_training_file_is_refused(data, model_arg, capsys):
    """The reported case, ``--train X.csv --holdout 0.25 --out X.csv``."""
    original = data["train"].read_bytes()
    argv = ["predict", "--train", data["train"], "--target", "y", "--holdout", "0.25"]
    code, _, err = _run([*argv, "--out", data["train"], "--model", model_arg, *FAST], capsys)
    assert code == 2 and "is the train file" in err
    assert data["train"].read_bytes() == original


def test_patch_out_equal_to_the_model_file_is_refused(tiny_ckpt, capsys, tmp_path):
    """``--force`` must not replace the source weights."""
    source = tmp_path / "src.safetensors"
    shutil.copyfile(tiny_ckpt, source)
    original = source.read_bytes()
    code, _, err = _run(["patch", "--model", source, "--out", source, "--force", "--quiet"], capsys)
    assert code == 2
    _one_error_line(err, "patch")
    assert "is the --model file" in err
    assert source.read_bytes() == original and _listing(tmp_path) == ["src.safetensors"]


# --- item 7: permissions ----------------------------------------------------------------


def test_predictions_get_the_umask_mode_and_keep_an_existing_files_mode(
    data, model_arg, capsys, umask
):
    """Not 0600 from the temporary file."""
    out = data["train"].parent / "pred.csv"
    umask(0o027)
    assert _run(_predict(data, model_arg, out), capsys)[0] == 0
    assert _mode(out) == 0o640
    os.chmod(out, 0o644)
    umask(0o077)
    assert _run(_predict(data, model_arg, out), capsys)[0] == 0
    assert _mode(out) == 0o644  # an overwritten file keeps its mode


def test_run_and_session_files_get_the_umask_mode(tmp_path, umask):
    """Store files follow the umask and keep an existing mode."""
    umask(0o002)
    row = write_row(tmp_path, {"key": "k" * 64, "status": "ok"})
    session = write_session(tmp_path, {"command": "eval"})
    assert _mode(row) == 0o664 and _mode(session) == 0o664
    os.chmod(row, 0o640)
    write_row(tmp_path, {"key": "k" * 64, "status": "failed"})
    assert _mode(row) == 0o640 and read_row(row)["status"] == "failed"


def test_a_saved_model_gets_the_umask_modes_and_keeps_them_when_replaced(
    model_arg, capsys, tmp_path, umask
):
    """A saved directory was 0700 (mkdtemp); now 0777 & ~umask."""
    out = tmp_path / "d"
    umask(0o022)
    assert _run(["patch", "--model", model_arg, "--out", out, "--quiet"], capsys)[0] == 0
    assert _mode(out) == 0o755
    assert {_mode(p) for p in out.iterdir()} == {0o644}
    umask(0o077)
    argv = ["patch", "--model", model_arg, "--mode", "none", "--out", out, "--force", "--quiet"]
    assert _run(argv, capsys)[0] == 0
    assert saved.load_saved(out).settings["mode"] == "none"
    assert _mode(out) == 0o755 and {_mode(p) for p in out.iterdir()} == {0o644}
    fresh = tmp_path / "e"
    assert _run(["patch", "--model", model_arg, "--out", fresh, "--quiet"], capsys)[0] == 0
    assert _mode(fresh) == 0o700 and {_mode(p) for p in fresh.iterdir()} == {0o600}


# --- eval stores for items 8, 9, 10, 14 ---------------------------------------------------


@pytest.fixture(scope="module")
def stored_suite(tiny_ckpt, tmp_path_factory) -> Path:
    """A store with two runs (unpatched and OAttention) of one case, and its report."""
    store = tmp_path_factory.mktemp("suite") / "store"
    argv = ["eval", "--model", tiny_ckpt, "--modes", "none", "oattention", "--store", store]
    assert cli.main([str(a) for a in [*argv, *EVAL_FAST, *EVAL_CASES]]) == 0
    assert cli.main(["report", "--store", str(store), "--partial"]) == 0
    return store


@pytest.fixture
def store(stored_suite, tmp_path) -> Path:
    copy = tmp_path / "store"
    shutil.copytree(stored_suite, copy)
    return copy


def _eval_argv(tiny_ckpt, store, *extra) -> list:
    return ["eval", "--model", tiny_ckpt, "--modes", "none", "oattention", "--store", store,
            *EVAL_FAST, *EVAL_CASES, *extra]  # fmt: skip


def test_eval_with_zero_estimators_exits_2_in_one_line_and_stores_nothing(
    tiny_ckpt, capsys, tmp_path
):
    """It used to store three failed runs that later runs skipped."""
    store = tmp_path / "new-store"
    argv = _eval_argv(tiny_ckpt, store)
    argv[argv.index("--n-estimators") + 1] = "0"
    code, stdout, err = _run(argv, capsys)
    assert code == 2 and stdout == ""
    _one_error_line(err, "eval")
    assert "--n-estimators must be >= 1, got 0" in err
    assert not store.exists()


def test_report_on_a_truncated_run_file_names_it_and_eval_recomputes_it(tiny_ckpt, store, capsys):
    """Never a silent "failed" row; eval warns in one line and recomputes."""
    run_file = sorted(runs_dir(store).glob("*.json"))[0]
    key = run_file.stem
    run_file.write_text(run_file.read_text()[:100])
    summary_before = (store / "summary.md").read_bytes()
    code, _, err = _run(["report", "--store", store, "--partial"], capsys)
    assert code == 2
    _one_error_line(err, "report")
    assert str(run_file) in err and "unreadable" in err
    assert (store / "summary.md").read_bytes() == summary_before

    code, stdout, err = _run(_eval_argv(tiny_ckpt, store), capsys)
    assert code == 0, err
    lines = err.splitlines()
    assert len(lines) == 1, err  # the warning, as one line, and nothing else
    assert lines[0].startswith("tabpfn-retrofit eval: warning: run file ")
    assert str(run_file) in lines[0] and "recomputing it" in lines[0]
    assert "1 computed" in stdout
    assert read_row(run_file)["key"] == key
    assert _run(["report", "--store", store, "--partial"], capsys)[0] == 0


def test_report_at_a_tau_without_runs_lists_the_stored_taus_and_writes_nothing(store, capsys):
    """The default --out would have replaced summary.md with an empty table."""
    before = {p.name: p.read_bytes() for p in store.iterdir() if p.is_file()}
    code, _, err = _run(["report", "--store", store, "--tau", "5", "--partial"], capsys)
    assert code == 2
    _one_error_line(err, "report")
    assert "no stored runs at tau 5; the store has tau 1" in err
    assert {p.name: p.read_bytes() for p in store.iterdir() if p.is_file()} == before


# --- item 11: patch --force ---------------------------------------------------------------


def test_patch_force_refuses_a_directory_that_is_not_a_saved_model(model_arg, capsys, tmp_path):
    """--force deleted any directory (``keep.txt`` gone)."""
    out = tmp_path / "d"
    out.mkdir()
    (out / "keep.txt").write_text("mine\n")
    code, _, err = _run(["patch", "--model", model_arg, "--out", out, "--force", "--quiet"], capsys)
    assert code == 2
    _one_error_line(err, "patch")
    assert "not a saved retrofit (no retrofit.json)" in err
    assert (out / "keep.txt").read_text() == "mine\n" and _listing(tmp_path) == ["d"]


def test_patch_force_refuses_a_saved_directory_that_holds_other_files(model_arg, capsys, tmp_path):
    """A saved directory with the user's own files in it is not replaced."""
    out = tmp_path / "d"
    assert _run(["patch", "--model", model_arg, "--out", out, "--quiet"], capsys)[0] == 0
    (out / "notes.md").write_text("mine\n")
    argv = ["patch", "--model", model_arg, "--mode", "none", "--out", out, "--force", "--quiet"]
    code, _, err = _run(argv, capsys)
    assert code == 2 and "notes.md" in err
    assert saved.load_saved(out).settings["mode"] == "full-o"
    assert (out / "notes.md").read_text() == "mine\n"


def test_patch_force_onto_a_file_replaces_it_and_leaves_nothing_hidden(model_arg, capsys, tmp_path):
    """Replacing a file left ``.NAME.old-PID`` behind."""
    out = tmp_path / "d"
    out.write_text("a file\n")
    code, _, err = _run(["patch", "--model", model_arg, "--out", out, "--force", "--quiet"], capsys)
    assert code == 0, err
    assert saved.is_saved_dir(out)
    assert _listing(tmp_path) == ["d"]


def test_the_next_patch_removes_what_a_killed_patch_left(model_arg, capsys, tmp_path):
    """A killed patch's hidden temp folder is cleaned by the next run.

    Simulated: the folders a kill between ``mkdtemp`` and the rename leaves, for a
    dead PID (removed) and for a running one (another patch at work: kept).
    """
    dead, alive = _dead_pid(), os.getpid()
    stale = tmp_path / f".d.tmp-{dead}-x1y2"
    stale.mkdir()
    (stale / "tabpfn_v3_regressor_retrofit.safetensors").write_bytes(b"half")
    busy = tmp_path / f".d.tmp-{alive}-a3b4"
    busy.mkdir()
    code, _, err = _run(["patch", "--model", model_arg, "--out", tmp_path / "d", "--quiet"], capsys)
    assert code == 0, err
    assert _listing(tmp_path) == sorted(["d", busy.name])


def test_a_patch_killed_between_its_two_renames_gets_the_old_model_back(
    model_arg, capsys, tmp_path
):
    """``DIR`` moved aside to ``.DIR.old-PID`` is put back, not deleted."""
    out = tmp_path / "d"
    assert _run(["patch", "--model", model_arg, "--out", out, "--quiet"], capsys)[0] == 0
    aside = tmp_path / f".d.old-{_dead_pid()}"
    out.rename(aside)  # what a kill right after the first rename leaves
    code, _, err = _run(["patch", "--model", model_arg, "--out", out, "--quiet"], capsys)
    assert code == 2 and "already exists" in err  # the old model is back, --force not given
    assert saved.load_saved(out).settings["mode"] == "full-o"
    assert _listing(tmp_path) == ["d"]


def test_a_leftover_old_copy_is_removed_once_the_new_directory_is_in_place(
    model_arg, capsys, tmp_path
):
    """Killed after the second rename, the old copy is just removed."""
    out = tmp_path / "d"
    assert _run(["patch", "--model", model_arg, "--out", out, "--quiet"], capsys)[0] == 0
    (tmp_path / f".d.old-{_dead_pid()}").write_text("the file --force replaced\n")
    argv = ["patch", "--model", model_arg, "--mode", "none", "--out", out, "--force", "--quiet"]
    assert _run(argv, capsys)[0] == 0
    assert saved.load_saved(out).settings["mode"] == "none"
    assert _listing(tmp_path) == ["d"]


# --- item 13: one line, quiet libraries -------------------------------------------------


@pytest.mark.parametrize(
    "command", ["predict", "patch", "exactness", "ablation", "eval", "report", "bench"]
)
def test_a_usage_error_of_every_subcommand_is_one_line(command, capsys):
    """Argparse printed usage plus the error (9 lines)."""
    with pytest.raises(SystemExit) as info:
        cli.main([command, "--no-such-option"])
    assert info.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    _one_error_line(captured.err, command)


@pytest.mark.parametrize(
    ("module", "prog"),
    [
        ("hosttraining.regression.pretrain", "python -m hosttraining.regression.pretrain"),
        ("hosttraining.regression.quality", "python -m hosttraining.regression.quality"),
        ("hosttraining.regression.card", "python -m hosttraining.regression.card"),
        ("eval.gpu_check", "gpu_check"),
        ("eval.paper.datasets.__main__", "python -m eval.paper.datasets"),
        ("eval.calibration", "python -m eval.calibration"),
    ],
)
def test_a_usage_error_of_every_python_dash_m_entry_point_is_one_line(module, prog, capsys):
    """Each ``main`` runs under ``retrofit.cli.console.run_main``."""
    main = __import__(module, fromlist=["main"]).main
    assert main(["--no-such-option"]) == 2
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1, captured.err
    assert captured.err.startswith(f"{prog}: error: "), captured.err


def test_a_python_dash_m_entry_point_fails_in_one_line_as_a_process():
    """The same through the interpreter, as a user runs it."""
    result = subprocess.run(
        [sys.executable, "-m", "eval.paper.datasets", "--print-manifest", "nope"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith("python -m eval.paper.datasets: error: ")


def test_library_warnings_logs_and_ansi_escapes_stay_off_a_commands_stderr(capsys):
    """Only the project's warnings, one line each, no escapes."""

    def body() -> int:
        warnings.warn("torch: TypedStorage is deprecated", UserWarning, stacklevel=1)
        warnings.warn("sklearn says\nover two lines", FutureWarning, stacklevel=1)
        logging.getLogger("huggingface_hub").warning("Retrying in 1s [Retry 1/5].")
        logging.getLogger("tabpfn.model_loading").warning("HuggingFace download failed.")
        for _ in range(2):
            warnings.warn("\x1b[33mstore\x1b[0m note\nsecond line", RetrofitWarning, stacklevel=1)
        raise RuntimeError("\x1b[1;31mbold red\x1b[0m failure\n  detail")

    code = run_command("tabpfn-retrofit demo", body)
    captured = capsys.readouterr()
    assert code == 2
    assert captured.err == (
        "tabpfn-retrofit demo: warning: store note second line\n"
        "tabpfn-retrofit demo: error: RuntimeError: bold red failure detail\n"
    )
    assert not logging.root.manager.disable  # logging is back on after the command


_NOISY_PREDICT = """
import logging, sys, warnings
from eval import cli
from retrofit.regressor import OTabPFNRegressor
fit = OTabPFNRegressor.fit
def noisy_fit(self, X, y):
    warnings.warn("\\x1b[31mtorch.cuda: no GPU\\x1b[0m", UserWarning)
    logging.getLogger("tabpfn").warning("Running on CPU")
    logging.getLogger("huggingface_hub").warning("Retrying in 1s [Retry 1/5].")
    return fit(self, X, y)
OTabPFNRegressor.fit = noisy_fit
sys.exit(cli.main(sys.argv[1:]))
"""


def test_predict_keeps_the_libraries_warnings_and_logs_off_stderr(data, model_arg, tmp_path):
    """As a process (pytest would swallow both): stderr stays empty."""
    argv = [str(a) for a in _predict(data, model_arg, tmp_path / "p.csv")]
    result = subprocess.run(
        [sys.executable, "-c", _NOISY_PREDICT, *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env={**os.environ, "PYTHONPATH": str(ROOT), "PYTHONWARNINGS": "always"},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("RMSE ")
    assert result.stderr == ""


def test_offline_v2_without_hf_hub_offline_fails_fast_in_one_line(
    data, capsys, monkeypatch, tmp_path
):
    """16 lines of retry logging over 31 s before; now no download at all."""
    cache = tmp_path / "cache"
    monkeypatch.setattr(model_loading, "get_cache_dir", lambda: cache)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    for name in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    tried = []
    monkeypatch.setattr(model_loading, "download_model", lambda *a, **k: tried.append(a))

    def unreachable(address, timeout=None):
        raise OSError("[Errno -2] Name or service not known")

    monkeypatch.setattr(weights.socket, "create_connection", unreachable)
    out = tmp_path / "p.csv"
    code, _, err = _run(_predict(data, "v2", out), capsys)
    assert code == 2
    _one_error_line(err, "predict")
    assert "huggingface.co cannot be reached" in err
    assert str(cache / "tabpfn-v2-regressor.ckpt") in err
    assert tried == [] and not out.exists()


# --- item 14: outputs checked before the work -----------------------------------------------


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
def test_a_bad_predict_out_fails_before_the_fit(make_out, expected, data, model_arg, fits, capsys):
    """The fit used to run first and the error came after it."""
    folder = data["train"].parent
    before = _listing(folder)
    code, _, err = _run(_predict(data, model_arg, make_out(folder)), capsys)
    assert code == 2 and expected in err
    assert fits == []
    assert _listing(folder) == before


def test_a_bad_store_fails_before_any_case_is_computed(tiny_ckpt, capsys, monkeypatch, tmp_path):
    """``--store`` that is a file, or lies under a file."""
    planned = []
    monkeypatch.setattr(eval_command_module, "run_suite", lambda *a, **k: planned.append(a))
    afile = tmp_path / "afile"
    afile.write_text("x\n")
    for store, expected in [(afile, "is a file"), (afile / "store", "is not a directory")]:
        code, stdout, err = _run(_eval_argv(tiny_ckpt, store), capsys)
        assert code == 2 and stdout == "", err
        _one_error_line(err, "eval")
        assert expected in err
    assert planned == []
    assert _listing(tmp_path) == ["afile"]


def test_an_eval_that_fails_before_its_first_run_leaves_no_empty_store(
    tiny_ckpt, capsys, monkeypatch, tmp_path
):
    """The claimed-then-released ``runs/`` folder stayed behind."""

    def changed(task):
        raise CheckpointChangedError("checkpoint tensors changed during the run")

    def run_suite_changing(tasks, store, **kwargs):
        return run_suite(tasks, store, task_fn=changed)

    monkeypatch.setattr(eval_command_module, "run_suite", run_suite_changing)
    store = tmp_path / "new" / "store"
    code, _, err = _run(_eval_argv(tiny_ckpt, store), capsys)
    assert code == 2 and "CheckpointChangedError" in err
    assert _listing(tmp_path) == []


def test_a_patch_out_under_a_file_fails_before_loading_the_model(capsys, monkeypatch, tmp_path):
    """Checked before the (possibly downloading) model resolution."""
    from retrofit.cli import commands as retrofit_cli

    resolved = []
    monkeypatch.setattr(retrofit_cli, "_check_model_argument", resolved.append)
    afile = tmp_path / "afile"
    afile.write_text("x\n")
    code, _, err = _run(["patch", "--out", afile / "d", "--quiet"], capsys)
    assert code == 2 and f"folder {afile} is a file, not a directory" in err
    assert resolved == []


# --- item 16: two eval processes on one store ---------------------------------------------


def _fake_row(task) -> dict:
    spec = task.spec
    return {"key": spec.key, "status": "ok", "dataset": spec.dataset, "seed": spec.seed,
            "mode": spec.mode, "pid": os.getpid()}  # fmt: skip


_HOLDER = """
import sys
from eval.paper.store import claim_run
store, keys = sys.argv[1], sys.argv[2:]
assert all(claim_run(store, key) for key in keys)
print("held", flush=True)
sys.stdin.read()
"""


def test_a_second_eval_skips_the_runs_another_process_holds_and_takes_over_a_dead_ones(
    tiny_ckpt, tmp_path
):
    """Nothing is computed twice; a killed holder's claims are taken over."""
    tasks = make_tasks(
        suite="offline18", model_path=tiny_ckpt, modes=("none", "oattention"),
        datasets=["qsar_fish"], seeds=[0, 1], n_estimators=1, max_train_rows=40,
        max_test_rows=12,
    )  # fmt: skip
    keys = [t.spec.key for t in tasks]
    store = tmp_path / "store"
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(store), *keys[:3]],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        computed: list[str] = []

        def task_fn(task):
            computed.append(task.spec.key)
            return _fake_row(task)

        summary = run_suite(tasks, store, task_fn=task_fn, progress=False)
        assert summary.claimed_elsewhere == 3 and summary.computed == len(keys) - 3
        assert computed == keys[3:]
        assert all((runs_dir(store) / f"{k}.claim").exists() for k in keys[:3])
    finally:
        holder.kill()
        holder.wait()
    # The holder is gone (kill -9), its claim files remain: they are taken over.
    summary = run_suite(tasks, store, task_fn=task_fn, progress=False)
    assert summary.claimed_elsewhere == 0 and summary.skipped == len(keys) - 3
    assert sorted(computed) == sorted(keys) and len(computed) == len(set(computed))
    assert sorted(p.name for p in runs_dir(store).iterdir()) == sorted(f"{k}.json" for k in keys)


_KILLED_MID_RUN = """
import os, pickle, signal, sys
from eval.paper.execution import run_suite
store, tasks = sys.argv[1], pickle.load(open(sys.argv[2], "rb"))
done = []

def task_fn(task):
    if len(done) == 2:  # two runs stored, the third in flight: kill -9
        os.kill(os.getpid(), signal.SIGKILL)
    done.append(task.spec.key)
    return {"key": task.spec.key, "status": "ok", "dataset": task.spec.dataset,
            "seed": task.spec.seed, "mode": task.spec.mode, "pid": os.getpid()}

run_suite(tasks, store, task_fn=task_fn, progress=False)
"""


def test_a_killed_eval_resumed_to_completion_leaves_no_claim_and_steals_no_live_one(
    tiny_ckpt, tmp_path
):
    """Issue 33: the claims of a killed eval stayed in the store after its resume finished."""
    import pickle

    tasks = make_tasks(
        suite="offline18", model_path=tiny_ckpt, modes=("none", "oattention"),
        datasets=["qsar_fish"], seeds=[0, 1], n_estimators=1, max_train_rows=40,
        max_test_rows=12,
    )  # fmt: skip
    keys = [t.spec.key for t in tasks]
    store = tmp_path / "store"
    (tmp_path / "tasks.pkl").write_bytes(pickle.dumps(tasks))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    killed = subprocess.run(
        [sys.executable, "-c", _KILLED_MID_RUN, str(store), str(tmp_path / "tasks.pkl")],
        cwd=ROOT, env=env, capture_output=True, text=True,
    )  # fmt: skip
    assert killed.returncode == -9, killed.stderr
    claims = sorted(p.stem for p in runs_dir(store).glob("*.claim"))
    assert len(list(runs_dir(store).glob("*.json"))) == 2 and keys[2] in claims
    # Another live eval holds a claim on a run of another plan (say, another tau).
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(store), "f" * 64],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT, env=env,
    )  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "held"
        summary = run_suite(tasks, store, task_fn=_fake_row, progress=False)
        assert (summary.skipped, summary.computed) == (2, 2)
        assert sorted(p.name for p in runs_dir(store).iterdir()) == sorted(
            [*(f"{k}.json" for k in keys), f"{'f' * 64}.claim"]
        )
        assert not claim_run(store, "f" * 64)  # still the holder's
    finally:
        holder.kill()
        holder.wait()
    run_suite(tasks, store, task_fn=_fake_row, progress=False)  # the holder died: its claim goes
    assert sorted(p.name for p in runs_dir(store).iterdir()) == sorted(f"{k}.json" for k in keys)


def test_a_claim_file_of_a_dead_pid_is_taken_over_and_a_held_one_is_not(tmp_path):
    """The claim of a killed process never blocks a run forever."""
    runs_dir(tmp_path).mkdir(parents=True)
    (runs_dir(tmp_path) / "k.claim").write_text(f"{_dead_pid()} somehost\n")
    assert claim_run(tmp_path, "k")
    assert not claim_run(tmp_path, "k")  # held (by this process): a second run_suite skips it
    assert (runs_dir(tmp_path) / "k.claim").read_text().split()[0] == str(os.getpid())
    release_claim(tmp_path, "k")
    assert not (runs_dir(tmp_path) / "k.claim").exists()
    assert claim_run(tmp_path, "k")
    release_claim(tmp_path, "k")


def test_a_run_stored_by_another_process_while_planning_is_not_recomputed(
    tiny_ckpt, tmp_path, monkeypatch
):
    """The other process finished and released between our look and claim."""
    tasks = make_tasks(
        suite="offline18", model_path=tiny_ckpt, modes=("none",), datasets=["qsar_fish"],
        seeds=[0], n_estimators=1, max_train_rows=40, max_test_rows=12,
    )  # fmt: skip
    store = tmp_path / "store"
    real_claim = execution.claim_run

    def claim_after_the_other_finished(store_, key):
        write_row(store_, {**_fake_row(tasks[0]), "pid": -1})  # the other process's row
        return real_claim(store_, key)

    monkeypatch.setattr(execution, "claim_run", claim_after_the_other_finished)
    computed = []
    summary = run_suite(tasks, store, task_fn=computed.append, progress=False)
    assert computed == [] and summary.computed == 0 and summary.skipped == 1
    assert read_row(run_path(store, tasks[0].spec.key))["pid"] == -1
    assert not (runs_dir(store) / f"{tasks[0].spec.key}.claim").exists()
    assert json.loads(run_path(store, tasks[0].spec.key).read_text())["status"] == "ok"
