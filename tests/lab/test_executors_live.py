"""The dask executor on live local clusters: same numbers as serial, and its faults.

Every test here starts real worker processes (a dask ``LocalCluster`` of two
single-threaded workers) and runs the embedded
host on a small slice of the offline suite (one estimator, splits cut to a
few rows), with one torch thread per case so that the serial run it is
compared with does the same arithmetic.
"""

from __future__ import annotations

import functools
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from eval.errors import ClusterUnreachableError
from eval.paper.command import suite_checkpoint
from eval.paper.execution import run_suite
from eval.paper.executors import DaskExecutor, Executor, SerialExecutor
from eval.paper.record import RunRecord
from eval.paper.spec import Task, make_tasks
from eval.paper.store import load_records, runs_dir
from retrofit.errors import RetrofitError
from tests.helpers import executor_tasks

distributed = pytest.importorskip("distributed")

ROWS = {"max_train_rows": 48, "max_test_rows": 12}


@pytest.fixture(scope="module")
def embedded() -> Path:
    return suite_checkpoint("embedded")


def _tasks(model: Path, **kw: Any) -> list[Task]:
    args: dict[str, Any] = {
        "suite": "offline18",
        "model_path": model,
        "modes": ("none", "oattention", "full-o"),
        "datasets": ["qsar_fish"],
        "seeds": [0],
        "n_estimators": 1,
        "threads": 1,
        **ROWS,
    }
    args.update(kw)
    return make_tasks(**args)


def _by_key(store: Path) -> dict[str, RunRecord]:
    return {run.key: run for run in load_records(store)}


@pytest.fixture(scope="module")
def dask_cluster() -> Any:
    """Two single-threaded worker processes; a case may kill its worker once, not twice."""
    with distributed.LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=True,
        dashboard_address=None,
        scheduler_kwargs={"allowed_failures": 1},
    ) as cluster:
        yield cluster


def _cluster_executor(request: pytest.FixtureRequest) -> Executor:
    """An executor on the module's shared dask cluster."""
    cluster = request.getfixturevalue("dask_cluster")
    return DaskExecutor(address=cluster.scheduler_address)


def _same_numbers(serial: dict[str, RunRecord], other: dict[str, RunRecord]) -> None:
    assert other.keys() == serial.keys()
    for key, run in serial.items():
        for field in ("status", "rmse", "mae", "error", "patch_digest", "n_train", "n_test"):
            assert getattr(other[key], field) == getattr(run, field), (key, field)


# --------------------------------------------------------------------------- #
# Same numbers as serial, and a second run skips them all
# --------------------------------------------------------------------------- #


@pytest.fixture(scope="module")
def slice_tasks(embedded: Path) -> list[Task]:
    """2 datasets x 2 seeds x 3 modes, plus a case whose fit raises (a device torch lacks)."""
    tasks = _tasks(embedded, datasets=["qsar_fish", "concrete"], seeds=[0, 1])
    return tasks + _tasks(embedded, modes=("oattention",), device="no-such-device")


@pytest.fixture(scope="module")
def serial_runs(slice_tasks: list[Task], tmp_path_factory: pytest.TempPathFactory) -> Any:
    store = tmp_path_factory.mktemp("serial")
    run_suite(slice_tasks, store, executor=SerialExecutor(), progress=False)
    return _by_key(store)


