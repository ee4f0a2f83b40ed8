"""Which stored runs a report counts, and how its files are replaced.

Runs use a tiny perturbed v3 checkpoint on the offline suite cut to a few rows
per split, as in ``tests/eval/paper/test_execution.py``.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from eval.errors import ReportError
from eval.paper import report as report_module
from eval.paper.execution import run_suite
from eval.paper.report import build_report
from eval.paper.spec import make_tasks
from eval.paper.store import load_rows, write_row
from retrofit.files import atomic_file_set

ROWS = {"max_train_rows": 40, "max_test_rows": 12}
EVAL_ARGS = ["--datasets", "qsar_fish", "--seeds", "0", "1", "--max-train-rows", "40",
             "--max-test-rows", "12", "--n-estimators", "1", "--modes", "none", "oattention",
             "full-o", "--no-progress"]  # fmt: skip


@pytest.fixture(scope="module")
def ckpt(tiny_v3_path: Path) -> Path:
    return tiny_v3_path


@pytest.fixture(scope="module")
def stored(ckpt: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """2 seeds x (unpatched, OAttention, Full-O) at tau 1: 6 ok runs."""
    store = tmp_path_factory.mktemp("stored")
    tasks = make_tasks(suite="offline18", model_path=ckpt, modes=("none", "oattention", "full-o"),
                       datasets=["qsar_fish"], seeds=[0, 1], n_estimators=1, threads=1,
                       **ROWS)  # fmt: skip
    summary = run_suite(tasks, store, progress=False)
    assert (summary.computed, summary.failed) == (6, 0)
    return store


def _copy_store(stored: Path, tmp_path: Path) -> Path:
    store = tmp_path / "store"
    shutil.copytree(stored, store)
    return store


def _variant(row: dict[str, Any], **changes: Any) -> dict[str, Any]:
    """The row as if stored under a key that differs in ``changes`` (a new key, same case)."""
    new = {**row, **changes}
    new["key"] = f"{row['key'][:-8]}{'f' * 8}"
    new["finished_at"] = "2099-01-01T00:00:00+00:00"  # the newest row of the store
    return new


def _summary_means(path: Path) -> str:
    return path.read_text().split("## Summary at tau", 1)[1].split("## Per case", 1)[0]


def test_report_refuses_a_case_stored_twice_under_keys_it_does_not_compare(
    stored: Path, tmp_path: Path
) -> None:
    """Item 9: a second run of one case (another data hash) is refused, never counted twice."""
    store = _copy_store(stored, tmp_path)
    row = next(r for r in load_rows(store) if r["mode"] == "full-o")
    write_row(store, _variant(row, data_sha256="0" * 64, rmse=row["rmse"] * 2))
    with pytest.raises(ReportError, match=r"7 runs|2 runs of 1 cases") as caught:
        build_report(store, "offline18", tau=1.0)
    message = str(caught.value)
    assert "data_sha256" in message and "qsar_fish" in message
    assert not (store / "summary.md").exists() and not (store / "cases.csv").exists()


def test_a_run_after_a_package_upgrade_is_another_context_and_no_case_counts_twice(
    stored: Path, tmp_path: Path
) -> None:
    """Item 9: one extra run under a newer safetensors moved the mean; now it is left out."""
    store = _copy_store(stored, tmp_path)
    build_report(store, "offline18", tau=1.0, out_dir=tmp_path / "before")
    row = next(r for r in load_rows(store) if r["mode"] == "full-o")
    write_row(store, _variant(row, safetensors_version="99.0", rmse=row["rmse"] * 2))
    written = build_report(store, "offline18", tau=1.0)
    cases = written["cases.csv"].read_text().splitlines()
    assert len(cases) == 1 + 6
    assert _summary_means(written["summary.md"]) == _summary_means(
        tmp_path / "before" / "summary.md"
    )
    summary = written["summary.md"].read_text()
    assert "left out 1 stored runs of another context" in summary
    assert "safetensors_version 99.0" in summary


def test_one_failed_eval_on_another_device_neither_succeeds_nor_replaces_the_table(
    ckpt: Path, stored: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Item 10: eval exits 1 when every run failed; report keeps the complete table."""
    from eval.cli import main

    store = _copy_store(stored, tmp_path)
    assert (
        main(["report", "--store", str(store), "--tau", "1", "--out", str(tmp_path / "before")])
        == 0
    )
    argv = ["eval", "--model", str(ckpt), *EVAL_ARGS, "--store", str(store)]
    assert main([*argv, "--device", "no-such-device"]) == 1
    err = capsys.readouterr().err
    assert "every run it computed failed (6)" in err and "no-such-device" in err
    assert sum(r["status"] == "failed" for r in load_rows(store)) == 6  # stored all the same
    assert main(argv) == 0  # the cpu runs are all stored: nothing fails, nothing to compute

    capsys.readouterr()
    assert main(["report", "--store", str(store), "--tau", "1"]) == 0
    assert "note: left out 6 stored runs of another context" in capsys.readouterr().out
    summary = (store / "summary.md").read_text()
    assert "runs in this report: 6 (ok 6, failed 0" in summary
    assert _summary_means(store / "summary.md") == _summary_means(
        tmp_path / "before" / "summary.md"
    )
    assert "left out 6 stored runs of another context (0 ok, 6 failed" in summary
    assert "device no-such-device (reported: cpu)" in summary


