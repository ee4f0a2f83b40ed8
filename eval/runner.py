"""The evaluation runner: dataset-seed cases x variants, one immutable result file each.

Protocol (the paper's): on every case (a dataset under split seed ``s``), the
unpatched host (mode ``"none"``) and the retrofits (``"oattention"``,
``"full-o"``) are fitted on the same split, ``train_test_split(test_size=0.25,
random_state=s)``, with the same TabPFN ``random_state=s``, the same
``n_estimators`` and ``inference_precision=torch.float32``; each fit builds its
own model from the checkpoint file.

Store layout (``store`` is a suite's results directory, e.g.
``results/offline18``)::

    runs/<key>.json         one row per (case, variant, tau); key = sha256 of
                            the run's full config (:class:`RunSpec`)
    sessions/<time>.json    one record per ``eval`` command (wall time, counts)
    carriers/<sha12>.json   carrier norms of the host (eval.carriers)

Resume and failure semantics (after TabArena / AMLB): a run file is written
atomically the moment its case finishes, so a kill loses at most the cases in
flight and never leaves a partial file; a rerun skips every key that has a
readable file; a fit or predict that raises is stored with ``status="failed"``
and the exception text, non-finite predictions with ``status="nonfinite"``;
nothing is dropped. Mode ``"none"`` does not depend on ``tau``/``support``/
``eps_den``: its key sets them to ``None``, so one baseline row serves every
tau of a sweep, and :func:`baseline_key` finds it for any variant row.

Frozen weights: before the run the state-dict hash of the tensors loaded from
the checkpoint file is taken; after every case the worker reloads and rehashes
them and raises :class:`CheckpointChangedError` (aborting the run, storing
nothing for that case) when they differ.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.metadata
import json
import math
import os
import platform
import sys
import time
import traceback
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from eval.executors import Executor, SerialExecutor
from retrofit.hashing import sha256_file
from retrofit.settings import MODES, RetrofitSettings

__all__ = [
    "DEFAULT_MODES",
    "DEFAULT_TAU",
    "PAPER_MEAN_DELTA_PCT",
    "SWEEP_TAUS",
    "CheckpointChangedError",
    "RunSpec",
    "RunSummary",
    "Task",
    "baseline_key",
    "build_estimator",
    "case_data",
    "load_rows",
    "make_tasks",
    "package_versions",
    "resolve_n_estimators",
    "run_suite",
    "run_task",
    "runs_dir",
    "state_dict_sha256",
]

DEFAULT_MODES = MODES
DEFAULT_TAU = 1.0
"""Default presence scale (``retrofit.patch``'s default; see summary.md for why)."""

DEFAULT_SUPPORT = "count"
DEFAULT_EPS_DEN = 1e-6

SWEEP_TAUS: tuple[float, ...] = (1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0, 1000.0)
"""Tau values of ``--sweep``: six orders of magnitude around the default."""

PAPER_MEAN_DELTA_PCT: dict[str, float] = {"oattention": 0.088, "full-o": 0.177}
"""The paper's mean relative RMSE change (%), 18 cases, real TabPFN v3 weights."""

_SUITE_SOURCE = {"offline18": "offline", "openml18": "openml"}
_PACKAGES = ("tabpfn-retrofit", "tabpfn", "torch", "scikit-learn", "numpy")


class CheckpointChangedError(RuntimeError):
    """The checkpoint's tensors changed during a run (results would be mixed)."""


# --------------------------------------------------------------------------- #
# Hashing and provenance helpers
# --------------------------------------------------------------------------- #


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def package_versions() -> dict[str, str]:
    """Versions of the packages that affect the numbers (part of every key)."""
    return {name: _version(name) for name in _PACKAGES}


_TRAINING_ONLY = frozenset(
    {"embedded/card.py", "embedded/pretrain.py", "embedded/prior.py", "embedded/train.py"}
)
"""Modules of :mod:`retrofit` that only build the embedded host, never run at
prediction; the host they make enters a run key through its checkpoint digest."""


def code_sha256() -> str:
    """SHA-256 of the source of :mod:`patches` and :mod:`retrofit` that runs at prediction.

    Every ``.py`` of both packages except :data:`_TRAINING_ONLY`. Part of every
    run key, so a change to the operators or the patcher makes stored runs stale
    instead of silently mixing them with new ones.
    """
    import patches
    import retrofit

    digest = hashlib.sha256()
    for package in (patches, retrofit):
        root = Path(package.__file__).parent
        for path in sorted(root.rglob("*.py")):
            if package is retrofit and path.relative_to(root).as_posix() in _TRAINING_ONLY:
                continue
            digest.update(f"{package.__name__}/{path.relative_to(root).as_posix()}\n".encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


def state_dict_sha256(path: str | Path) -> str:
    """Hash of the tensors tabpfn's loader reads from a checkpoint file.

    Covers every state-dict entry's name, dtype, shape and bytes, in sorted
    name order; header metadata is not part of it.

    Args:
        path: A ``.safetensors`` or ``.ckpt`` checkpoint.

    Returns:
        Hex SHA-256.
    """
    import torch
    from tabpfn.checkpoint import Checkpoint

    state = Checkpoint(Path(path)).load()["state_dict"]
    digest = hashlib.sha256()
    for name in sorted(state):
        tensor = state[name].detach().cpu().contiguous()
        digest.update(f"{name}|{tensor.dtype}|{tuple(tensor.shape)}\n".encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def resolve_n_estimators(model_path: str | Path) -> int:
    """``n_estimators`` of a checkpoint's inference config (``"auto"``: tabpfn's default).

    Args:
        model_path: Anything ``retrofit.loading.load_host`` accepts.

    Returns:
        The ensemble size the suite is run with, fixed and recorded.
    """
    from tabpfn.preprocessing.ensemble import DEFAULT_N_ESTIMATORS

    from retrofit.loading import load_host

    value = load_host(model_path).inference_config.N_ESTIMATORS
    return DEFAULT_N_ESTIMATORS if value == "auto" else int(value)


def _canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=False)


def _utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


# --------------------------------------------------------------------------- #
# Specs and tasks
# --------------------------------------------------------------------------- #


@dataclass(frozen=True)
class RunSpec:
    """The full config of one stored run; its hash is the run's key.

    Attributes:
        suite: ``"offline18"`` or ``"openml18"``.
        dataset: Dataset short name.
        seed: Split seed and TabPFN ``random_state``.
        mode: One of :data:`MODES`.
        tau: Presence scale (``None`` for mode ``"none"``).
        support: ``n_eff`` rule (``None`` for mode ``"none"``).
        eps_den: Denominator epsilon (``None`` for mode ``"none"``).
        n_estimators: Ensemble size.
        checkpoint_sha256: SHA-256 of the checkpoint file.
        data_sha256: Canonical SHA-256 of the dataset.
        dtype: Forced inference dtype.
        device: Torch device.
        fit_mode: tabpfn ``fit_mode``.
        max_train_rows: Train rows kept after the split (``None``: all).
        max_test_rows: Test rows kept after the split (``None``: all).
        code_sha256: :func:`code_sha256` of the operators and patcher.
        versions: :func:`package_versions`.
    """

    suite: str
    dataset: str
    seed: int
    mode: str
    tau: float | None
    support: str | None
    eps_den: float | None
    n_estimators: int
    checkpoint_sha256: str
    data_sha256: str
    dtype: str = "float32"
    device: str = "cpu"
    fit_mode: str = "fit_preprocessors"
    max_train_rows: int | None = None
    max_test_rows: int | None = None
    code_sha256: str = field(default_factory=code_sha256)
    versions: dict[str, str] = field(default_factory=package_versions, compare=False)

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"unknown mode {self.mode!r}; valid modes: {', '.join(MODES)}")
        if self.mode == "none" and (self.tau, self.support, self.eps_den) != (None, None, None):
            raise ValueError("mode 'none' takes no tau/support/eps_den (its key shares them)")

    def as_dict(self) -> dict[str, Any]:
        """All fields, JSON-able."""
        return dataclasses.asdict(self)

    @property
    def key(self) -> str:
        """SHA-256 of the canonical JSON of every field."""
        return hashlib.sha256(_canonical(self.as_dict()).encode()).hexdigest()


def baseline_key(spec: RunSpec | dict[str, Any]) -> str:
    """Key of the unpatched (mode ``"none"``) run paired with ``spec``."""
    fields = spec.as_dict() if isinstance(spec, RunSpec) else dict(spec)
    names = {f.name for f in dataclasses.fields(RunSpec)}
    fields = {k: v for k, v in fields.items() if k in names}
    fields.update(mode="none", tau=None, support=None, eps_den=None)
    return RunSpec(**fields).key


@dataclass(frozen=True)
class Task:
    """What a worker needs to run one spec (picklable).

    Attributes:
        spec: The run's config.
        model_path: The resolved checkpoint file.
        state_hash: :func:`state_dict_sha256` of the file at the start of the run.
        threads: ``torch.set_num_threads`` in the worker (``None``: leave).
        executor: Description of the executor, for provenance.
        ignore_pretraining_limits: Passed to tabpfn; only lifts its size checks
            (e.g. real weights on CPU above 1000 train rows), so not in the key.
    """

    spec: RunSpec
    model_path: str
    state_hash: str
    threads: int | None = None
    executor: str = "serial"
    ignore_pretraining_limits: bool = False


def make_tasks(
    *,
    suite: str,
    model_path: str | Path,
    modes: Sequence[str] = DEFAULT_MODES,
    taus: Sequence[float] = (DEFAULT_TAU,),
    support: str = DEFAULT_SUPPORT,
    eps_den: float = DEFAULT_EPS_DEN,
    n_estimators: int | None = None,
    device: str = "cpu",
    fit_mode: str = "fit_preprocessors",
    datasets: Sequence[str] | None = None,
    seeds: Sequence[int] | None = None,
    max_train_rows: int | None = None,
    max_test_rows: int | None = None,
    threads: int | None = None,
    executor: str = "serial",
    ignore_pretraining_limits: bool = False,
) -> list[Task]:
    """Every (case, variant, tau) of a suite as tasks, baselines first per case.

    Args:
        suite: Suite name.
        model_path: A resolved checkpoint file.
        modes: Variants; ``"none"`` runs once per case whatever ``taus``.
        taus: Presence scales of the retrofit variants.
        support: ``n_eff`` rule of the retrofits.
        eps_den: Denominator epsilon of the retrofits.
        n_estimators: Ensemble size; ``None`` reads the checkpoint's.
        device: Torch device.
        fit_mode: tabpfn ``fit_mode``.
        datasets: Subset of the suite's datasets (``None``: all).
        seeds: Subset of the suite's seeds (``None``: all).
        max_train_rows: Keep only the first rows of each train split (tests).
        max_test_rows: Keep only the first rows of each test split (tests).
        threads: Torch threads per worker.
        executor: Executor description for provenance.
        ignore_pretraining_limits: See :class:`Task`.

    Returns:
        The tasks, dataset-major, then seed, then mode, then tau.

    Raises:
        ValueError: On an unknown suite, mode, dataset or seed, or invalid
            retrofit settings (``retrofit.InvalidPatchConfigError``).
    """
    from eval.datasets import load_dataset, suite_cases

    if suite not in _SUITE_SOURCE:
        raise ValueError(f"unknown suite {suite!r}; valid suites: {', '.join(_SUITE_SOURCE)}")
    for mode in modes:
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}; valid modes: {', '.join(MODES)}")
    for tau in taus if any(m != "none" for m in modes) else ():
        # Fail before any fit on a typo, instead of storing every case as failed.
        RetrofitSettings(mode="none", tau=float(tau), support=support, eps_den=eps_den)
    cases = suite_cases(suite)
    names = {c.dataset for c in cases}
    for name in datasets or ():
        if name not in names:
            raise ValueError(f"dataset {name!r} is not in suite {suite!r}: {', '.join(names)}")
    valid_seeds = {c.seed for c in cases}
    for seed in seeds or ():
        if seed not in valid_seeds:
            raise ValueError(f"seed {seed} is not in suite {suite!r}: {sorted(valid_seeds)}")
    cases = [
        c
        for c in cases
        if (datasets is None or c.dataset in datasets) and (seeds is None or c.seed in seeds)
    ]
    model_path = str(Path(model_path).resolve())
    ckpt_sha = sha256_file(model_path)
    state_hash = state_dict_sha256(model_path)
    n_est = resolve_n_estimators(model_path) if n_estimators is None else int(n_estimators)
    versions = package_versions()
    code = code_sha256()
    tasks: list[Task] = []
    for case in cases:
        data_sha = load_dataset(case.dataset, _SUITE_SOURCE[suite]).sha256
        common = dict(
            suite=suite,
            dataset=case.dataset,
            seed=case.seed,
            n_estimators=n_est,
            checkpoint_sha256=ckpt_sha,
            data_sha256=data_sha,
            device=device,
            fit_mode=fit_mode,
            max_train_rows=max_train_rows,
            max_test_rows=max_test_rows,
            code_sha256=code,
            versions=versions,
        )
        specs: list[RunSpec] = []
        for mode in modes:
            if mode == "none":
                specs.append(RunSpec(mode=mode, tau=None, support=None, eps_den=None, **common))
            else:
                specs.extend(
                    RunSpec(mode=mode, tau=float(t), support=support, eps_den=eps_den, **common)
                    for t in taus
                )
        tasks.extend(
            Task(spec, model_path, state_hash, threads, executor, ignore_pretraining_limits)
            for spec in specs
        )
    return tasks


