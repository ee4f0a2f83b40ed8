"""Executors: where evaluation cases run (this process, local processes, a Dask cluster).

Every executor has one job: apply a picklable function to a list of picklable
tasks and yield ``(index, result)`` pairs as each task finishes, so that the
caller (the process that owns the store) can store each result the moment it
arrives; a kill then loses only the cases in flight. Cases are independent and
seeded, so where they run does not change their numbers, given the same torch
thread count: the task carries it and the task function applies it
(``torch.set_num_threads``) in whichever process runs the case, and
:meth:`Executor.default_threads` says what a run uses when none is given.

* ``serial``: in this process, in order (the default).
* ``joblib``: local worker processes (joblib's ``loky`` backend).
* ``dask``: a ``dask.distributed`` cluster, the engine for a cluster: a
  ``Client`` to the scheduler at ``address``, or a ``LocalCluster`` of
  ``n_jobs`` single-threaded worker processes when none is given. Tasks are
  submitted at once and collected with ``as_completed``.

One cluster engine: an executor for Ray ran the same independent cases with
its own retry and crash semantics, a second fault path to keep tested on a
live cluster (and a large dependency) for no case Dask cannot run; it was
dropped.

Faults on a cluster: a task that raises propagates to the caller as in the
serial executor (the runner's task function records a failing fit as a failed
run itself and raises only for what must abort the run). A worker process
that dies mid-case is replaced and its case retried by the scheduler (up to
``distributed.scheduler.allowed-failures`` times); a case whose worker died on
every try is yielded as a :class:`LostTask`, which the runner stores as a
failed run, so no case is lost and none is yielded twice.
Dask retries a case only on a live worker: when the last worker is gone and
none replaces it within ``no_worker_timeout_s`` (workers without a nanny, or
nannies that stopped restarting), every case still waiting is a ``LostTask``
too, and the run ends instead of waiting forever.
An address that does not answer within the connect timeout raises
:class:`~retrofit.errors.ClusterUnreachableError` before any task is submitted.

Dask is optional (the ``cluster`` extra): it is imported only when chosen,
and a missing package raises
:class:`~eval.errors.MissingExtraError` with the install line
(:func:`eval.extras.require_extra`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from eval.errors import ClusterUnreachableError, MissingExtraError
from eval.extras import require_extra
from retrofit.command_line import one_line

__all__ = [
    "DEFAULT_CONNECT_TIMEOUT_S",
    "DEFAULT_NO_WORKER_TIMEOUT_S",
    "EXECUTORS",
    "ClusterUnreachableError",
    "DaskExecutor",
    "Executor",
    "JoblibExecutor",
    "LostTask",
    "MissingExtraError",
    "SerialExecutor",
    "make_executor",
]

EXECUTORS: tuple[str, ...] = ("serial", "joblib", "dask")
"""Names accepted by :func:`make_executor` (and ``--executor``)."""

DEFAULT_CONNECT_TIMEOUT_S = 5.0
"""How long a cluster executor waits for its scheduler before giving up."""

DEFAULT_NO_WORKER_TIMEOUT_S = 60.0
"""How long a dask cluster may have no worker before its waiting cases are lost.