def test_a_report_that_fails_mid_write_leaves_the_previous_set_whole(
    stored: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Item 13: cases.csv is written first; a failure before summary.md changes neither."""
    store = _copy_store(stored, tmp_path)
    build_report(store, "offline18", tau=1.0)
    before = {p.name: p.read_bytes() for p in store.iterdir() if p.is_file()}
    assert {"cases.csv", "summary.md", "deltas.png"} <= set(before)
    row = next(r for r in load_rows(store) if r["mode"] == "full-o")
    write_row(store, {**row, "rmse": row["rmse"] * 3})  # the next report's numbers differ

    def killed(*args: Any, **kwargs: Any) -> str:
        raise KeyboardInterrupt  # as a Ctrl-C between cases.csv and summary.md

    monkeypatch.setattr(report_module, "_summary_text", killed)
    with pytest.raises(KeyboardInterrupt):
        build_report(store, "offline18", tau=1.0)
    after = {p.name: p.read_bytes() for p in store.iterdir() if p.is_file()}
    assert after == before
    assert not (store / ".file-set.new").exists()
    monkeypatch.undo()
    build_report(store, "offline18", tau=1.0)
    assert (store / "cases.csv").read_bytes() != before["cases.csv"]
    assert (store / "summary.md").read_bytes() != before["summary.md"]


def test_a_file_set_killed_while_moving_is_finished_by_the_next_writer(tmp_path: Path) -> None:
    """Item 13: a staged set marked ready is moved in whole; an unready one is dropped."""
    names = ("a.csv", "b.md", "c.png")
    for name in names:
        (tmp_path / name).write_text(f"old {name}")
    # What a writer killed after marking its set {a.csv, b.md} ready and moving a.csv leaves.
    staging = tmp_path / ".file-set.new"
    staging.mkdir()
    (staging / "b.md").write_text("new b.md")
    (staging / ".ready").write_text("a.csv\nb.md\n")
    (tmp_path / "a.csv").write_text("new a.csv")
    with atomic_file_set(tmp_path, names) as next_staging:
        # Finished before the next set is written: the new set whole, no old c.png beside it.
        assert {p.name: p.read_text() for p in tmp_path.iterdir() if p.is_file()} == {
            "a.csv": "new a.csv",
            "b.md": "new b.md",
        }
        assert next_staging == staging and not (staging / ".ready").exists()
        (next_staging / "c.png").write_text("newest c.png")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.png"]
    # A writer killed while writing (no ready mark) leaves the set as it was.
    staging.mkdir()
    (staging / "c.png").write_text("half")
    with pytest.raises(RuntimeError), atomic_file_set(tmp_path, names) as next_staging:
        assert (tmp_path / "c.png").read_text() == "newest c.png"
        assert not (next_staging / "c.png").exists()
        (next_staging / "c.png").write_text("failing")
        raise RuntimeError
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.png"]
    assert (tmp_path / "c.png").read_text() == "newest c.png"