# --------------------------------------------------------------------------- #
# One case
# --------------------------------------------------------------------------- #


def case_data(spec: RunSpec) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The verified split of a spec's case, cut to its row limits.

    Returns:
        ``(X_train, X_test, y_train, y_test)``.
    """
    from eval.datasets import load_dataset, split

    ds = load_dataset(spec.dataset, _SUITE_SOURCE[spec.suite])
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
    """A fresh, unfitted ``retrofit.OTabPFNRegressor`` configured by ``spec`` (and ``extra``)."""
    import torch

    from retrofit import OTabPFNRegressor

    kwargs: dict[str, Any] = {}
    if spec.mode != "none":
        kwargs = {"tau": spec.tau, "support": spec.support, "eps_den": spec.eps_den}
    return OTabPFNRegressor(
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
    inner = estimator  # OTabPFNRegressor is the fitted TabPFNRegressor
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
        _canonical(as_dict)
    except (TypeError, ValueError):
        as_dict = repr(report)
    return {"patch_digest": report.digest(), "patch_report": as_dict}


def _fit_predict(task: Task, row: dict[str, Any]) -> Any:
    """Fit and predict one case, filling ``row``; exceptions are recorded in it."""
    spec, estimator = task.spec, None
    try:
        X_train, X_test, y_train, y_test = case_data(spec)
        row.update(n_train=len(y_train), n_test=len(y_test), n_features=int(X_train.shape[1]))
        extra = {"ignore_pretraining_limits": True} if task.ignore_pretraining_limits else {}
        estimator = build_estimator(spec, task.model_path, **extra)
        t0 = time.perf_counter()
        estimator.fit(X_train, y_train)
        row["fit_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        pred = np.asarray(estimator.predict(X_test), dtype=np.float64)
        row["predict_s"] = time.perf_counter() - t0
        finite = np.isfinite(pred)
        row["nonfinite_predictions"] = int((~finite).sum())
        if finite.all():
            err = pred - y_test
            row["rmse"] = float(np.sqrt(np.mean(err**2)))
            row["mae"] = float(np.mean(np.abs(err)))
            row["status"] = "ok"
        else:
            row["status"] = "nonfinite"
            row["error"] = f"{row['nonfinite_predictions']} of {pred.size} predictions not finite"
    except Exception as exc:  # recorded, never dropped
        row["error"] = f"{type(exc).__name__}: {exc}"
        row["traceback"] = traceback.format_exc(limit=8)[-4000:]
    return estimator


def _warning_line(w: warnings.WarningMessage) -> str:
    first = (str(w.message).strip().splitlines() or [""])[0]
    return f"{w.category.__name__}: {first[:300]}"


def run_task(task: Task) -> dict[str, Any]:
    """Run one spec: fit, predict, measure; never raises for a failing case.

    Args:
        task: The spec and its resolved checkpoint.

    Returns:
        The row to store (``status`` ``"ok"``, ``"nonfinite"`` or ``"failed"``).

    Raises:
        CheckpointChangedError: If the checkpoint's tensors differ from the
            run's reference after the case (nothing is stored for it).
    """
    import torch

    if task.threads is not None:
        torch.set_num_threads(task.threads)
    spec = task.spec
    row: dict[str, Any] = {
        "key": spec.key,
        "baseline_key": baseline_key(spec),
        **{k: v for k, v in spec.as_dict().items() if k != "versions"},
        **{f"{name.replace('-', '_')}_version": v for name, v in spec.versions.items()},
        "model_path": task.model_path,
        "state_dict_sha256": task.state_hash,
        "status": "failed",
        "rmse": None,
        "mae": None,
        "n_train": None,
        "n_test": None,
        "n_features": None,
        "nonfinite_predictions": None,
        "error": None,
        "traceback": None,
        "fit_s": None,
        "predict_s": None,
        "threads": torch.get_num_threads(),
        "executor": task.executor,
        "ignore_pretraining_limits": task.ignore_pretraining_limits,
        "hostname": platform.node(),
        "pid": os.getpid(),
        "started_at": _utc_now(),
    }
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        estimator = _fit_predict(task, row)
    # Kept with the row (deduplicated) instead of flooding the progress bar.
    row["warnings"] = sorted({_warning_line(w) for w in caught})
    if estimator is not None:
        row.update(_resolved_precision(estimator))
        try:
            row.update(_patch_info(estimator))
        except Exception as exc:
            row.update(patch_digest=None, patch_report=f"unavailable: {exc}")
    row["finished_at"] = _utc_now()
    row["provenance"] = _provenance()
    del estimator
    after = state_dict_sha256(task.model_path)
    if after != task.state_hash:
        raise CheckpointChangedError(
            f"checkpoint tensors of {task.model_path} changed during the run "
            f"(state-dict sha256 {task.state_hash[:12]} -> {after[:12]}) after "
            f"{spec.dataset}/seed {spec.seed}/{spec.mode}; rerun once it is stable"
        )
    return row


def _provenance() -> dict[str, Any]:
    from eval.provenance import provenance_dict

    return provenance_dict()


# --------------------------------------------------------------------------- #
# The store
# --------------------------------------------------------------------------- #


def runs_dir(store: str | Path) -> Path:
    """Directory of the per-run files under a suite's results directory."""
    return Path(store) / "runs"