def test_a_local_cluster_stores_the_serial_numbers_and_a_rerun_skips_them(
    slice_tasks: list[Task],
    serial_runs: dict[str, RunRecord],
    tmp_path: Path,
) -> None:
    # No address: the executor starts its own two single-threaded workers
    # (a LocalCluster) for the run and closes them after.
    executor = DaskExecutor(n_jobs=2)
    assert len(slice_tasks) == 13
    summary = run_suite(slice_tasks, tmp_path, executor=executor, progress=False)
    assert (summary.computed, summary.failed, summary.skipped) == (13, 1, 0)
    cluster = _by_key(tmp_path)
    _same_numbers(serial_runs, cluster)
    assert sum(run.ok for run in cluster.values()) == 12
    failed = [run for run in cluster.values() if run.status == "failed"]
    assert failed[0].device == "no-such-device" and "no-such-device" in failed[0].error
    assert {run.threads for run in cluster.values()} == {1}
    pids = {run.pid for run in cluster.values()}
    assert len(pids) >= 2 and os.getpid() not in pids
    with pytest.raises(ValueError, match="No clients found"):
        distributed.default_client()  # the executor's client is closed

    again = run_suite(slice_tasks, tmp_path, executor=executor, progress=False)
    assert (again.computed, again.skipped) == (0, 13)
    assert _by_key(tmp_path) == cluster


# --------------------------------------------------------------------------- #
# A task function that raises; an address nobody answers
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize("backend", ["serial", "dask"])
def test_a_task_function_that_raises_ends_the_run_as_in_serial(
    backend: str, request: pytest.FixtureRequest, embedded: Path, tmp_path: Path
) -> None:
    executor = SerialExecutor() if backend == "serial" else _cluster_executor(request)
    tasks = _tasks(embedded, modes=("none", "oattention"))
    task_fn = functools.partial(executor_tasks.raise_on_mode, "oattention")
    with pytest.raises(RuntimeError, match="task function raised on qsar_fish/oattention"):
        run_suite(tasks, tmp_path, executor=executor, progress=False, task_fn=task_fn)
    assert {run.mode for run in load_records(tmp_path)} <= {"none"}


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_an_unreachable_scheduler_is_one_line_naming_it_before_any_case_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from eval.cli import main

    address = f"tcp://127.0.0.1:{_closed_port()}"
    argv = ["eval", "--model", "embedded", "--datasets", "qsar_fish", "--seeds", "0",
            "--n-estimators", "1", "--executor", "dask", "--address", address,
            "--connect-timeout", "1", "--store", str(tmp_path), "--no-progress"]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    prefix = "tabpfn-retrofit eval: error: ClusterUnreachableError: cannot reach the"
    assert err.startswith(f"{prefix} dask scheduler")
    assert address in err and "\n" not in err
    assert not runs_dir(tmp_path).exists()
    with pytest.raises(ClusterUnreachableError) as caught:
        list(DaskExecutor(address=address, connect_timeout_s=1).map_unordered(abs, [-1]))
    assert isinstance(caught.value, RetrofitError) and isinstance(caught.value, ConnectionError)


# --------------------------------------------------------------------------- #
# A worker killed while a case runs; a case that kills its worker every time
# (last: the workers they kill restart in the background)
# --------------------------------------------------------------------------- #


class _Killer(threading.Thread):
    """SIGKILLs the first worker process that starts a case, while the case runs."""

    def __init__(self, marker_dir: Path) -> None:
        super().__init__(daemon=True)
        self.marker_dir = marker_dir
        self.killed: tuple[str, int] | None = None
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            for marker in self.marker_dir.iterdir():
                key, pid, _ = marker.name.split(".")
                if int(pid) == os.getpid():
                    return  # never this process
                os.kill(int(pid), signal.SIGKILL)
                self.killed = (key, int(pid))
                return
            time.sleep(0.005)


def test_a_worker_killed_mid_case_is_retried_and_every_run_stored_once(
    request: pytest.FixtureRequest, embedded: Path, tmp_path: Path
) -> None:
    executor = _cluster_executor(request)
    tasks = _tasks(embedded, seeds=[0, 1])
    markers = tmp_path / "markers"
    markers.mkdir()
    killer = _Killer(markers)
    killer.start()
    try:
        task_fn = functools.partial(executor_tasks.marked_run_task, str(markers))
        summary = run_suite(tasks, tmp_path / "store", executor=executor, progress=False,
                            task_fn=task_fn)  # fmt: skip
    finally:
        killer.done.set()
        killer.join()
    assert killer.killed is not None
    key, pid = killer.killed
    # The killed case started again (a second marker) and came back once.
    assert len([m for m in markers.iterdir() if m.name.startswith(key)]) >= 2
    assert summary.computed == len(tasks) == 6 and summary.failed == 0
    assert sorted(summary.keys) == sorted(t.spec.key for t in tasks)
    files = sorted(p.stem for p in runs_dir(tmp_path / "store").glob("*.json"))
    assert files == sorted(t.spec.key for t in tasks)
    runs = _by_key(tmp_path / "store")
    assert runs[key].ok and runs[key].pid != pid


