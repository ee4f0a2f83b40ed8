"""The cluster executors on live local clusters: same numbers as serial, and their faults.

Every test here starts real worker processes (a dask ``LocalCluster`` or a
local Ray instance, two single-threaded workers each) and runs the embedded
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
from eval.paper.executors import DaskExecutor, Executor, RayExecutor, SerialExecutor
from eval.paper.spec import Task, make_tasks
from eval.paper.store import load_rows, runs_dir
from retrofit.errors import RetrofitError
from tests.helpers import executor_tasks

distributed = pytest.importorskip("distributed")
ray = pytest.importorskip("ray")

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


def _by_key(store: Path) -> dict[str, dict[str, Any]]:
    return {row["key"]: row for row in load_rows(store)}


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


@pytest.fixture(scope="module")
def ray_session() -> Any:
    """A local Ray instance the executor finds running (and leaves running)."""
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def _cluster_executor(backend: str, request: pytest.FixtureRequest, **kw: Any) -> Executor:
    """An executor on the module's shared cluster of ``backend``."""
    if backend == "dask":
        cluster = request.getfixturevalue("dask_cluster")
        return DaskExecutor(address=cluster.scheduler_address)
    request.getfixturevalue("ray_session")
    return RayExecutor(n_jobs=2, **kw)


def _same_numbers(serial: dict[str, dict[str, Any]], other: dict[str, dict[str, Any]]) -> None:
    assert other.keys() == serial.keys()
    for key, row in serial.items():
        for column in ("status", "rmse", "mae", "error", "patch_digest", "n_train", "n_test"):
            assert other[key][column] == row[column], (key, column)


# --------------------------------------------------------------------------- #
# Same numbers as serial, and a second run skips them all
# --------------------------------------------------------------------------- #


@pytest.fixture(scope="module")
def slice_tasks(embedded: Path) -> list[Task]:
    """2 datasets x 2 seeds x 3 modes, plus a case whose fit raises (a device torch lacks)."""
    tasks = _tasks(embedded, datasets=["qsar_fish", "concrete"], seeds=[0, 1])
    return tasks + _tasks(embedded, modes=("oattention",), device="no-such-device")


@pytest.fixture(scope="module")
def serial_rows(slice_tasks: list[Task], tmp_path_factory: pytest.TempPathFactory) -> Any:
    store = tmp_path_factory.mktemp("serial")
    run_suite(slice_tasks, store, executor=SerialExecutor(), progress=False)
    return _by_key(store)


@pytest.mark.parametrize("make", [DaskExecutor, RayExecutor], ids=["dask", "ray"])
def test_a_local_cluster_stores_the_serial_numbers_and_a_rerun_skips_them(
    make: type[Executor],
    slice_tasks: list[Task],
    serial_rows: dict[str, dict[str, Any]],
    tmp_path: Path,
) -> None:
    # No address: the executor starts its own two single-threaded workers
    # (a LocalCluster, a local Ray instance) for the run and closes them after.
    assert not ray.is_initialized()  # runs before the module's shared Ray session
    executor = make(n_jobs=2)
    assert len(slice_tasks) == 13
    summary = run_suite(slice_tasks, tmp_path, executor=executor, progress=False)
    assert (summary.computed, summary.failed, summary.skipped) == (13, 1, 0)
    cluster = _by_key(tmp_path)
    _same_numbers(serial_rows, cluster)
    assert sum(row["status"] == "ok" for row in cluster.values()) == 12
    failed = [row for row in cluster.values() if row["status"] == "failed"]
    assert failed[0]["device"] == "no-such-device" and "no-such-device" in failed[0]["error"]
    assert {row["threads"] for row in cluster.values()} == {1}
    pids = {row["pid"] for row in cluster.values()}
    assert len(pids) >= 2 and os.getpid() not in pids
    assert not ray.is_initialized()
    with pytest.raises(ValueError, match="No clients found"):
        distributed.default_client()  # the executor's client is closed

    again = run_suite(slice_tasks, tmp_path, executor=executor, progress=False)
    assert (again.computed, again.skipped) == (0, 13)
    assert _by_key(tmp_path) == cluster


