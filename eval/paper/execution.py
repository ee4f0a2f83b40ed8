"""Execution: one case fitted and measured, and a suite of them run into the store.

Resume and failure semantics (after TabArena / AMLB): a run file is written
the moment its case finishes, so a kill loses at most the cases in flight; a
rerun skips every key that has a file; a fit or predict that raises is stored
with ``status="failed"`` and the exception text, non-finite predictions with
``status="nonfinite"``; nothing is dropped. Each run is claimed in the store
before it is computed, so two processes never compute the same run; the claim
is released as soon as its row is stored, and the claim files a killed run
left behind are removed when a later run finishes (a live process's never).

Frozen weights: before the run the state-dict hash of the tensors loaded from
the checkpoint file is taken; after every case the worker reloads and rehashes
them and raises :class:`~eval.errors.CheckpointChangedError` (aborting the
run, storing nothing for that case) when they differ.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import platform
import time
import traceback
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from eval.errors import CheckpointChangedError, StoreError, StoreWarning
from eval.paper.datasets import load_dataset, split
from eval.paper.estimators import (
    ESTIMATORS,
    classification_metrics,
    regression_metrics,
    suite_task,
)
from eval.paper.executors import Executor, LostTask, SerialExecutor
from eval.paper.protocol import SUITE_SOURCE
from eval.paper.record import SPEC_FIELDS, RunRecord, version_pairs
from eval.paper.spec import (
    RunSpec,
    Task,
    baseline_key,
    canonical_json,
    code_sha256,
    state_dict_sha256,
)
from eval.paper.store import (
    claim_run,
    clear_stale_claims,
    read_record,
    release_claim,
    run_path,
    utc_now,
    write_record,
)
from eval.provenance import provenance_dict
from retrofit.batching.chunks import cache_sized_chunks
from retrofit.versions import package_versions

__all__ = ["RunSummary", "build_estimator", "case_data", "lost_record", "run_suite", "run_task"]


def case_data(spec: RunSpec) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The verified split of a spec's case, cut to its row limits.

    Returns:
        ``(X_train, X_test, y_train, y_test)``.
    """
    ds = load_dataset(spec.dataset, SUITE_SOURCE[spec.suite])
    if ds.sha256 != spec.data_sha256:
        raise RuntimeError(f"{spec.dataset}: data changed since the run was planned")
    X_train, X_test, y_train, y_test = split(ds, spec.seed)
    # The split is already shuffled by its seed, so a prefix is a seeded subsample.
    if spec.max_train_rows is not None:
        X_train, y_train = X_train[: spec.max_train_rows], y_train[: spec.max_train_rows]
    if spec.max_test_rows is not None:
        X_test, y_test = X_test[: spec.max_test_rows], y_test[: spec.max_test_rows]
    return X_train, X_test, y_train, y_test


def build_estimator(spec: RunSpec, model_path: str, **extra: Any) -> Any:
    """A fresh, unfitted retrofit estimator configured by ``spec`` (and ``extra``).

    ``retrofit.OTabPFNRegressor`` for a regression suite, ``OTabPFNClassifier``
    for a classification suite (:data:`eval.paper.estimators.ESTIMATORS`).
    """
    kwargs: dict[str, Any] = {}
    if spec.mode != "none":
        kwargs = {"tau": spec.tau, "support": spec.support, "eps_den": spec.eps_den}
    return ESTIMATORS[suite_task(spec.suite)](
        mode=spec.mode,
        model_path=model_path,
        n_estimators=spec.n_estimators,
        device=spec.device,
        random_state=spec.seed,
        fit_mode=spec.fit_mode,
        inference_precision=getattr(torch, spec.dtype),
        **kwargs,
        **extra,
    )


def _resolved_precision(estimator: Any) -> dict[str, Any]:
    inner = estimator  # the retrofit's estimators are the fitted tabpfn estimators
    forced = getattr(inner, "forced_inference_dtype_", None)
    devices = getattr(inner, "devices_", None)
    return {
        "resolved_dtype": str(forced).removeprefix("torch.") if forced is not None else None,
        "autocast": getattr(inner, "use_autocast_", None),
        "resolved_device": ",".join(str(d) for d in devices) if devices else None,
    }


def _patch_info(estimator: Any) -> dict[str, Any]:
    report = getattr(estimator, "patch_report_", None)
    if report is None:
        return {"patch_digest": None, "patch_report": None}
    as_dict = report.to_dict() if hasattr(report, "to_dict") else None
    if as_dict is None and dataclasses.is_dataclass(report):
        as_dict = dataclasses.asdict(report)
    try:
        canonical_json(as_dict)
    except (TypeError, ValueError):
        as_dict = repr(report)
    return {"patch_digest": report.digest(), "patch_report": as_dict}