def test_a_case_whose_worker_dies_on_every_try_is_stored_as_failed(
    request: pytest.FixtureRequest, embedded: Path, tmp_path: Path
) -> None:
    # dask_cluster allows one death per case (the second is final).
    executor = _cluster_executor(request)
    tasks = _tasks(embedded, modes=("none", "oattention"))
    task_fn = functools.partial(executor_tasks.exit_on_mode, "oattention")
    summary = run_suite(tasks, tmp_path, executor=executor, progress=False, task_fn=task_fn)
    assert (summary.computed, summary.failed) == (2, 1)
    runs = {run.mode: run for run in load_records(tmp_path)}
    assert runs["none"].ok
    lost = runs["oattention"]
    assert lost.status == "failed" and lost.rmse is None and lost.pid is None
    assert lost.error.startswith("KilledWorker") and "\n" not in lost.error
    assert lost.key == tasks[1].spec.key and lost.threads == 1


def test_cases_left_on_a_dask_cluster_with_no_worker_are_stored_as_failed_and_the_run_ends(
    embedded: Path, tmp_path: Path
) -> None:
    """A worker without a nanny dies and nothing replaces it.

    The scheduler then holds every case for a worker that never comes; the run
    must store them as failed and end, within a bound.
    """
    tasks = _tasks(embedded, modes=("oattention",), seeds=[0, 1])
    task_fn = functools.partial(executor_tasks.exit_on_mode, "oattention")
    repo = Path(__file__).resolve().parents[3]
    env = {**os.environ, "PYTHONPATH": str(repo), "OMP_NUM_THREADS": "1"}
    with (
        distributed.LocalCluster(n_workers=0, processes=True, dashboard_address=None) as cluster,
        distributed.Client(cluster, set_as_default=False) as client,
    ):
        worker = subprocess.Popen(
            [sys.executable, "-m", "distributed.cli.dask_worker", cluster.scheduler_address,
             "--no-nanny", "--nthreads", "1", "--no-dashboard"],
            cwd=repo, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            client.wait_for_workers(1, timeout=60)
            executor = DaskExecutor(address=cluster.scheduler_address, no_worker_timeout_s=2)
            outcome: dict[str, Any] = {}

            def run() -> None:
                try:
                    outcome["summary"] = run_suite(
                        tasks, tmp_path, executor=executor, progress=False, task_fn=task_fn
                    )
                except BaseException as exc:  # shown by the assertion below
                    outcome["error"] = exc

            thread = threading.Thread(target=run, daemon=True)
            started = time.monotonic()
            thread.start()
            thread.join(timeout=120)
            assert not thread.is_alive(), "the run still waits for a worker after 120 s"
            assert "error" not in outcome, outcome.get("error")
            assert time.monotonic() - started < 120
        finally:
            worker.kill()
            worker.wait(timeout=30)
    summary = outcome["summary"]
    assert (summary.computed, summary.failed) == (2, 2)
    runs = load_records(tmp_path)
    assert sorted(run.key for run in runs) == sorted(t.spec.key for t in tasks)
    for run in runs:
        assert run.status == "failed" and run.rmse is None
        assert run.error.startswith(("NoWorkerLeft", "KilledWorker")), run.error
        assert "\n" not in run.error
    assert any(run.error.startswith("NoWorkerLeft") for run in runs)
