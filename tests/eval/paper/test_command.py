"""The ``eval`` command: bad options and a bad store fail in one line before any case is
computed, and a failed start leaves no empty store.
"""

from __future__ import annotations

from eval.errors import CheckpointChangedError
from eval.paper import command as eval_command_module
from eval.paper.execution import run_suite
from tests.helpers.commands import eval_argv, listing, one_error_line, run_cli


def test_eval_with_zero_estimators_exits_2_in_one_line_and_stores_nothing(
    tiny_v3_path, capsys, tmp_path
):
    """A bad option stores no failed runs that later runs would skip."""
    store = tmp_path / "new-store"
    argv = eval_argv(tiny_v3_path, store)
    argv[argv.index("--n-estimators") + 1] = "0"
    code, stdout, err = run_cli(argv, capsys)
    assert code == 2 and stdout == ""
    one_error_line(err, "eval")
    assert "--n-estimators must be >= 1, got 0" in err
    assert not store.exists()


def test_a_bad_store_fails_before_any_case_is_computed(tiny_v3_path, capsys, monkeypatch, tmp_path):
    """``--store`` that is a file, or lies under a file."""
    planned = []
    monkeypatch.setattr(eval_command_module, "run_suite", lambda *a, **k: planned.append(a))
    afile = tmp_path / "afile"
    afile.write_text("x\n")
    for store, expected in [(afile, "is a file"), (afile / "store", "is not a directory")]:
        code, stdout, err = run_cli(eval_argv(tiny_v3_path, store), capsys)
        assert code == 2 and stdout == "", err
        one_error_line(err, "eval")
        assert expected in err
    assert planned == []
    assert listing(tmp_path) == ["afile"]


def test_an_eval_that_fails_before_its_first_run_leaves_no_empty_store(
    tiny_v3_path, capsys, monkeypatch, tmp_path
):
    """No claimed-then-released ``runs/`` folder stays behind."""

    def changed(task):
        raise CheckpointChangedError("checkpoint tensors changed during the run")

    def run_suite_changing(tasks, store, **kwargs):
        return run_suite(tasks, store, task_fn=changed)

    monkeypatch.setattr(eval_command_module, "run_suite", run_suite_changing)
    store = tmp_path / "new" / "store"
    code, _, err = run_cli(eval_argv(tiny_v3_path, store), capsys)
    assert code == 2 and "CheckpointChangedError" in err
    assert listing(tmp_path) == []
