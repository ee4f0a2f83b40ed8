"""The evaluation runner, its store, executors, carriers and the report.

Runs use a tiny perturbed v3 checkpoint and the offline suite cut to a few
rows per split (``max_train_rows`` / ``max_test_rows``), so each fit is fast.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from eval.errors import CheckpointChangedError, MissingExtraError
from eval.paper import execution
from eval.paper import spec as spec_module
from eval.paper.execution import run_suite, run_task
from eval.paper.executors import JoblibExecutor, SerialExecutor, make_executor
from eval.paper.report import build_report
from eval.paper.spec import baseline_key, make_tasks, state_dict_sha256
from eval.paper.store import claim_run, load_records, read_record, run_path, runs_dir, write_record
from eval.paper.tables import CASE_COLUMNS
from retrofit.files import sha256_file
from tests.helpers import forks
from tests.helpers.tiny_models import tiny_inference_config, tiny_v3_checkpoint

ROWS = {"max_train_rows": 40, "max_test_rows": 12}


@pytest.fixture(scope="module")
def ckpt(tiny_v3_path: Path) -> Path:
    return tiny_v3_path


def _tasks(ckpt: Path, **kw: Any) -> list[spec_module.Task]:
    args: dict[str, Any] = {
        "suite": "offline18",
        "model_path": ckpt,
        "modes": ("none", "oattention"),
        "datasets": ["qsar_fish"],
        "seeds": [0, 1],
        "n_estimators": 1,
        "threads": 1,
        **ROWS,
    }
    args.update(kw)
    return make_tasks(**args)


class _Counter:
    """Counts fits through the runner's estimator factory (serial runs only)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.fits = 0
        real = execution.build_estimator

        def counting(spec: spec_module.RunSpec, model_path: str, **kw: Any) -> Any:
            est = real(spec, model_path, **kw)
            fit = est.fit

            def counted_fit(*a: Any, **k: Any) -> Any:
                self.fits += 1
                return fit(*a, **k)

            est.fit = counted_fit
            return est

        monkeypatch.setattr(execution, "build_estimator", counting)


def _files(store: Path) -> list[Path]:
    return sorted(runs_dir(store).iterdir())


# --------------------------------------------------------------------------- #
# Keys
# --------------------------------------------------------------------------- #


def test_keys_cover_config_and_baseline_is_shared_across_taus(ckpt: Path) -> None:
    tasks = _tasks(ckpt, taus=(0.1, 1.0), seeds=[0])
    modes = [(t.spec.mode, t.spec.tau) for t in tasks]
    assert modes == [("none", None), ("oattention", 0.1), ("oattention", 1.0)]
    keys = {t.spec.key for t in tasks}
    assert len(keys) == 3
    none_key = tasks[0].spec.key
    assert all(baseline_key(t.spec) == none_key for t in tasks)
    # Every field that can change a number changes the key, the code included.
    spec = tasks[1].spec
    assert spec.code_sha256 == spec_module.code_sha256()
    for change in (
        {"n_estimators": 2},
        {"checkpoint_sha256": "0" * 64},
        {"code_sha256": "0" * 64},
        {"dtype": "float64"},
        {"seed": 2},
        {"eps_den": 1e-5},
        {"versions": {**spec.versions, "tabpfn": "0.0"}},
    ):
        assert spec_module.RunSpec(**{**spec.as_dict(), **change}).key != spec.key


def test_n_estimators_defaults_to_the_checkpoint_config(tmp_path: Path) -> None:
    from tests.helpers.tiny_models import build_tiny_v3, save_tiny_checkpoint, tiny_v3_config

    cfg = tiny_v3_config()
    path = save_tiny_checkpoint(
        build_tiny_v3(cfg),
        cfg,
        tmp_path / "t_v3.safetensors",
        inference_config=tiny_inference_config(n_estimators=3),
    )
    tasks = _tasks(path, n_estimators=None, modes=("none",), seeds=[0])
    assert tasks[0].spec.n_estimators == 3


