"""A user's command never rewrites the committed results/.

The default store of ``eval`` and ``report`` and the default folder of every
other measuring command lie under the untracked ``tabpfn-retrofit-results/``
of the working directory (``eval.locations``); the committed store is read:
runs of the same key are reused, and ``report`` prints its table beside the
committed one with the reason for any recomputation (the CPU by name).
Runs use a tiny perturbed v3 checkpoint on a few rows, as in ``test_execution``.
"""

from __future__ import annotations

import hashlib
import re
import shutil
from pathlib import Path

import pytest

from eval import locations
from eval.cli import build_parser, main
from eval.paper.execution import run_suite
from eval.paper.spec import RunSpec, baseline_key, make_tasks
from eval.paper.store import load_rows, runs_dir, write_row

REPO = Path(__file__).resolve().parents[2]
ROWS = {"max_train_rows": 40, "max_test_rows": 12}
EVAL_ARGS = ["--datasets", "qsar_fish", "--seeds", "0", "1", "--max-train-rows", "40",
             "--max-test-rows", "12", "--n-estimators", "1", "--modes", "none", "oattention",
             "full-o", "--no-progress"]  # fmt: skip
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


def test_the_main_job_reuses_committed_runs_into_an_untracked_store_and_writes_no_result(
    ckpt: Path, checkout: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    results, cwd = checkout
    before = _digest(results)
    assert main(["eval", "--model", str(ckpt), *EVAL_ARGS]) == 0
    out = capsys.readouterr().out
    store = cwd / "tabpfn-retrofit-results" / "offline18"
    assert f"reused 6 runs of the committed store {results / 'offline18'}" in out
    assert "0 computed" in out and "6 already stored" in out
    assert len(load_rows(store)) == 6
    assert main(["report", "--partial"]) == 0
    out = capsys.readouterr().out
    assert (store / "summary.md").exists() and (store / "cases.csv").exists()
    assert "mean (committed)" in out and "Same run context as the committed table" in out
    assert _digest(results) == before  # read, never written


def _as_if_made_on_another_cpu(store: Path) -> None:
    """Rewrites a store's runs as another CPU would have keyed them."""
    for row in load_rows(store):
        (runs_dir(store) / f"{row['key']}.json").unlink()
        fields = {k: row[k] for k in RunSpec.__dataclass_fields__ if k in row}
        fields["versions"] = {}
        spec = RunSpec(**{**fields, "cpu": OTHER_CPU})
        write_row(store, {**row, "cpu": OTHER_CPU, "key": spec.key,
                          "baseline_key": baseline_key(spec)})  # fmt: skip


def test_on_another_cpu_runs_are_recomputed_the_cpu_is_named_and_both_tables_are_shown(
    ckpt: Path, checkout: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    results, _ = checkout
    _as_if_made_on_another_cpu(results / "offline18")
    before = _digest(results)
    assert main(["eval", "--model", str(ckpt), *EVAL_ARGS]) == 0
    out = capsys.readouterr().out
    assert "6 computed" in out
    assert "6 runs recomputed: their keys differ from the committed runs in cpu (here: " in out
    assert f"committed: {OTHER_CPU!r})" in out
    assert main(["report", "--partial"]) == 0
    out = capsys.readouterr().out
    table = [line for line in out.splitlines() if line.startswith("| Full-O")]
    assert len(table) == 1 and table[0].count("%") == 4  # yours and committed, mean and median
    assert f"committed: {OTHER_CPU!r})" in out and "Runs recomputed here because" in out
    assert _digest(results) == before


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
    assert "no committed table to compare with" in out


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