def _run_path(store: str | Path, key: str) -> Path:
    return runs_dir(store) / f"{key}.json"


def _read_row(path: Path) -> dict[str, Any] | None:
    try:
        row = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return row if isinstance(row, dict) and row.get("key") == path.stem else None


def _write_json(path: Path, obj: dict[str, Any]) -> None:
    from eval.provenance import write_json_atomic

    write_json_atomic(path, obj)


def load_rows(store: str | Path) -> list[dict[str, Any]]:
    """Every readable run row of a store, sorted by file name (skips stray files)."""
    directory = runs_dir(store)
    if not directory.is_dir():
        return []
    rows = [_read_row(p) for p in sorted(directory.glob("*.json"))]
    return [r for r in rows if r is not None]


@dataclass
class RunSummary:
    """What one :func:`run_suite` call did."""

    planned: int = 0
    skipped: int = 0
    computed: int = 0
    failed: int = 0
    nonfinite: int = 0
    wall_s: float = 0.0
    keys: list[str] = field(default_factory=list)


def _jsonable(row: dict[str, Any]) -> dict[str, Any]:
    # Strict JSON: a stray NaN/inf becomes null (status already says why).
    def fix(v: Any) -> Any:
        if isinstance(v, float) and not math.isfinite(v):
            return None
        if isinstance(v, dict):
            return {k: fix(x) for k, x in v.items()}
        if isinstance(v, list | tuple):
            return [fix(x) for x in v]
        return v

    return fix(row)