# --------------------------------------------------------------------------- #
# Store, resume, failures
# --------------------------------------------------------------------------- #


def test_one_atomic_file_per_run_with_provenance_and_rerun_skips(
    ckpt: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    counter = _Counter(monkeypatch)
    tasks = _tasks(ckpt)
    summary = run_suite(tasks, tmp_path, progress=False)
    assert (summary.computed, summary.skipped, counter.fits) == (4, 0, 4)
    files = _files(tmp_path)
    assert [f.stem for f in files] == sorted(t.spec.key for t in tasks)
    for path in files:
        row = json.loads(path.read_text())
        assert row["status"] == "ok", row["error"]
        assert np.isfinite(row["rmse"]) and row["rmse"] > 0
        assert row["checkpoint_sha256"] == sha256_file(ckpt)
        fields = ("tabpfn_version", "torch_version", "scikit_learn_version", "patch_digest",
                  "resolved_dtype", "autocast", "threads", "fit_s", "predict_s")  # fmt: skip
        assert set(fields) <= set(row)
        assert row["resolved_dtype"] == "float32" and row["autocast"] is False
    summary = run_suite(tasks, tmp_path, progress=False)
    assert (summary.computed, summary.skipped, counter.fits) == (0, 4, 4)


def test_a_kill_mid_run_loses_only_the_case_in_flight(
    ckpt: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tasks = _tasks(ckpt)
    calls = {"n": 0}

    def killed_on_third(task: spec_module.Task) -> dict[str, Any]:
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt
        return run_task(task)

    with pytest.raises(KeyboardInterrupt):
        run_suite(tasks, tmp_path, progress=False, task_fn=killed_on_third)
    done = {p.name: p.read_bytes() for p in _files(tmp_path)}
    assert len(done) == 2 and all(json.loads(b)["status"] == "ok" for b in done.values())
    # A crash while writing leaves at most a temporary file, never a run file;
    # an unreadable run file is recomputed, not trusted.
    (runs_dir(tmp_path) / ".stray.json.123.tmp").write_text("{")
    counter = _Counter(monkeypatch)
    summary = run_suite(tasks, tmp_path, progress=False)
    assert (summary.computed, summary.skipped, counter.fits) == (2, 2, 2)
    for name, content in done.items():
        assert (runs_dir(tmp_path) / name).read_bytes() == content
    assert len(load_records(tmp_path)) == 4
    victim = runs_dir(tmp_path) / f"{tasks[0].spec.key}.json"
    victim.write_text(victim.read_text()[:50])
    summary = run_suite(tasks, tmp_path, progress=False)
    assert (summary.computed, counter.fits) == (1, 3)
    assert json.loads(victim.read_text())["status"] == "ok"


class _Broken:
    def __init__(self, how: str) -> None:
        self.how = how

    def fit(self, X: np.ndarray, y: np.ndarray) -> _Broken:
        if self.how == "raise":
            raise ValueError("boom in fit")
        return self

    def predict(self, X: np.ndarray) -> np.ndarray:
        out = np.zeros(len(X))
        out[0] = np.nan
        return out


def test_failures_and_nonfinite_are_recorded_not_dropped(
    ckpt: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = execution.build_estimator

    def factory(spec: spec_module.RunSpec, model_path: str, **kw: Any) -> Any:
        if spec.mode == "oattention":
            return _Broken("raise" if spec.seed == 0 else "nan")
        return real(spec, model_path, **kw)

    monkeypatch.setattr(execution, "build_estimator", factory)
    tasks = _tasks(ckpt)
    summary = run_suite(tasks, tmp_path, progress=False)
    assert (summary.computed, summary.failed, summary.nonfinite) == (4, 1, 1)
    runs = {(r.seed, r.mode): r for r in load_records(tmp_path)}
    failed, nonfinite = runs[(0, "oattention")], runs[(1, "oattention")]
    assert failed.status == "failed" and "ValueError: boom in fit" in failed.error
    assert failed.rmse is None and "Traceback" in failed.traceback
    assert nonfinite.status == "nonfinite" and nonfinite.nonfinite_predictions == 1
    assert nonfinite.rmse is None
    # Failures are stored, so a rerun skips them unless asked to retry.
    assert run_suite(tasks, tmp_path, progress=False).computed == 0
    monkeypatch.setattr(execution, "build_estimator", real)
    retry = run_suite(tasks, tmp_path, progress=False, retry_failed=True)
    assert (retry.computed, retry.failed) == (2, 0)
    # The report lists them as failures with no delta.
    build_report(tmp_path, "offline18", tau=1.0, partial=True)


def test_state_dict_hash_check_fires_when_the_checkpoint_changes(
    tmp_path: Path,
) -> None:
    path = tiny_v3_checkpoint(tmp_path / "ck", seed=0)
    tasks = _tasks(path, seeds=[0])
    before = state_dict_sha256(path)
    calls = {"n": 0}

    def swap_after_first(task: spec_module.Task) -> dict[str, Any]:
        calls["n"] += 1
        if calls["n"] == 2:  # someone rewrites the weights while case 2 runs
            tiny_v3_checkpoint(tmp_path / "ck", seed=1)
        return run_task(task)

    with pytest.raises(CheckpointChangedError, match="changed during the run"):
        run_suite(tasks, tmp_path / "store", progress=False, task_fn=swap_after_first)
    assert state_dict_sha256(path) != before
    assert [json.loads(p.read_text())["mode"] for p in _files(tmp_path / "store")] == ["none"]


# --------------------------------------------------------------------------- #
# Executors
# --------------------------------------------------------------------------- #


def test_two_local_processes_give_the_same_rows_as_serial(ckpt: Path, tmp_path: Path) -> None:
    tasks = _tasks(ckpt, seeds=[0])
    run_suite(tasks, tmp_path / "serial", executor=SerialExecutor(), progress=False)
    run_suite(tasks, tmp_path / "loky", executor=JoblibExecutor(n_jobs=2), progress=False)
    serial = {r.key: r for r in load_records(tmp_path / "serial")}
    loky = {r.key: r for r in load_records(tmp_path / "loky")}
    assert serial.keys() == loky.keys() and len(serial) == 2
    for key, run in serial.items():
        assert run.status == loky[key].status == "ok"
        assert run.rmse == loky[key].rmse
        assert run.patch_digest == loky[key].patch_digest
    assert {r.pid for r in loky.values()}.isdisjoint({os.getpid()})


def test_a_process_without_the_code_and_packages_of_the_key_stores_the_case_as_failed(
    ckpt: Path,
) -> None:
    # What a cluster worker with another install would do: its numbers must not
    # be stored under a key that names other code.
    task = _tasks(ckpt, modes=("none",), seeds=[0])[0]
    assert run_task(task).status == "ok"
    other_code = dataclasses.replace(task.spec, code_sha256="0" * 64)
    run = run_task(dataclasses.replace(task, spec=other_code))
    assert run.status == "failed" and run.rmse is None
    assert "runs other retrofit code" in run.error and "(000000000000)" in run.error
    other_versions = dataclasses.replace(
        task.spec, versions={**task.spec.versions, "tabpfn": "0.0"}
    )
    run = run_task(dataclasses.replace(task, spec=other_versions))
    assert run.status == "failed"
    assert f"tabpfn {task.spec.versions['tabpfn']} (key: 0.0)" in run.error


def test_the_cluster_executor_fails_clearly_without_its_package(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "distributed", None)
    with pytest.raises(MissingExtraError) as info:
        make_executor("dask", n_jobs=2)
    assert str(info.value) == (
        "executor 'dask' needs the cluster executor's dependencies (not installed: "
        'distributed): pip install "tabpfn-retrofit[cluster]"'
    )
    with pytest.raises(ValueError, match=r"valid executors: serial, joblib, dask$"):
        make_executor("ray")


# --------------------------------------------------------------------------- #
# Carriers and report
# --------------------------------------------------------------------------- #


def test_carrier_norms_are_recorded_for_every_row_and_block(ckpt: Path) -> None:
    from eval.paper.carriers import measure_carriers
    from tests.helpers.tiny_models import TINY_V3_CONFIG

    stats = measure_carriers(
        suite="offline18",
        model_path=ckpt,
        n_estimators=1,
        datasets=["qsar_fish"],
        seeds=[0],
        progress=False,
        **ROWS,
    )
    n_blocks = TINY_V3_CONFIG["nlayers"]
    assert stats["n_values"] == n_blocks * (ROWS["max_train_rows"] + ROWS["max_test_rows"])
    q = stats["all"]
    assert 0 < q["q0"] <= q["q0.5"] <= q["q1"]
    assert set(stats["per_block"]) == {str(i) for i in range(n_blocks)}


def test_report_is_built_from_stored_rows_only(ckpt: Path, tmp_path: Path) -> None:
    tasks = _tasks(ckpt, modes=("none", "oattention", "full-o"), taus=(0.01, 1.0))
    run_suite(tasks, tmp_path, progress=False)
    written = build_report(tmp_path, "offline18", tau=1.0, partial=True)
    with written["cases.csv"].open() as fh:
        records = list(csv.DictReader(fh))
    assert len(records) == len(tasks) == 10
    for col in ("dataset", "seed", "mode", "tau", "rmse", "delta_pct", "tabpfn_version",
                "torch_version", "checkpoint_sha256", "device", "dtype"):  # fmt: skip
        assert col in records[0]
    assert list(records[0]) == list(CASE_COLUMNS)
    runs = {(r.seed, r.mode, r.tau): r for r in load_records(tmp_path)}
    for rec in records:
        base = runs[(int(rec["seed"]), "none", None)].rmse
        tau = float(rec["tau"]) if rec["tau"] else None
        rmse = runs[(int(rec["seed"]), rec["mode"], tau)].rmse
        assert float(rec["delta_pct"]) == pytest.approx(100 * (rmse - base) / base, rel=1e-9)
    summary = written["summary.md"].read_text()
    assert "+0.088 %" in summary and "+0.177 %" in summary and "## Tau sweep" in summary
    for name in ("deltas.png", "tau_sweep.png"):
        assert written[name].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # Nothing but stored rows: a report from an empty store refuses.
    from eval.errors import ReportError

    with pytest.raises(ReportError, match="no stored runs"):
        build_report(tmp_path / "empty", "offline18")


# --------------------------------------------------------------------------- #
# Command line
# --------------------------------------------------------------------------- #


def test_cli_sweep_then_report(
    ckpt: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from eval.cli import main
    from eval.paper.protocol import SWEEP_TAUS

    store = tmp_path / "offline18"
    argv = ["eval", "--model", str(ckpt), "--datasets", "qsar_fish", "--seeds", "0",
            "--max-train-rows", "40", "--max-test-rows", "12", "--n-estimators", "1",
            "--modes", "none", "oattention", "--sweep", "--store", str(store),
            "--no-progress"]  # fmt: skip
    assert main(argv) == 0
    assert len(load_records(store)) == 1 + len(SWEEP_TAUS)
    assert len(list((store / "carriers").glob("*.json"))) == 1
    assert main(argv) == 0  # resumes: nothing left to compute
    assert "0 computed" in capsys.readouterr().out
    sessions = sorted((store / "sessions").glob("*.json"))
    assert [json.loads(p.read_text())["computed"] for p in sessions] == [1 + len(SWEEP_TAUS), 0]
    assert main(["report", "--store", str(store), "--partial"]) == 0
    summary = (store / "summary.md").read_text()
    assert "## Tau sweep" in summary and "**Default tau = 1.**" in summary
    assert "## Carrier scale" in summary and "p(median)" in summary
    with (store / "tau_sweep.csv").open() as fh:
        sweep = list(csv.DictReader(fh))
    assert sorted(float(r["tau"]) for r in sweep) == sorted(SWEEP_TAUS)


def test_cli_user_errors_are_one_line_with_exit_2(
    ckpt: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from eval.cli import main

    base = ["eval", "--model", str(ckpt), "--store", str(tmp_path), "--no-progress"]
    assert main([*base, "--datasets", "nope"]) == 2
    err = capsys.readouterr().err.strip()
    assert (
        err.startswith("tabpfn-retrofit eval: error: ValueError: dataset 'nope'")
        and "\n" not in err
    )
    assert main([*base, "--tau", "-1"]) == 2  # refused before any fit is stored
    assert "tau" in capsys.readouterr().err and not runs_dir(tmp_path).exists()
    monkeypatch.setitem(sys.modules, "distributed", None)
    assert main([*base, "--executor", "dask"]) == 2
    err = capsys.readouterr().err
    assert "executor 'dask' needs" in err and 'pip install "tabpfn-retrofit[cluster]"' in err
    assert main(["report", "--store", str(tmp_path / "none")]) == 2
    assert "no stored runs" in capsys.readouterr().err


def test_report_keeps_one_context_and_says_what_it_left_out() -> None:
    from eval.paper.selection import select_context
    from tests.helpers.run_records import run_record

    def run(ckpt: str, finished: str) -> Any:
        return run_record(key=ckpt + finished, checkpoint_sha256=ckpt, finished_at=finished)

    runs = [run("aa", "2026-01-01"), run("bb", "2026-01-02"), run("aa", "2026-01-03")]
    kept, notes = select_context(runs, "offline18", tau=1.0)
    assert [r.finished_at for r in kept] == ["2026-01-01", "2026-01-03"]
    assert notes and "left out 1 stored runs of another context" in notes[0]
    assert "checkpoint_sha256 bb (reported: aa)" in notes[0]
    kept, _ = select_context(runs, "offline18", checkpoint="b", tau=1.0)
    assert [r.checkpoint_sha256 for r in kept] == ["bb"]


def test_code_digest_follows_every_module_of_patches_and_retrofit(tmp_path, monkeypatch) -> None:
    import shutil

    import patches
    import retrofit

    for package in (patches, retrofit):
        copy = tmp_path / package.__name__
        shutil.copytree(Path(package.__file__).parent, copy)
        monkeypatch.setattr(package, "__file__", str(copy / "__init__.py"))
    root = tmp_path / "retrofit"
    before = spec_module.code_sha256()
    for name in ("hosts/v3/icl_block.py", "models/embedded/__init__.py", "settings.py"):
        with (root / name).open("a") as fh:
            fh.write("\n# edited\n")
        changed = spec_module.code_sha256()
        assert changed != before
        before = changed
    with (tmp_path / "patches" / "oattention.py").open("a") as fh:
        fh.write("\n# edited\n")
    assert spec_module.code_sha256() != before


def _fake_run(task, **fields):
    """The record of ``task`` as if it ran (status ok, no numbers), without fitting."""
    fields = {"status": "ok", "error": None, "pid": os.getpid(), **fields}
    return dataclasses.replace(execution.lost_record(task, ""), **fields)


def _claim_all(store: Path, keys: list[str]) -> None:
    """A holding child's body (``tests.helpers.forks.holding``): it claims every key."""
    assert all(claim_run(store, key) for key in keys)


def test_a_second_eval_skips_the_runs_another_process_holds_and_takes_over_a_dead_ones(
    tiny_v3_path, tmp_path
):
    """Nothing is computed twice; a killed holder's claims are taken over."""
    tasks = make_tasks(
        suite="offline18", model_path=tiny_v3_path, modes=("none", "oattention"),
        datasets=["qsar_fish"], seeds=[0, 1], n_estimators=1, max_train_rows=40,
        max_test_rows=12,
    )  # fmt: skip
    keys = [t.spec.key for t in tasks]
    store = tmp_path / "store"
    computed: list[str] = []

    def task_fn(task):
        computed.append(task.spec.key)
        return _fake_run(task)

    with forks.holding(lambda: _claim_all(store, keys[:3])):
        summary = run_suite(tasks, store, task_fn=task_fn, progress=False)
        assert summary.claimed_elsewhere == 3 and summary.computed == len(keys) - 3
        assert computed == keys[3:]
        assert all((runs_dir(store) / f"{k}.claim").exists() for k in keys[:3])
    # The holder is gone (kill -9), its claim files remain: they are taken over.
    summary = run_suite(tasks, store, task_fn=task_fn, progress=False)
    assert summary.claimed_elsewhere == 0 and summary.skipped == len(keys) - 3
    assert sorted(computed) == sorted(keys) and len(computed) == len(set(computed))
    assert sorted(p.name for p in runs_dir(store).iterdir()) == sorted(f"{k}.json" for k in keys)


def _run_killed_mid_run(store: Path, tasks: list) -> None:
    """A forked child's body: an eval that stores two runs, then is kill -9ed in the third."""
    done = []

    def task_fn(task):
        if len(done) == 2:  # two runs stored, the third in flight: kill -9
            os.kill(os.getpid(), signal.SIGKILL)
        done.append(task.spec.key)
        return _fake_run(task)

    run_suite(tasks, store, task_fn=task_fn, progress=False)


def test_a_killed_eval_resumed_to_completion_leaves_no_claim_and_steals_no_live_one(
    tiny_v3_path, tmp_path
):
    """A finished resume removes the killed eval's claims and keeps a live one's."""
    tasks = make_tasks(
        suite="offline18", model_path=tiny_v3_path, modes=("none", "oattention"),
        datasets=["qsar_fish"], seeds=[0, 1], n_estimators=1, max_train_rows=40,
        max_test_rows=12,
    )  # fmt: skip
    keys = [t.spec.key for t in tasks]
    store = tmp_path / "store"
    status = forks.wait(forks.fork(lambda: _run_killed_mid_run(store, tasks)))
    assert forks.killed_by_sigkill(status), status
    claims = sorted(p.stem for p in runs_dir(store).glob("*.claim"))
    assert len(list(runs_dir(store).glob("*.json"))) == 2 and keys[2] in claims
    # Another live eval holds a claim on a run of another plan (say, another tau).
    with forks.holding(lambda: _claim_all(store, ["f" * 64])):
        summary = run_suite(tasks, store, task_fn=_fake_run, progress=False)
        assert (summary.skipped, summary.computed) == (2, 2)
        assert sorted(p.name for p in runs_dir(store).iterdir()) == sorted(
            [*(f"{k}.json" for k in keys), f"{'f' * 64}.claim"]
        )
        assert not claim_run(store, "f" * 64)  # still the holder's
    run_suite(tasks, store, task_fn=_fake_run, progress=False)  # the holder died: its claim goes
    assert sorted(p.name for p in runs_dir(store).iterdir()) == sorted(f"{k}.json" for k in keys)


def test_a_run_stored_by_another_process_while_planning_is_not_recomputed(
    tiny_v3_path, tmp_path, monkeypatch
):
    """The other process finished and released between our look and claim."""
    tasks = make_tasks(
        suite="offline18", model_path=tiny_v3_path, modes=("none",), datasets=["qsar_fish"],
        seeds=[0], n_estimators=1, max_train_rows=40, max_test_rows=12,
    )  # fmt: skip
    store = tmp_path / "store"
    real_claim = execution.claim_run

    def claim_after_the_other_finished(store_, key):
        write_record(store_, _fake_run(tasks[0], pid=-1))  # the other process's run
        return real_claim(store_, key)

    monkeypatch.setattr(execution, "claim_run", claim_after_the_other_finished)
    computed = []
    summary = run_suite(tasks, store, task_fn=computed.append, progress=False)
    assert computed == [] and summary.computed == 0 and summary.skipped == 1
    assert read_record(run_path(store, tasks[0].spec.key)).pid == -1
    assert not (runs_dir(store) / f"{tasks[0].spec.key}.claim").exists()
    assert json.loads(run_path(store, tasks[0].spec.key).read_text())["status"] == "ok"
