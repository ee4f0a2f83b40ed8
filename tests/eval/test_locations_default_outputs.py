"""A user's command never rewrites the committed results/.

The default store of ``eval`` and ``report`` and the default folder of every
other measuring command lie under the untracked ``tabpfn-retrofit-results/``
of the working directory (``eval.locations``); the committed store is read:
``eval`` computes every run (or copies those of the same key when asked,
``--reuse-committed``), and ``report`` says which, from the session records,
and prints its table beside the committed one, number by number.
Runs use a tiny perturbed v3 checkpoint on a few rows, as in ``test_execution``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
import shutil
from pathlib import Path

import pytest

from eval import locations
from eval.cli import build_parser, main
from eval.paper.execution import run_suite
from eval.paper.spec import RunSpec, baseline_key, make_tasks
from eval.paper.store import iter_sessions, load_records, runs_dir, write_record
from tests.helpers.commands import one_error_line

REPO = Path(__file__).resolve().parents[2]
ROWS = {"max_train_rows": 40, "max_test_rows": 12}
EVAL_ARGS = ["--datasets", "qsar_fish", "--seeds", "0", "1", "--max-train-rows", "40",
             "--max-test-rows", "12", "--n-estimators", "1", "--modes", "none", "oattention",
             "full-o"]  # fmt: skip
OTHER_CPU = "Other CPU Model 9000 | AVX2"


@pytest.fixture(scope="module")
def ckpt(tiny_v3_path: Path) -> Path:
    return tiny_v3_path


@pytest.fixture(scope="module")
def committed_runs(ckpt: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A committed offline18 store (6 ok runs) and its report, as the checkout holds one."""
    results = tmp_path_factory.mktemp("checkout") / "results"
    store = results / "offline18"
    tasks = make_tasks(suite="offline18", model_path=ckpt, modes=("none", "oattention", "full-o"),
                       datasets=["qsar_fish"], seeds=[0, 1], n_estimators=1, threads=1,
                       **ROWS)  # fmt: skip
    assert run_suite(tasks, store, progress=False).computed == 6
    report = ["report", "--store", str(store), "--committed", "none", "--tau", "1", "--partial"]
    assert main(report) == 0
    return results