def _check_process_matches_key(spec: RunSpec) -> None:
    """Refuse to run a case where the code or packages are not those its key names.

    The key is made where the run is planned; a cluster worker may have another
    install, and its numbers must not be stored under a key that says otherwise.
    """
    code = code_sha256()
    if code != spec.code_sha256:
        raise RuntimeError(
            f"this process runs other retrofit code (sha256 {code[:12]}) than the run's key "
            f"({spec.code_sha256[:12]}); install the same tabpfn-retrofit on every worker"
        )
    versions = package_versions()
    differ = [
        f"{n} {versions.get(n)} (key: {v})"
        for n, v in spec.versions.items()
        if versions.get(n) != v
    ]
    if differ:
        raise RuntimeError(
            "this process's packages differ from the run's key: " + "; ".join(differ)
        )


def _fit_predict(task: Task) -> tuple[dict[str, Any], Any]:
    """Fit and predict one case: the record's measured fields, and the estimator.

    An exception is recorded in the fields (``error``, ``traceback``), never raised;
    the estimator is ``None`` when it was never built.
    """
    spec, estimator = task.spec, None
    measured: dict[str, Any] = {}
    try:
        _check_process_matches_key(spec)
        X_train, X_test, y_train, y_test = case_data(spec)
        measured.update(n_train=len(y_train), n_test=len(y_test), n_features=int(X_train.shape[1]))
        extra = {"ignore_pretraining_limits": True} if task.ignore_pretraining_limits else {}
        estimator = build_estimator(spec, task.model_path, **extra)
        t0 = time.perf_counter()
        estimator.fit(X_train, y_train)
        measured["fit_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        classify = suite_task(spec.suite) == "classification"
        predict = estimator.predict_proba if classify else estimator.predict
        with _cache_sized_chunks(estimator):
            pred = np.asarray(predict(X_test), dtype=np.float64)
        measured["predict_s"] = time.perf_counter() - t0
        nonfinite = int((~np.isfinite(pred)).sum())
        measured["nonfinite_predictions"] = nonfinite
        if not nonfinite:
            if classify:
                classes = np.asarray(estimator.classes_)
                measured.update(classification_metrics(pred, classes, y_test))
            else:
                measured.update(regression_metrics(pred, y_test))
            measured["status"] = "ok"
        else:
            measured["status"] = "nonfinite"
            measured["error"] = f"{nonfinite} of {pred.size} predictions not finite"
    except Exception as exc:  # recorded, never dropped
        measured["error"] = f"{type(exc).__name__}: {exc}"
        measured["traceback"] = traceback.format_exc(limit=8)[-4000:]
    return measured, estimator


def _cache_sized_chunks(estimator: Any) -> contextlib.AbstractContextManager:
    """The device's cache-sized stage 0-2 chunks for a fitted tabpfn estimator.

    Faster on a CPU (at one thread and at two: ``results/bench``), and equal to
    tabpfn's default chunks up to rounding (bit-identical on AVX-512, within
    ulps where a BLAS blocks a shorter matrix otherwise:
    :mod:`retrofit.batching.chunks`); nothing changes for an estimator without
    tabpfn's fitted models (a stand-in in tests).
    """
    models, devices = getattr(estimator, "models_", None), getattr(estimator, "devices_", None)
    if not models or not devices:
        return contextlib.nullcontext()
    return cache_sized_chunks(models, devices[0])


def _warning_line(w: warnings.WarningMessage) -> str:
    first = (str(w.message).strip().splitlines() or [""])[0]
    return f"{w.category.__name__}: {first[:300]}"


def run_task(task: Task) -> RunRecord:
    """Run one spec: fit, predict, measure; never raises for a failing case.

    Args:
        task: The spec and its resolved checkpoint.

    Returns:
        The run to store (``status`` ``"ok"``, ``"nonfinite"`` or ``"failed"``).

    Raises:
        CheckpointChangedError: If the checkpoint's tensors differ from the
            run's reference after the case (nothing is stored for it).
    """
    if task.threads is not None:
        torch.set_num_threads(task.threads)
    spec = task.spec
    record = _new_record(task)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        measured, estimator = _fit_predict(task)
    # Kept with the run (deduplicated) instead of flooding the progress bar.
    measured["warnings"] = tuple(sorted({_warning_line(w) for w in caught}))
    if estimator is not None:
        measured.update(_resolved_precision(estimator))
        try:
            measured.update(_patch_info(estimator))
        except Exception as exc:
            measured.update(patch_digest=None, patch_report=f"unavailable: {exc}")
    measured.update(finished_at=utc_now(), provenance=_provenance())
    record = dataclasses.replace(record, **measured)
    del estimator
    after = state_dict_sha256(task.model_path)
    if after != task.state_hash:
        raise CheckpointChangedError(
            f"checkpoint tensors of {task.model_path} changed during the run "
            f"(state-dict sha256 {task.state_hash[:12]} -> {after[:12]}) after "
            f"{spec.dataset}/seed {spec.seed}/{spec.mode}; rerun once it is stable"
        )
    return record


def _new_record(task: Task) -> RunRecord:
    """The run of ``task`` before it runs: its config, status ``"failed"``, no numbers."""
    spec = task.spec
    return RunRecord(
        key=spec.key,
        baseline_key=baseline_key(spec),
        **{name: getattr(spec, name) for name in SPEC_FIELDS},
        versions=version_pairs(spec.versions),
        model=task.model_label,
        state_dict_sha256=task.state_hash,
        status="failed",
        threads=torch.get_num_threads(),
        executor=task.executor,
        ignore_pretraining_limits=task.ignore_pretraining_limits,
        hostname=platform.node(),
        pid=os.getpid(),
        started_at=utc_now(),
    )


def lost_record(task: Task, error: str) -> RunRecord:
    """The failed run of a task whose worker died on every try (an executor's ``LostTask``)."""
    return dataclasses.replace(
        _new_record(task),
        error=error,
        threads=task.threads,
        hostname=None,
        pid=None,
        finished_at=utc_now(),
    )


def _provenance() -> dict[str, Any]:
    # Compact: the dirty code paths are recorded once per session, not per row.
    return provenance_dict(include_dirty_paths=False)


@dataclass
class RunSummary:
    """What one :func:`run_suite` call did."""

    planned: int = 0
    skipped: int = 0
    computed: int = 0
    failed: int = 0
    nonfinite: int = 0
    claimed_elsewhere: int = 0
    wall_s: float = 0.0
    keys: list[str] = field(default_factory=list)


def run_suite(
    tasks: Sequence[Task],
    store: str | Path,
    *,
    executor: Executor | None = None,
    retry_failed: bool = False,
    progress: bool = True,
    on_row: Callable[[RunRecord], None] | None = None,
    task_fn: Callable[[Task], RunRecord] = run_task,
) -> RunSummary:
    """Run every task that has no stored result yet, storing each as it finishes.

    Args:
        tasks: From :func:`make_tasks`.
        store: The suite's results directory (rows go to ``store/runs``).
        executor: Where cases run; :class:`SerialExecutor` by default.
        retry_failed: Recompute stored rows whose status is not ``"ok"``.
        progress: Show a progress bar over the cases to run.
        on_row: Called with each stored run (in the calling process).
        task_fn: The per-task function (module-level, picklable).

    Returns:
        Counts of planned, skipped and computed runs.

    Raises:
        CheckpointChangedError: If the checkpoint changed mid-run.
    """
    executor = executor or SerialExecutor()
    executor.check_reachable()  # before any run is claimed: an unreachable cluster stores nothing
    start = time.perf_counter()
    summary = RunSummary(planned=len(tasks))
    todo: list[Task] = []
    seen: set[str] = set()
    for task in tasks:
        key = task.spec.key
        if key in seen:
            continue
        seen.add(key)
        try:
            existing = read_record(run_path(store, key), advice="recomputing it")
        except StoreError as exc:  # a truncated file is recomputed, loudly
            warnings.warn(str(exc), StoreWarning, stacklevel=2)
            existing = None
        if existing is not None and (existing.ok or not retry_failed):
            summary.skipped += 1
            continue
        if not claim_run(store, key):  # another eval process is computing it
            summary.claimed_elsewhere += 1
            continue
        if existing is None and _stored_meanwhile(store, key, retry_failed):
            release_claim(store, key)  # finished by another process since we looked
            summary.skipped += 1
            continue
        todo.append(task)
    try:
        _run_todo(todo, store, executor, task_fn, summary, progress, on_row)
    finally:
        for task in todo:  # those not stored yet (each stored run released its own)
            release_claim(store, task.spec.key)
    # The claims a killed run left behind (its runs stored, or stored here now).
    clear_stale_claims(store)
    summary.wall_s = time.perf_counter() - start
    return summary


def _stored_meanwhile(store: str | Path, key: str, retry_failed: bool) -> bool:
    """Whether a run ``key`` was stored between the first look and the claim."""
    try:
        record = read_record(run_path(store, key))
    except StoreError:
        return False
    return record is not None and (record.ok or not retry_failed)


def _run_todo(
    todo: Sequence[Task],
    store: str | Path,
    executor: Executor,
    task_fn: Callable[[Task], RunRecord],
    summary: RunSummary,
    progress: bool,
    on_row: Callable[[RunRecord], None] | None,
) -> None:
    # No bar when nothing is computed: an empty bar says nothing, twice.
    with tqdm(total=len(todo), desc="cases", unit="run", disable=not (progress and todo)) as bar:
        for index, outcome in executor.map_unordered(task_fn, todo):
            record = outcome
            if isinstance(outcome, LostTask):
                record = lost_record(todo[index], outcome.error)
            write_record(store, record)
            release_claim(store, record.key)  # stored: a kill from here on leaves no claim
            summary.computed += 1
            summary.failed += record.status == "failed"
            summary.nonfinite += record.status == "nonfinite"
            summary.keys.append(record.key)
            bar.set_postfix_str(f"{record.dataset}/s{record.seed}/{record.mode}", refresh=False)
            bar.update()
            if on_row is not None:
                on_row(record)