# --------------------------------------------------------------------------- #
# A task function that raises; an address nobody answers
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize("backend", ["serial", "dask", "ray"])
def test_a_task_function_that_raises_ends_the_run_as_in_serial(
    backend: str, request: pytest.FixtureRequest, embedded: Path, tmp_path: Path
) -> None:
    executor = SerialExecutor() if backend == "serial" else _cluster_executor(backend, request)
    tasks = _tasks(embedded, modes=("none", "oattention"))
    task_fn = functools.partial(executor_tasks.raise_on_mode, "oattention")
    with pytest.raises(RuntimeError, match="task function raised on qsar_fish/oattention"):
        run_suite(tasks, tmp_path, executor=executor, progress=False, task_fn=task_fn)
    assert {row["mode"] for row in load_rows(tmp_path)} <= {"none"}


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.parametrize(
    "executor, address", [("dask", "tcp://127.0.0.1:{port}"), ("ray", "127.0.0.1:{port}")]
)
def test_an_unreachable_scheduler_is_one_line_naming_it_before_any_case_runs(
    executor: str, address: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from eval.cli import main

    address = address.format(port=_closed_port())
    argv = ["eval", "--model", "embedded", "--datasets", "qsar_fish", "--seeds", "0",
            "--n-estimators", "1", "--executor", executor, "--address", address,
            "--connect-timeout", "1", "--store", str(tmp_path), "--no-progress"]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    prefix = "tabpfn-retrofit eval: error: ClusterUnreachableError: cannot reach the"
    assert err.startswith(f"{prefix} {executor}")
    assert address in err and "\n" not in err
    assert not runs_dir(tmp_path).exists()
    make = DaskExecutor if executor == "dask" else RayExecutor
    with pytest.raises(ClusterUnreachableError) as caught:
        list(make(address=address, connect_timeout_s=1).map_unordered(abs, [-1]))
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


@pytest.mark.parametrize("backend", ["dask", "ray"])
def test_a_worker_killed_mid_case_is_retried_and_every_run_stored_once(
    backend: str, request: pytest.FixtureRequest, embedded: Path, tmp_path: Path
) -> None:
    executor = _cluster_executor(backend, request)
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
    rows = _by_key(tmp_path / "store")
    assert rows[key]["status"] == "ok" and rows[key]["pid"] != pid


@pytest.mark.parametrize("backend", ["dask", "ray"])
def test_a_case_whose_worker_dies_on_every_try_is_stored_as_failed(
    backend: str, request: pytest.FixtureRequest, embedded: Path, tmp_path: Path
) -> None:
    # dask_cluster allows one death per case (the second is final); the Ray
    # executor here none (each retry would start and import a fresh worker).
    executor = _cluster_executor(backend, request, max_retries=0)
    tasks = _tasks(embedded, modes=("none", "oattention"))
    task_fn = functools.partial(executor_tasks.exit_on_mode, "oattention")
    summary = run_suite(tasks, tmp_path, executor=executor, progress=False, task_fn=task_fn)
    assert (summary.computed, summary.failed) == (2, 1)
    rows = {row["mode"]: row for row in load_rows(tmp_path)}
    assert rows["none"]["status"] == "ok"
    lost = rows["oattention"]
    assert lost["status"] == "failed" and lost["rmse"] is None and lost["pid"] is None
    expected = "KilledWorker" if backend == "dask" else "WorkerCrashedError"
    assert lost["error"].startswith(expected) and "\n" not in lost["error"]
    assert lost["key"] == tasks[1].spec.key and lost["threads"] == 1


def test_cases_left_on_a_dask_cluster_with_no_worker_are_stored_as_failed_and_the_run_ends(
    embedded: Path, tmp_path: Path
) -> None:
    """A worker without a nanny dies and nothing replaces it.

    The scheduler then holds every case for a worker that never comes; the run
    must store them as failed and end, within a bound, as Ray's does.
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
    rows = load_rows(tmp_path)
    assert sorted(row["key"] for row in rows) == sorted(t.spec.key for t in tasks)
    for row in rows:
        assert row["status"] == "failed" and row["rmse"] is None
        assert row["error"].startswith(("NoWorkerLeft", "KilledWorker")), row["error"]
        assert "\n" not in row["error"]
    assert any(row["error"].startswith("NoWorkerLeft") for row in rows)