def run_suite(
    tasks: Sequence[Task],
    store: str | Path,
    *,
    executor: Executor | None = None,
    retry_failed: bool = False,
    progress: bool = True,
    on_row: Callable[[dict[str, Any]], None] | None = None,
    task_fn: Callable[[Task], dict[str, Any]] = run_task,
) -> RunSummary:
    """Run every task that has no stored result yet, storing each as it finishes.

    Args:
        tasks: From :func:`make_tasks`.
        store: The suite's results directory (rows go to ``store/runs``).
        executor: Where cases run; :class:`SerialExecutor` by default.
        retry_failed: Recompute stored rows whose status is not ``"ok"``.
        progress: Show a progress bar over the cases to run.
        on_row: Called with each stored row (in the calling process).
        task_fn: The per-task function (module-level, picklable).

    Returns:
        Counts of planned, skipped and computed runs.

    Raises:
        CheckpointChangedError: If the checkpoint changed mid-run.
    """
    from tqdm.auto import tqdm

    executor = executor or SerialExecutor()
    start = time.perf_counter()
    summary = RunSummary(planned=len(tasks))
    todo: list[Task] = []
    seen: set[str] = set()
    for task in tasks:
        key = task.spec.key
        if key in seen:
            continue
        seen.add(key)
        existing = _read_row(_run_path(store, key))
        if existing is not None and (existing.get("status") == "ok" or not retry_failed):
            summary.skipped += 1
            continue
        todo.append(task)
    with tqdm(total=len(todo), desc="cases", unit="run", disable=not progress) as bar:
        for _, row in executor.map_unordered(task_fn, todo):
            row = _jsonable(row)
            _write_json(_run_path(store, row["key"]), row)
            summary.computed += 1
            summary.failed += row["status"] == "failed"
            summary.nonfinite += row["status"] == "nonfinite"
            summary.keys.append(row["key"])
            bar.set_postfix_str(f"{row['dataset']}/s{row['seed']}/{row['mode']}", refresh=False)
            bar.update()
            if on_row is not None:
                on_row(row)
    summary.wall_s = time.perf_counter() - start
    return summary