Long enough for a nanny to restart a killed worker, or an adaptive cluster to
start one; a cluster whose workers are all gone for good would otherwise hold
its cases (and ``eval``) forever.
"""

_POLL_S = 0.2  # how often a waiting dask run looks for finished cases and live workers


@dataclass(frozen=True)
class LostTask:
    """The outcome of a task whose worker process died on every try (no result exists).

    Attributes:
        error: One line: the scheduler's reason (``KilledWorker: ...``).
    """

    error: str


def _one_line(exc: BaseException) -> str:
    text = one_line(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _indexed(fn: Callable[[Any], Any], index: int, task: Any) -> tuple[int, Any]:
    # Module-level so that process pools can pickle it.
    return index, fn(task)


_CASE_LOCK = threading.Lock()


def _indexed_alone(fn: Callable[[Any], Any], index: int, task: Any) -> tuple[int, Any]:
    # A dask worker process may run several tasks on threads (a dask worker
    # started with --nthreads > 1); torch's thread count is per process, so the
    # cases of one process take turns and each runs with the count it carries.
    with _CASE_LOCK:
        return index, fn(task)


class Executor:
    """Runs ``fn`` over tasks and yields ``(index, result)`` as they finish."""

    name = "executor"

    def map_unordered(
        self, fn: Callable[[Any], Any], tasks: Sequence[Any]
    ) -> Iterator[tuple[int, Any]]:
        """Apply ``fn`` to every task.

        Args:
            fn: A picklable (module-level) function of one task.
            tasks: Picklable tasks.

        Yields:
            ``(index into tasks, fn(task))`` in completion order, each index
            once; a cluster executor yields ``(index, LostTask)`` for a task
            whose worker died on every try. An exception raised by ``fn``
            propagates to the caller.
        """
        raise NotImplementedError

    def default_threads(self) -> int | None:
        """Torch threads per case when the caller sets none (``None``: leave the process's)."""
        return None

    def check_reachable(self) -> None:
        """Fails fast if the executor's cluster does not answer (before any run is claimed).

        Raises:
            ClusterUnreachableError: If a given scheduler or cluster address does not answer.
        """

    def describe(self) -> str:
        """One-line description for provenance."""
        return self.name


class SerialExecutor(Executor):
    """Runs every task in this process, in order."""

    name = "serial"

    def map_unordered(
        self, fn: Callable[[Any], Any], tasks: Sequence[Any]
    ) -> Iterator[tuple[int, Any]]:
        """See :meth:`Executor.map_unordered`."""
        for index, task in enumerate(tasks):
            yield index, fn(task)


class JoblibExecutor(Executor):
    """Runs tasks through ``joblib.Parallel`` on local ``loky`` processes.

    Args:
        n_jobs: Number of parallel workers.
    """

    name = "joblib"

    def __init__(self, n_jobs: int = 2) -> None:
        if n_jobs < 1:
            raise ValueError(f"n_jobs must be >= 1, got {n_jobs}")
        self.n_jobs = n_jobs

    def map_unordered(
        self, fn: Callable[[Any], Any], tasks: Sequence[Any]
    ) -> Iterator[tuple[int, Any]]:
        """See :meth:`Executor.map_unordered`."""
        import joblib

        if not tasks:
            return
        parallel = joblib.Parallel(
            n_jobs=self.n_jobs,
            backend="loky",
            return_as="generator_unordered",
            # One case per dispatch: cases are long, and a kill should lose
            # only what is running.
            batch_size=1,
            pre_dispatch="n_jobs",
        )
        yield from parallel(
            joblib.delayed(_indexed)(fn, index, task) for index, task in enumerate(tasks)
        )

    def default_threads(self) -> int | None:
        """The workers share this machine's cores: ``cpu_count // n_jobs`` each."""
        return max(1, (os.cpu_count() or 1) // self.n_jobs)

    def describe(self) -> str:
        """See :meth:`Executor.describe`."""
        return f"{self.name}(backend=loky, n_jobs={self.n_jobs})"


def _serial_threads() -> int:
    """The torch thread count a serial run in this process uses."""
    import torch

    return torch.get_num_threads()


def _check_reachable(address: str, timeout_s: float, what: str) -> None:
    """Open and close a TCP connection to ``address`` (``[scheme://]host:port``)."""
    parts = urlsplit(address if "://" in address else f"tcp://{address}")
    try:
        host, port = parts.hostname, parts.port
    except ValueError:
        host, port = None, None
    if not host or port is None:
        raise ClusterUnreachableError(f"{what} address {address!r} is not of the form host:port")
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            pass
    except OSError as exc:
        raise ClusterUnreachableError(
            f"cannot reach the {what} at {address} within {timeout_s:g} s ({_one_line(exc)})"
        ) from None


class DaskExecutor(Executor):
    """Runs tasks on a ``dask.distributed`` cluster, collected as they complete.

    Args:
        n_jobs: Worker processes of the local cluster started when ``address``
            is ``None`` (one thread each); unused with an address.
        address: Scheduler address (``tcp://host:8786``); ``None`` starts a
            ``LocalCluster`` for the run and closes it after.
        connect_timeout_s: Seconds to wait for the scheduler.
        no_worker_timeout_s: Seconds the cluster may have no worker at all
            while cases wait before those cases are given up as lost.
    """

    name = "dask"

    def __init__(
        self,
        n_jobs: int = 1,
        address: str | None = None,
        connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
        no_worker_timeout_s: float = DEFAULT_NO_WORKER_TIMEOUT_S,
    ) -> None:
        require_extra("cluster", ("distributed",), needed_by="executor 'dask'")
        if address is None and n_jobs < 1:
            raise ValueError(f"n_jobs must be >= 1 for a local dask cluster, got {n_jobs}")
        self.n_jobs = n_jobs
        self.address = address
        self.connect_timeout_s = connect_timeout_s
        self.no_worker_timeout_s = no_worker_timeout_s

    def check_reachable(self) -> None:
        """See :meth:`Executor.check_reachable`."""
        if self.address is not None:
            _check_reachable(self.address, self.connect_timeout_s, "dask scheduler")

    @contextlib.contextmanager
    def _client(self) -> Iterator[Any]:
        from distributed import Client, LocalCluster

        if self.address is None:
            with (
                LocalCluster(
                    n_workers=self.n_jobs,
                    threads_per_worker=1,
                    processes=True,
                    dashboard_address=None,
                    # Its workers' shutdown chatter is not the run's news; a
                    # worker death is recorded in the rows it touches.
                    silence_logs=logging.ERROR,
                ) as cluster,
                Client(cluster, set_as_default=False) as client,
            ):
                yield client
            return
        try:
            client = Client(self.address, timeout=self.connect_timeout_s, set_as_default=False)
        except (OSError, TimeoutError) as exc:
            raise ClusterUnreachableError(
                f"cannot reach the dask scheduler at {self.address} within "
                f"{self.connect_timeout_s:g} s ({_one_line(exc)})"
            ) from None
        with client:
            yield client

    def map_unordered(
        self, fn: Callable[[Any], Any], tasks: Sequence[Any]
    ) -> Iterator[tuple[int, Any]]:
        """See :meth:`Executor.map_unordered`.

        A task still pending after the cluster has had no worker for
        ``no_worker_timeout_s`` seconds is yielded as a :class:`LostTask`.
        """
        from distributed import KilledWorker, as_completed

        if not tasks:
            return
        with self._client() as client:
            futures = [
                client.submit(_indexed_alone, fn, index, task, pure=False)
                for index, task in enumerate(tasks)
            ]
            index_of = {future.key: index for index, future in enumerate(futures)}
            pending = set(futures)
            finished = as_completed(futures, loop=client.loop)
            no_worker_since: float | None = None
            while pending:
                done = finished.next_batch(block=False)
                for future in done:
                    pending.discard(future)
                    try:
                        yield future.result()
                    except KilledWorker as exc:
                        yield index_of[future.key], LostTask(_one_line(exc))
                    future.release()
                if done or not pending:
                    no_worker_since = None
                    continue
                # The scheduler retries a case only while some worker is alive: a
                # worker without a nanny (or a nanny that gave up restarting it)
                # that died leaves its cases waiting for a worker forever.
                if client.nthreads():
                    no_worker_since = None
                elif no_worker_since is None:
                    no_worker_since = time.monotonic()
                elif time.monotonic() - no_worker_since >= self.no_worker_timeout_s:
                    error = (
                        f"NoWorkerLeft: the dask cluster had no worker for "
                        f"{self.no_worker_timeout_s:g} s while this case waited (its worker "
                        "died and none replaced it)"
                    )
                    for future in sorted(pending, key=lambda f: index_of[f.key]):
                        future.cancel()
                        yield index_of[future.key], LostTask(error)
                    return
                time.sleep(_POLL_S)

    def default_threads(self) -> int | None:
        """The serial run's count, so a case gives the serial numbers on any worker."""
        return _serial_threads()

    def describe(self) -> str:
        """See :meth:`Executor.describe`."""
        if self.address is None:
            return f"dask(LocalCluster, n_workers={self.n_jobs}, threads_per_worker=1)"
        return f"dask(address={self.address})"


def make_executor(
    name: str,
    n_jobs: int = 1,
    address: str | None = None,
    connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
) -> Executor:
    """Build an executor by name.

    Args:
        name: One of :data:`EXECUTORS`.
        n_jobs: Parallel workers (ignored by ``serial``, and by ``dask``
            given an address: the cluster has its own).
        address: Scheduler address for ``dask``.
        connect_timeout_s: Seconds ``dask`` waits for ``address``.

    Returns:
        The executor.

    Raises:
        ValueError: If ``name`` is unknown.
        MissingExtraError: If its package is missing.
    """
    if name == "serial":
        return SerialExecutor()
    if name == "joblib":
        return JoblibExecutor(n_jobs=max(1, n_jobs))
    if name == "dask":
        return DaskExecutor(
            n_jobs=max(1, n_jobs), address=address, connect_timeout_s=connect_timeout_s
        )
    raise ValueError(f"unknown executor {name!r}; valid executors: {', '.join(EXECUTORS)}")
