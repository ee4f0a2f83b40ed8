"""The ``report`` command over a store: an unreadable run file or a tau without runs is
one line and writes nothing (a module-scoped store of two runs, copied per test).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from eval import cli
from eval.paper.store import read_record, runs_dir
from tests.helpers.commands import EVAL_CASES, EVAL_FAST, eval_argv, one_error_line, run_cli


@pytest.fixture(scope="module")
def stored_suite(tiny_v3_path, tmp_path_factory) -> Path:
    """A store with two runs (unpatched and OAttention) of one case, and its report."""
    store = tmp_path_factory.mktemp("suite") / "store"
    argv = ["eval", "--model", tiny_v3_path, "--modes", "none", "oattention", "--store", store]
    assert cli.main([str(a) for a in [*argv, *EVAL_FAST, *EVAL_CASES]]) == 0
    assert cli.main(["report", "--store", str(store), "--partial"]) == 0
    return store


@pytest.fixture
def store(stored_suite, tmp_path) -> Path:
    copy = tmp_path / "store"
    shutil.copytree(stored_suite, copy)
    return copy


def test_report_on_a_truncated_run_file_names_it_and_eval_recomputes_it(
    tiny_v3_path, store, capsys
):
    """Never a silent "failed" row; eval warns in one line and recomputes."""
    run_file = sorted(runs_dir(store).glob("*.json"))[0]
    key = run_file.stem
    run_file.write_text(run_file.read_text()[:100])
    summary_before = (store / "summary.md").read_bytes()
    code, _, err = run_cli(["report", "--store", store, "--partial"], capsys)
    assert code == 2
    one_error_line(err, "report")
    assert str(run_file) in err and "unreadable" in err
    assert (store / "summary.md").read_bytes() == summary_before

    code, stdout, err = run_cli(eval_argv(tiny_v3_path, store), capsys)
    assert code == 0, err
    lines = err.splitlines()
    assert len(lines) == 1, err  # the warning, as one line, and nothing else
    assert lines[0].startswith("tabpfn-retrofit eval: warning: run file ")
    assert str(run_file) in lines[0] and "recomputing it" in lines[0]
    assert "1 computed" in stdout
    assert read_record(run_file).key == key
    assert run_cli(["report", "--store", store, "--partial"], capsys)[0] == 0


def test_report_at_a_tau_without_runs_lists_the_stored_taus_and_writes_nothing(store, capsys):
    """The default --out would have replaced summary.md with an empty table."""
    before = {p.name: p.read_bytes() for p in store.iterdir() if p.is_file()}
    code, _, err = run_cli(["report", "--store", store, "--tau", "5", "--partial"], capsys)
    assert code == 2
    one_error_line(err, "report")
    assert "no stored runs at tau 5; the store has tau 1" in err
    assert {p.name: p.read_bytes() for p in store.iterdir() if p.is_file()} == before
