"""Executors: where evaluation cases run (this process, local processes, a cluster).

Every executor has one job: apply a picklable function to a list of picklable
tasks and yield ``(index, result)`` pairs as each task finishes, so that the
caller can store each result the moment it exists (a kill then loses only the
cases in flight). Cases are independent and seeded, so where they run does
not change their numbers (given the same thread count; see the runner).

* ``serial``: in this process, in order (the default).
* ``joblib``: local worker processes (joblib's ``loky`` backend).
* ``dask``: joblib with the Dask backend, on a ``dask.distributed`` cluster
  (``address`` of a scheduler, or a local cluster when omitted).
* ``ray``: joblib with Ray's backend (``ray.util.joblib``), on a Ray cluster
  (``address``, or a local one).

Dask and Ray are optional: they are imported only when chosen, and a missing
package raises :class:`ExecutorUnavailableError` with the install line.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from eval.errors import ExecutorUnavailableError

__all__ = [
    "EXECUTORS",
    "DaskExecutor",
    "Executor",
    "ExecutorUnavailableError",
    "JoblibExecutor",
    "RayExecutor",
    "SerialExecutor",
    "make_executor",
]

EXECUTORS: tuple[str, ...] = ("serial", "joblib", "dask", "ray")
"""Names accepted by :func:`make_executor` (and ``--executor``)."""


def _indexed(fn: Callable[[Any], Any], index: int, task: Any) -> tuple[int, Any]:
    # Module-level so that process pools can pickle it.
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
            ``(index into tasks, fn(task))`` in completion order. An exception
            raised by ``fn`` propagates to the caller.
        """
        raise NotImplementedError

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
    """Runs tasks through ``joblib.Parallel`` (local ``loky`` processes by default).

    Args:
        n_jobs: Number of parallel workers.
        backend: A joblib backend name (``"loky"``; ``"dask"`` and ``"ray"``
            are set up by their own executors).
    """

    name = "joblib"

    def __init__(self, n_jobs: int = 2, backend: str = "loky") -> None:
        if n_jobs < 1:
            raise ValueError(f"n_jobs must be >= 1, got {n_jobs}")
        self.n_jobs = n_jobs
        self.backend = backend

    def _backend_context(self) -> contextlib.AbstractContextManager[Any]:
        return contextlib.nullcontext()

    def map_unordered(
        self, fn: Callable[[Any], Any], tasks: Sequence[Any]
    ) -> Iterator[tuple[int, Any]]:
        """See :meth:`Executor.map_unordered`."""
        import joblib

        if not tasks:
            return
        with self._backend_context():
            parallel = joblib.Parallel(
                n_jobs=self.n_jobs,
                backend=self.backend,
                return_as="generator_unordered",
                # One case per dispatch: cases are long, and a kill should lose
                # only what is running.
                batch_size=1,
                pre_dispatch="n_jobs",
            )
            yield from parallel(
                joblib.delayed(_indexed)(fn, index, task) for index, task in enumerate(tasks)
            )

    def describe(self) -> str:
        """See :meth:`Executor.describe`."""
        return f"{self.name}(backend={self.backend}, n_jobs={self.n_jobs})"


class DaskExecutor(JoblibExecutor):
    """joblib with the Dask backend on a ``dask.distributed`` cluster.

    Args:
        n_jobs: Concurrent tasks (``-1``: as many as the cluster's workers).
        address: Scheduler address (``tcp://host:8786``); ``None`` starts a
            local cluster.
    """

    name = "dask"

    def __init__(self, n_jobs: int = -1, address: str | None = None) -> None:
        try:
            import distributed  # noqa: F401
        except ImportError as exc:
            raise ExecutorUnavailableError(
                "executor 'dask' needs dask.distributed: "
                "pip install 'tabpfn-retrofit[dask]' (or 'dask[distributed]')"
            ) from exc
        self.n_jobs = n_jobs
        self.backend = "dask"
        self.address = address
        self._client: Any = None

    def _backend_context(self) -> contextlib.AbstractContextManager[Any]:
        from distributed import Client

        if self._client is None:
            self._client = Client(self.address) if self.address else Client(processes=True)
        # joblib's "dask" backend uses the current distributed client.
        return contextlib.nullcontext()

    def describe(self) -> str:
        """See :meth:`Executor.describe`."""
        return f"dask(address={self.address or 'local'}, n_jobs={self.n_jobs})"


class RayExecutor(JoblibExecutor):
    """joblib with Ray's backend (``ray.util.joblib``) on a Ray cluster.

    Args:
        n_jobs: Concurrent tasks (``-1``: as many as the cluster's CPUs).
        address: Ray cluster address (``ray://host:10001`` or ``auto``);
            ``None`` starts a local Ray.
    """

    name = "ray"

    def __init__(self, n_jobs: int = -1, address: str | None = None) -> None:
        try:
            import ray  # noqa: F401
        except ImportError as exc:
            raise ExecutorUnavailableError(
                "executor 'ray' needs ray: pip install 'ray[default]'"
            ) from exc
        self.n_jobs = n_jobs
        self.backend = "ray"
        self.address = address

    def _backend_context(self) -> contextlib.AbstractContextManager[Any]:
        import ray
        from ray.util.joblib import register_ray

        if not ray.is_initialized():
            ray.init(address=self.address)
        register_ray()
        return contextlib.nullcontext()

    def describe(self) -> str:
        """See :meth:`Executor.describe`."""
        return f"ray(address={self.address or 'local'}, n_jobs={self.n_jobs})"


def make_executor(name: str, n_jobs: int = 1, address: str | None = None) -> Executor:
    """Build an executor by name.

    Args:
        name: One of :data:`EXECUTORS`.
        n_jobs: Parallel workers (ignored by ``serial``).
        address: Cluster address for ``dask`` / ``ray``.

    Returns:
        The executor.

    Raises:
        ValueError: If ``name`` is unknown.
        ExecutorUnavailableError: If its package is missing.
    """
    if name == "serial":
        return SerialExecutor()
    if name == "joblib":
        return JoblibExecutor(n_jobs=max(1, n_jobs))
    if name == "dask":
        return DaskExecutor(n_jobs=n_jobs, address=address)
    if name == "ray":
        return RayExecutor(n_jobs=n_jobs, address=address)
    raise ValueError(f"unknown executor {name!r}; valid executors: {', '.join(EXECUTORS)}")