def _digest(folder: Path) -> dict[str, str]:
    return {
        p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


@pytest.fixture
def checkout(
    committed_runs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[Path, Path]:
    """(committed results/, the user's working directory) with the checkout's results/ there."""
    results = tmp_path / "results"
    shutil.copytree(committed_runs, results)
    monkeypatch.setattr(locations, "_CHECKOUT_RESULTS", results)
    cwd = tmp_path / "work"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    return results, cwd


def test_the_main_job_computes_every_run_and_sets_its_table_beside_the_committed_one(
    ckpt: Path, checkout: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """It said "reused 6 runs", and report "its runs were reused" of runs it computed."""
    results, cwd = checkout
    before = _digest(results)
    assert main(["eval", "--model", str(ckpt), *EVAL_ARGS, "--no-progress"]) == 0
    out = capsys.readouterr().out
    store = cwd / "tabpfn-retrofit-results" / "offline18"
    assert "reused" not in out and "copied" not in out
    assert "done: 6 computed (0 failed, 0 non-finite), 0 already in this store" in out
    (session,) = iter_sessions(store)
    assert sorted(session.computed_keys) == sorted(r.key for r in load_records(store))
    assert session.reused_keys == () and session.reused_committed == 0
    assert main(["report", "--partial"]) == 0
    out = capsys.readouterr().out
    assert (store / "summary.md").exists() and (store / "cases.csv").exists()
    assert (
        "The 6 runs of this report, by this store's eval session records: 6 computed by "
        "`eval` into this store." in out
    )
    assert "reused" not in out and "copied" not in out
    assert f"this store ({Path('tabpfn-retrofit-results/offline18')}) beside the committed " in out
    # The same code on the same CPU: every number of the committed table, to the last bit.
    assert "All 22 numbers of the two tables (summary and per case) are equal" in out
    assert "The two tables' runs share one run context" in out
    assert _digest(results) == before  # read, never written


def test_a_reused_eval_copies_the_committed_runs_and_report_says_they_were_copied(
    ckpt: Path, checkout: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    results, cwd = checkout
    before = _digest(results)
    # With progress bars on: a run that computes nothing prints none (it printed two empty).
    assert main(["eval", "--model", str(ckpt), *EVAL_ARGS, "--reuse-committed"]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    store = cwd / "tabpfn-retrofit-results" / "offline18"
    assert f"reused 6 runs of the committed store {results / 'offline18'}" in captured.out
    assert "done: 0 computed (0 failed, 0 non-finite), 6 copied from the committed store" in (
        captured.out
    )
    for path in runs_dir(store).glob("*.json"):  # copies, byte for byte
        assert path.read_bytes() == (runs_dir(results / "offline18") / path.name).read_bytes()
    assert main(["report", "--partial"]) == 0
    out = capsys.readouterr().out
    assert (
        "The 6 runs of this report, by this store's eval session records: 6 copied by `eval "
        f"--reuse-committed` from the committed store {results / 'offline18'} (the same keys)."
    ) in out
    assert "computed" not in out.split("by this store's eval session records")[1].split("\n")[0]
    assert _digest(results) == before


def test_a_second_eval_of_a_computed_store_prints_no_progress_bar(
    ckpt: Path, checkout: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["eval", "--model", str(ckpt), *EVAL_ARGS]) == 0
    assert "cases:" in capsys.readouterr().err  # the bar of the runs it computed
    assert main(["eval", "--model", str(ckpt), *EVAL_ARGS]) == 0
    captured = capsys.readouterr()
    assert captured.err == "" and "0 computed" in captured.out
    assert "6 already in this store" in captured.out


def _as_if_made_on_another_cpu(store: Path) -> None:
    """Rewrites a store's runs as another CPU would have keyed them."""
    for run in load_records(store):
        (runs_dir(store) / f"{run.key}.json").unlink()
        fields = {name: getattr(run, name) for name in RunSpec.__dataclass_fields__
                  if name != "versions"}  # fmt: skip
        spec = RunSpec(**{**fields, "cpu": OTHER_CPU, "versions": {}})
        write_record(store, dataclasses.replace(run, cpu=OTHER_CPU, key=spec.key,
                                                baseline_key=baseline_key(spec)))  # fmt: skip


def test_on_another_cpu_runs_are_computed_the_cpu_is_named_and_both_tables_are_shown(
    ckpt: Path, checkout: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    results, _ = checkout
    _as_if_made_on_another_cpu(results / "offline18")
    before = _digest(results)
    assert main(["eval", "--model", str(ckpt), *EVAL_ARGS, "--no-progress",
                 "--reuse-committed"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "6 computed" in out and "0 copied from the committed store" in out
    assert "6 runs computed: their keys differ from the committed runs in cpu (here: " in out
    assert f"committed: {OTHER_CPU!r})" in out
    assert main(["report", "--partial"]) == 0
    out = capsys.readouterr().out
    table = [line for line in out.splitlines() if line.startswith("| Full-O")]
    assert len(table) == 1 and table[0].count("%") == 4  # yours and committed, mean and median
    assert "6 computed by `eval` into this store." in out
    assert "The two tables' runs were made in different run contexts: cpu (yours: " in out
    assert f"committed: {OTHER_CPU!r})" in out
    assert _digest(results) == before


def test_a_committed_store_that_is_not_there_is_one_line_and_nothing_is_written(
    ckpt: Path, checkout: tuple[Path, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """``report --committed /no/such/dir`` exited 0, as if there were nothing to compare."""
    results, cwd = checkout
    assert main(["eval", "--model", str(ckpt), *EVAL_ARGS, "--no-progress"]) == 0
    capsys.readouterr()
    store = cwd / "tabpfn-retrofit-results" / "offline18"
    before = _digest(store)
    for committed, what in [(tmp_path / "no" / "such", "does not exist"),
                            (results, "holds no stored runs (no runs/ folder)")]:  # fmt: skip
        assert main(["report", "--partial", "--committed", str(committed)]) == 2
        captured = capsys.readouterr()
        one_error_line(captured.err, "report")
        assert f"--committed {committed} {what}" in captured.err and captured.out == ""
    assert _digest(store) == before
    # eval reads --committed only to copy from it, and needs one to copy from.
    for extra, message in [
        (["--committed", str(results / "offline18")], "add --reuse-committed"),
        (["--reuse-committed", "--committed", "none"], "nothing to copy from (--committed none)"),
        (["--reuse-committed", "--committed", str(tmp_path / "no")], "does not exist"),
    ]:
        assert main(["eval", "--model", str(ckpt), *EVAL_ARGS, "--no-progress", *extra]) == 2
        captured = capsys.readouterr()
        one_error_line(captured.err, "eval")
        assert message in captured.err and captured.out == ""
    assert _digest(store) == before


def test_report_prints_its_table_outside_a_checkout(
    committed_runs: Path,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """With no committed table (a wheel), report prints the table, not only "wrote ..." lines."""
    store = tmp_path / "offline18"
    shutil.copytree(committed_runs / "offline18", store)
    monkeypatch.setattr(locations, "_CHECKOUT_RESULTS", None)  # as from site-packages
    monkeypatch.chdir(tmp_path)
    assert main(["report", "--store", str(store), "--tau", "1", "--partial"]) == 0
    out = capsys.readouterr().out
    summary = (store / "summary.md").read_text()
    for variant in ("| OAttention (support=count", "| Full-O (support=count"):
        (printed,) = [line for line in out.splitlines() if line.startswith(variant)]
        assert printed in summary.splitlines() and printed.count("%") == 3  # mean, median, paper
    assert (
        "(not compared with a committed table: no committed results/offline18 here (not a "
        "checkout); --committed DIR names one)" in out
    )


@pytest.mark.parametrize(
    ("command", "quick"), [("exactness", ["--quick", "--lengths", "32"]), ("ablation", ["--quick"])]
)
def test_a_quick_exactness_or_ablation_run_leaves_the_full_run_s_folder_alone(
    command: str,
    quick: list[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``--quick`` writes to ``<command>/quick``, as bench does, never over the full run's files."""
    # (eval's and report's default store is shown by the main-job tests above.)
    monkeypatch.chdir(tmp_path)
    full = locations.DEFAULT_OUTPUT_ROOT / command
    full.mkdir(parents=True)
    for name in (f"{command}.json", f"{command}.md"):
        (full / name).write_text("the full run's file\n")
    # The subject is where the files go: exactness exits 1 when a contract misses its
    # target (the quick run's verdict on AVX2 code paths), and writes its files either way.
    assert main([command, *quick, "--threads", "1"]) in (0, 1)
    assert f"wrote {full / 'quick'}/{command}.json" in capsys.readouterr().out
    for name in (f"{command}.json", f"{command}.md"):
        assert (full / name).read_text() == "the full run's file\n"
        assert (full / "quick" / name).stat().st_size > 0
    assert '"quick": true' in (full / "quick" / f"{command}.json").read_text()
    assert build_parser().parse_args([command]).out is None  # resolved by --quick or not


def test_the_regeneration_script_names_every_results_path_it_writes() -> None:
    """.ci/regenerate-results is the one writer of results/: each command says where."""
    text = (REPO / ".ci" / "regenerate-results").read_text().replace("\\\n", " ")
    commands = [line.strip() for line in text.splitlines() if line.strip().startswith("step ")]
    writer = re.compile(r"tabpfn-retrofit |python -m lab |hosttraining\.\w+\.(quality|card)")
    writers = [c for c in commands if writer.search(c)]
    assert len(writers) >= 9
    for command in writers:
        assert re.search(r"--(out|out-dir|store) (results/|retrofit/models/embedded/)", command), (
            command
        )


def test_outside_a_checkout_nothing_counts_as_committed(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """From a wheel there is no results/ beside the packages: nothing is reused or compared."""
    assert locations.committed_results("offline18") == REPO / "results" / "offline18"
    monkeypatch.setattr(locations, "_CHECKOUT_RESULTS", None)
    monkeypatch.chdir(tmp_path)
    assert locations.committed_results("offline18") is None


def test_a_wheel_run_from_the_checkout_finds_the_committed_results(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """README's first command installs the wheel and runs the main job in the checkout."""
    monkeypatch.setattr(locations, "_CHECKOUT_RESULTS", None)  # as from site-packages
    (tmp_path / "results" / "offline18").mkdir(parents=True)
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "tabpfn-retrofit"\n')
    monkeypatch.chdir(tmp_path)
    assert locations.committed_results("offline18") == Path.cwd() / "results" / "offline18"
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "another-project"\n')
    assert locations.committed_results("offline18") is None
