"""Which stored runs a report counts, and how its files are replaced.

Runs use a tiny perturbed v3 checkpoint on the offline suite cut to a few rows
per split, as in ``tests/eval/paper/test_execution.py``.
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path
from typing import Any

import pytest

from eval.errors import ReportError
from eval.paper import report as report_module
from eval.paper.execution import run_suite
from eval.paper.record import RunRecord
from eval.paper.report import build_report
from eval.paper.spec import make_tasks
from eval.paper.store import load_records, write_record
from retrofit.files import atomic_file_set
from tests.helpers.run_records import run_record, write_run_file

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


def _variant(run: RunRecord, **changes: Any) -> RunRecord:
    """The run as if stored under a key that differs in ``changes`` (a new key, same case)."""
    key = f"{run.key[:-8]}{'f' * 8}"
    # finished last: the newest run of the store
    return dataclasses.replace(run, key=key, finished_at="2099-01-01T00:00:00+00:00", **changes)


def _summary_means(path: Path) -> str:
    return path.read_text().split("## Summary at tau", 1)[1].split("## Per case", 1)[0]


def test_report_refuses_a_case_stored_twice_under_keys_it_does_not_compare(
    stored: Path, tmp_path: Path
) -> None:
    """Item 9: a second run of one case (another data hash) is refused, never counted twice."""
    store = _copy_store(stored, tmp_path)
    run = next(r for r in load_records(store) if r.mode == "full-o")
    write_record(store, _variant(run, data_sha256="0" * 64, rmse=run.rmse * 2))
    with pytest.raises(ReportError, match=r"7 runs|2 runs of 1 cases") as caught:
        build_report(store, "offline18", tau=1.0, partial=True)
    message = str(caught.value)
    assert "data_sha256" in message and "qsar_fish" in message
    assert not (store / "summary.md").exists() and not (store / "cases.csv").exists()


def test_a_run_after_a_package_upgrade_is_another_context_and_no_case_counts_twice(
    stored: Path, tmp_path: Path
) -> None:
    """Item 9: one extra run under a newer safetensors moved the mean; now it is left out."""
    store = _copy_store(stored, tmp_path)
    build_report(store, "offline18", tau=1.0, out_dir=tmp_path / "before", partial=True)
    run = next(r for r in load_records(store) if r.mode == "full-o")
    versions = tuple((n, "99.0" if n == "safetensors" else v) for n, v in run.versions)
    write_record(store, _variant(run, versions=versions, rmse=run.rmse * 2))
    written = build_report(store, "offline18", tau=1.0, partial=True)
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
    before = ["report", "--store", str(store), "--tau", "1", "--out", str(tmp_path / "before")]
    assert main([*before, "--partial"]) == 0
    argv = ["eval", "--model", str(ckpt), *EVAL_ARGS, "--store", str(store)]
    assert main([*argv, "--device", "no-such-device"]) == 1
    err = capsys.readouterr().err
    assert "every run it computed failed (6)" in err and "no-such-device" in err
    assert sum(r.status == "failed" for r in load_records(store)) == 6  # stored all the same
    assert main(argv) == 0  # the cpu runs are all stored: nothing fails, nothing to compute

    capsys.readouterr()
    assert main(["report", "--store", str(store), "--tau", "1", "--partial"]) == 0
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
    build_report(store, "offline18", tau=1.0, partial=True)
    before = {p.name: p.read_bytes() for p in store.iterdir() if p.is_file()}
    assert {"cases.csv", "summary.md", "deltas.png"} <= set(before)
    run = next(r for r in load_records(store) if r.mode == "full-o")
    write_record(store, dataclasses.replace(run, rmse=run.rmse * 3))  # the next numbers differ

    def killed(*args: Any, **kwargs: Any) -> str:
        raise KeyboardInterrupt  # as a Ctrl-C between cases.csv and summary.md

    monkeypatch.setattr(report_module, "summary_text", killed)
    with pytest.raises(KeyboardInterrupt):
        build_report(store, "offline18", tau=1.0, partial=True)
    after = {p.name: p.read_bytes() for p in store.iterdir() if p.is_file()}
    assert after == before
    assert not (store / ".file-set.new").exists()
    monkeypatch.undo()
    build_report(store, "offline18", tau=1.0, partial=True)
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


# --------------------------------------------------------------------------- #
# Missing runs apart from failed ones; the printed table; digits
# --------------------------------------------------------------------------- #


def test_report_names_the_missing_runs_apart_from_the_failed_and_refuses_unless_partial(
    stored: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An incomplete store exited 0, named no missing run, and counted one under #failed."""
    from eval.cli import main

    store = _copy_store(stored, tmp_path)
    runs = {(r.seed, r.mode): r for r in load_records(store)}
    (store / "runs" / f"{runs[1, 'none'].key}.json").unlink()  # never stored
    write_record(store, dataclasses.replace(runs[0, "full-o"], status="failed", rmse=None,
                                            error="boom"))  # fmt: skip
    argv = ["report", "--store", str(store), "--tau", "1", "--committed", "none"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "--partial" in err
    # 18 cases x (unpatched, OAttention, Full-O) planned; 5 stored (1 of them failed).
    assert "49 of 54 planned runs of offline18 at tau 1 missing (never stored): " in err
    assert "qsar_fish/1/none, qsar_fish/2/none, qsar_fish/2/oattention/tau=1," in err
    assert "and 44 more" in err
    assert not (store / "summary.md").exists() and not (store / "cases.csv").exists()

    assert main([*argv, "--partial"]) == 0
    out = capsys.readouterr().out
    assert (
        "planned runs of offline18 at tau 1: 54; stored 5 (1 of them failed, stored with "
        "their error); missing (never stored): 49: qsar_fish/1/none, " in out
    )
    summary = (store / "summary.md").read_text()
    # cases | mean | median | #worse | #failed | #missing: seed 1 of OAttention lacks its
    # baseline (missing, not failed); seed 0 of Full-O failed; 16 cases were never run.
    oattention = next(line for line in summary.splitlines() if line.startswith("| OAttention"))
    full_o = next(line for line in summary.splitlines() if line.startswith("| Full-O"))
    assert oattention.split(" | ")[1] == "1" and oattention.split(" | ")[5:7] == ["0", "17"]
    assert full_o.split(" | ")[1] == "0" and full_o.split(" | ")[5:7] == ["1", "17"]
    assert "planned runs at tau 1: 54; stored 5 (1 failed); missing (never stored): 49" in summary
    missing = summary.split("## Missing runs (planned at tau 1, never stored)")[1]
    assert missing.split("\n## ")[0].count("\n- ") == 41  # 40 named, then "and 9 more"
    assert "- qsar_fish/1/none\n" in missing and "- and 9 more" in missing


def test_a_classification_report_names_the_missing_runs_and_refuses_unless_partial(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The same for offline_cls6: a retrofit whose baseline was never stored is missing."""
    from eval.cli import main

    base = {"suite": "offline_cls6", "dataset": "wine", "status": "ok", "tau": 1.0,
            "support": "count", "eps_den": 1e-6, "log_loss": 0.5, "accuracy": 0.8,
            "roc_auc": 0.9}  # fmt: skip
    none = {"mode": "none", "tau": None, "support": None, "eps_den": None}
    runs = [
        {**base, **none, "key": "k0", "baseline_key": "k0", "seed": 0},
        {**base, "key": "k1", "baseline_key": "k0", "seed": 0, "mode": "full-o"},
        {**base, "key": "k2", "baseline_key": "k0", "seed": 0, "mode": "oattention",
         "status": "failed", "log_loss": None, "error": "boom"},
        {**base, "key": "k3", "baseline_key": "k9", "seed": 1, "mode": "full-o"},
    ]  # fmt: skip
    for fields in runs:
        write_run_file(tmp_path, run_record(**fields))
    argv = ["report", "--suite", "offline_cls6", "--store", str(tmp_path), "--tau", "1"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "50 of 54 planned runs of offline_cls6 at tau 1 missing (never stored): " in err
    assert "breast_cancer/0/none, breast_cancer/0/oattention/tau=1, " in err  # suite order
    assert "breast_cancer/1/oattention/tau=1 and 45 more;" in err
    assert not (tmp_path / "summary.md").exists()
    assert main([*argv, "--partial"]) == 0
    out = capsys.readouterr().out
    assert "stored 4 (1 of them failed, stored with their error)" in out
    assert "missing (never stored): 50: breast_cancer/0/none, " in out
    # cases, ..., #worse, #failed, #missing: wine/1 of Full-O has no baseline (missing).
    assert "| Full-O | 1 | +0.000 % | +0.000 % | +0.000 pp | +0.0000 pp | 0 | 0 | 17 |" in out
    assert "| OAttention | 0 | n/a % | n/a % | n/a pp | n/a pp | 0 | 1 | 17 |" in out
    summary = (tmp_path / "summary.md").read_text()
    assert "## Missing runs (planned, never stored)" in summary
    assert "- wine/1/none\n- wine/1/oattention/tau=1\n- wine/2/none\n" in summary


def _fake_store(path: Path, rmse_oattention: float) -> Path:
    """One offline18 case: unpatched RMSE 1, OAttention ``rmse_oattention``, Full-O 1."""
    base = {"tau": 1.0, "support": "count", "eps_den": 1e-6, "fit_s": 0.1, "predict_s": 0.1,
            "baseline_key": "k0"}  # fmt: skip
    runs = [
        {**base, "key": "k0", "mode": "none", "tau": None, "support": None, "eps_den": None,
         "rmse": 1.0},
        {**base, "key": "k1", "mode": "oattention", "rmse": rmse_oattention},
        {**base, "key": "k2", "mode": "full-o", "rmse": 1.0},
    ]  # fmt: skip
    for fields in runs:
        write_record(path, run_record(**fields))
    return path


def test_both_columns_of_a_compared_number_have_the_same_significant_digits(
    tmp_path: Path,
) -> None:
    """-0.0049951 % printed as -0.005 % beside the committed -0.0049944 % as -0.00499 %."""
    from eval.paper.comparison import comparison_lines
    from eval.paper.reference import CommittedStore
    from eval.paper.report import REGRESSION

    mine = _fake_store(tmp_path / "mine", 1.0 - 4.9951e-5)
    committed = _fake_store(tmp_path / "committed", 1.0 - 4.9944e-5)
    lines = comparison_lines(mine, CommittedStore(committed), "offline18", 1.0, None, REGRESSION)
    (row,) = [line for line in lines if line.startswith("| OAttention |")]
    cells = row.split(" | ")
    assert cells[2:4] == ["-0.00500 %", "-0.00499 %"]  # mean, yours and committed
    assert cells[4:6] == ["-0.00500 %", "-0.00499 %"]  # median
    (full_o,) = [line for line in lines if line.startswith("| Full-O |")]
    assert full_o.split(" | ")[2:4] == ["+0.00 %", "+0.00 %"]


def _complete_store(path: Path, sweep_taus: tuple[float, ...]) -> Path:
    """All offline18 cases at tau 1 (unpatched, both retrofits), the retrofits at ``sweep_taus``."""
    from eval.paper.datasets import suite_cases

    base = {"support": "count", "eps_den": 1e-6, "fit_s": 0.1, "predict_s": 0.1}
    for case in suite_cases("offline18"):
        name = f"{case.dataset}-{case.seed}"
        case_run = {**base, "dataset": case.dataset, "seed": case.seed, "baseline_key": name}
        unpatched = {"key": name, "mode": "none", "tau": None, "support": None, "eps_den": None}
        write_record(path, run_record(**{**case_run, **unpatched, "rmse": 1.0}))
        for tau in (1.0, *sweep_taus):
            for mode in ("oattention", "full-o"):
                key = f"{name}-{mode}-{tau:g}"
                write_record(path, run_record(**case_run, key=key, mode=mode, tau=tau, rmse=0.9))
    return path


def test_report_plans_every_tau_of_the_sweep_it_reads_not_only_the_main_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A store with its sweep cut short (a run at tau 100, five sweep taus never run) exited 0."""
    import json

    from eval.cli import main

    whole = _complete_store(tmp_path / "whole", ())
    assert main(["report", "--store", str(whole), "--tau", "1", "--committed", "none"]) == 0
    capsys.readouterr()
    store = _complete_store(tmp_path / "cut", (10.0, 100.0))
    first = sorted((store / "runs").glob("*-full-o-100.json"))[0]
    cut = json.loads(first.read_text())
    first.unlink()
    argv = ["report", "--store", str(store), "--tau", "1", "--committed", "none"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    # 18 cases x (unpatched + 2 retrofits x 7 sweep taus) planned; 18 x 7 - 1 stored.
    assert "\n" not in err and "--partial" in err
    assert (
        "145 of 270 planned runs of offline18 at tau 1 and tau 0.001, 0.01, 0.1, 10, 100, "
        "1000 missing (never stored): " in err
    )
    assert "/0/none" not in err and "/oattention/tau=0.001, " in err  # the sweep's, named
    from eval.paper.completeness import completeness, planned_taus

    runs = load_records(store)
    state = completeness("offline18", runs, 1.0, planned_taus(runs, 1.0, store))
    assert [r.label for r in state.missing if r.tau in (1.0, 10.0, 100.0)] == [
        f"{cut['dataset']}/{cut['seed']}/full-o/tau=100"
    ]
    assert main([*argv, "--partial"]) == 0
    out = capsys.readouterr().out
    assert "planned runs of offline18 at tau 1 and tau 0.001, 0.01, 0.1, 10, 100, 1000: 270" in out
    assert "missing (never stored): 145" in (store / "summary.md").read_text()


def test_a_store_of_a_killed_eval_is_reported_with_partial_and_counted_without(
    stored: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """No session (a killed eval): "no stored runs ... (no eval session there)", even --partial."""
    from eval.cli import main

    store = _copy_store(stored, tmp_path)
    assert not (store / "sessions").exists()  # run_suite alone, as a killed eval leaves it
    argv = ["report", "--store", str(store), "--committed", "none"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "--partial" in err
    assert "48 of 54 planned runs of offline18 at tau 1 missing (never stored)" in err
    assert main([*argv, "--partial"]) == 0
    out = capsys.readouterr().out
    assert "planned runs of offline18 at tau 1: 54; stored 6 (0 of them failed" in out
    assert "| OAttention (support=count" in (store / "summary.md").read_text()


def test_a_killed_sweep_whose_runs_name_no_single_tau_asks_for_tau_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Runs at tau 1 and 10 only, no session: either could be the table's, so --tau is asked."""
    from eval.cli import main

    store = _complete_store(tmp_path / "store", (10.0,))
    argv = ["report", "--store", str(store), "--committed", "none", "--partial"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "no eval of offline18 finished there" in err
    assert "retrofit tau 1, 10; pass --tau" in err
    assert main([*argv, "--tau", "1"]) == 0


@pytest.mark.parametrize("suite", ["offline18", "offline_cls6"])
def test_a_file_given_as_the_store_is_named_as_a_file_in_one_line(
    suite: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`report --store <a file>` said "no stored runs", as if the folder were empty."""
    from eval.cli import main

    not_a_store = tmp_path / "cases.csv"
    not_a_store.write_text("dataset,seed\n")
    assert main(["report", "--suite", suite, "--store", str(not_a_store)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "is a file, not a folder" in err and str(not_a_store) in err