def write_session(store: str | Path, record: dict[str, Any]) -> Path:
    """Store one ``eval`` command's record (arguments, counts, wall time)."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
    path = Path(store) / "sessions" / f"{stamp}.json"
    _write_json(path, _jsonable(record))
    return path


def iter_sessions(store: str | Path) -> Iterable[dict[str, Any]]:
    """Stored session records, oldest first."""
    directory = Path(store) / "sessions"
    for path in sorted(directory.glob("*.json")) if directory.is_dir() else ():
        try:
            yield json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue


# --------------------------------------------------------------------------- #
# Command line (`tabpfn-retrofit eval`)
# --------------------------------------------------------------------------- #


def add_eval_arguments(parser: Any) -> None:
    """Add the ``eval`` subcommand's options to an ``argparse`` parser."""
    from eval.executors import EXECUTORS

    parser.add_argument("--suite", default="offline18", choices=sorted(_SUITE_SOURCE))
    parser.add_argument(
        "--model",
        default="embedded",
        help="'embedded' (the shipped host), 'v3' / 'v2' (tabpfn's real weights) or a path",
    )
    parser.add_argument("--modes", nargs="+", default=list(DEFAULT_MODES), choices=MODES)
    parser.add_argument(
        "--tau", nargs="+", type=float, default=[DEFAULT_TAU], help="presence scale(s)"
    )
    parser.add_argument(
        "--sweep",
        action="store_true",
        help=f"also run taus {', '.join(f'{t:g}' for t in SWEEP_TAUS)} and measure carrier norms",
    )
    parser.add_argument("--support", default=DEFAULT_SUPPORT, help="n_eff rule of the retrofits")
    parser.add_argument("--eps-den", type=float, default=DEFAULT_EPS_DEN)
    parser.add_argument(
        "--n-estimators", type=int, default=None, help="default: the checkpoint's config"
    )
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--datasets", nargs="+", default=None, help="subset of the suite")
    parser.add_argument("--seeds", nargs="+", type=int, default=None, help="subset of seeds")
    parser.add_argument("--max-train-rows", type=int, default=None, help="(smoke runs only)")
    parser.add_argument("--max-test-rows", type=int, default=None, help="(smoke runs only)")
    parser.add_argument("--jobs", type=int, default=1, help="parallel workers")
    parser.add_argument("--executor", default=None, choices=EXECUTORS,
                        help="default: serial, or joblib when --jobs > 1")  # fmt: skip
    parser.add_argument("--address", default=None, help="dask scheduler / ray cluster address")
    parser.add_argument("--threads", type=int, default=None, help="torch threads per worker")
    parser.add_argument("--store", default=None, help="results directory (default results/SUITE)")
    parser.add_argument("--retry-failed", action="store_true", help="recompute failed runs")
    parser.add_argument(
        "--ignore-pretraining-limits",
        action="store_true",
        help="let tabpfn exceed its size limits (e.g. real weights on CPU, >1000 rows)",
    )
    parser.add_argument("--carriers", action="store_true", help="(re)measure carrier norms")
    parser.add_argument("--no-progress", action="store_true")


def resolve_model(model: str) -> Path:
    """The checkpoint file behind ``--model`` (through ``retrofit.loading``)."""
    from retrofit.loading import resolve_checkpoint

    return Path(resolve_checkpoint(model))


def eval_command(args: Any, argv: Sequence[str] | None = None) -> int:
    """Run ``tabpfn-retrofit eval``; returns the exit status.

    A user error (unknown dataset, missing weights or data, missing executor
    package, a checkpoint that changed mid-run) ends in one line on stderr
    and exit status 2; finished runs stay stored.
    """
    try:
        return _eval(args, argv)
    except (ValueError, RuntimeError, OSError) as exc:
        print(f"tabpfn-retrofit eval: error: {exc}", file=sys.stderr)
        return 2


def _eval(args: Any, argv: Sequence[str] | None) -> int:
    from eval.carriers import carrier_path, measure_carriers
    from eval.executors import make_executor

    started = _utc_now()
    t0 = time.perf_counter()
    store = Path(args.store or Path("results") / args.suite)
    model_path = resolve_model(args.model)
    executor_name = args.executor or ("joblib" if args.jobs > 1 else "serial")
    executor = make_executor(executor_name, n_jobs=args.jobs, address=args.address)
    threads = args.threads
    if threads is None and executor_name != "serial":
        # Workers share the cores: one torch thread each unless told otherwise.
        threads = max(1, (os.cpu_count() or 1) // max(1, args.jobs))
    taus = list(dict.fromkeys([*args.tau, *(SWEEP_TAUS if args.sweep else ())]))
    tasks = make_tasks(
        suite=args.suite,
        model_path=model_path,
        modes=args.modes,
        taus=taus,
        support=args.support,
        eps_den=args.eps_den,
        n_estimators=args.n_estimators,
        device=args.device,
        datasets=args.datasets,
        seeds=args.seeds,
        max_train_rows=args.max_train_rows,
        max_test_rows=args.max_test_rows,
        threads=threads,
        executor=executor.describe(),
        ignore_pretraining_limits=args.ignore_pretraining_limits,
    )
    print(
        f"eval {args.suite}: {len(tasks)} runs, model {model_path.name} "
        f"(sha256 {tasks[0].spec.checkpoint_sha256[:12]}), n_estimators "
        f"{tasks[0].spec.n_estimators}, executor {executor.describe()}, store {store}"
    )
    summary = run_suite(
        tasks,
        store,
        executor=executor,
        retry_failed=args.retry_failed,
        progress=not args.no_progress,
    )
    carriers_written = None
    ckpt = tasks[0].spec.checkpoint_sha256
    if args.carriers or (args.sweep and not carrier_path(store, ckpt).exists()):
        stats = measure_carriers(
            suite=args.suite,
            model_path=model_path,
            n_estimators=tasks[0].spec.n_estimators,
            datasets=args.datasets,
            seeds=args.seeds,
            max_train_rows=args.max_train_rows,
            max_test_rows=args.max_test_rows,
            device=args.device,
            progress=not args.no_progress,
        )
        carriers_written = carrier_path(store, ckpt)
        _write_json(carriers_written, stats)
    record = {
        "command": "tabpfn-retrofit " + " ".join(sys.argv[1:] if argv is None else ["eval", *argv]),
        "suite": args.suite,
        "model": args.model,
        "checkpoint_sha256": ckpt,
        "n_estimators": tasks[0].spec.n_estimators,
        "executor": executor.describe(),
        "threads": threads,
        "planned": summary.planned,
        "computed": summary.computed,
        "skipped": summary.skipped,
        "failed": summary.failed,
        "nonfinite": summary.nonfinite,
        "runs_wall_s": summary.wall_s,
        "carriers": str(carriers_written) if carriers_written else None,
        "started_at": started,
        "finished_at": _utc_now(),
        "wall_s": time.perf_counter() - t0,
        "provenance": _provenance(),
    }
    write_session(store, record)
    print(
        f"done: {summary.computed} computed ({summary.failed} failed, {summary.nonfinite} "
        f"non-finite), {summary.skipped} already stored, {record['wall_s']:.1f} s"
    )
    return 0
