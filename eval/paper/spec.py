"""Run specs and tasks: what one stored run is, and the key that names it.

Protocol (the paper's): on every case (a dataset under split seed ``s``), the
unpatched host (mode ``"none"``) and the retrofits (``"oattention"``,
``"full-o"``) are fitted on the same split, ``train_test_split(test_size=0.25,
random_state=s)``, with the same TabPFN ``random_state=s``, the same
``n_estimators`` and ``inference_precision=torch.float32``; each fit builds its
own model from the checkpoint file.

A run's key is the SHA-256 of its :class:`RunSpec`: the data, the checkpoint,
the settings, the package versions, the source of ``patches`` and
``retrofit`` and the CPU (rows computed on another CPU differ in the last
bits, so they are not reused). Mode ``"none"`` does not depend on
``tau``/``support``/``eps_den``: its key sets them to ``None``, so one
baseline row serves every tau of a sweep, and :func:`baseline_key` finds it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from tabpfn.preprocessing.ensemble import DEFAULT_N_ESTIMATORS

import patches
import retrofit
from eval.paper.datasets import load_dataset, suite_cases
from eval.paper.estimators import check_host_task
from eval.paper.protocol import (
    DEFAULT_EPS_DEN,
    DEFAULT_MODES,
    DEFAULT_SUPPORT,
    SUITE_SOURCE,
)
from eval.provenance import cpu_identity
from retrofit.files import sha256_file
from retrofit.models.checkpoints import load_checkpoint
from retrofit.models.loading import load_host
from retrofit.patcher import resolve_for_model
from retrofit.settings import MODES, RetrofitSettings
from retrofit.versions import package_versions

__all__ = [
    "RunSpec",
    "Task",
    "baseline_key",
    "canonical_json",
    "code_sha256",
    "host_default_tau",
    "make_tasks",
    "model_label",
    "resolve_n_estimators",
    "state_dict_sha256",
]


def code_sha256() -> str:
    """SHA-256 of the source of :mod:`patches` and :mod:`retrofit`, whole.

    Every ``.py`` of both packages (the host's training code lives in
    :mod:`hosttraining`, outside them; the host it builds enters a run key through
    its checkpoint digest). Part of every
    run key, so a change to the operators or the patcher makes stored runs stale
    instead of silently mixing them with new ones.
    """
    digest = hashlib.sha256()
    for package in (patches, retrofit):
        root = Path(package.__file__).parent
        for path in sorted(root.rglob("*.py")):
            digest.update(f"{package.__name__}/{path.relative_to(root).as_posix()}\n".encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


def state_dict_sha256(path: str | Path) -> str:
    """Hash of the tensors tabpfn's loader reads from a checkpoint file.

    Covers every state-dict entry's name, dtype, shape and bytes, in sorted
    name order; header metadata is not part of it. A ``.ckpt`` is read with
    the weights-only unpickler (``retrofit.models.checkpoints``), never tabpfn's
    loader, so a pickle that names code is refused before anything runs it.

    Args:
        path: A ``.safetensors`` or ``.ckpt`` checkpoint.

    Returns:
        Hex SHA-256.

    Raises:
        UnsafeCheckpointError: A ``.ckpt`` pickle names more than tensors and plain values.
        CorruptCheckpointError: The file is not a readable checkpoint.
    """
    state = load_checkpoint(path)["state_dict"]
    digest = hashlib.sha256()
    for name in sorted(state):
        tensor = state[name].detach().cpu().contiguous()
        digest.update(f"{name}|{tensor.dtype}|{tuple(tensor.shape)}\n".encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def resolve_n_estimators(model_path: str | Path) -> int:
    """``n_estimators`` of a checkpoint's inference config (``"auto"``: tabpfn's default).

    Args:
        model_path: Anything ``retrofit.models.loading.load_host`` accepts.

    Returns:
        The ensemble size the suite is run with, fixed and recorded.
    """
    value = load_host(model_path).inference_config.N_ESTIMATORS
    return DEFAULT_N_ESTIMATORS if value == "auto" else int(value)


def canonical_json(obj: Any) -> str:
    """The canonical JSON text a key is hashed from."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=False)


@dataclass(frozen=True)
class RunSpec:
    """The full config of one stored run; its hash is the run's key.

    Attributes:
        suite: A suite of :data:`~eval.paper.protocol.SUITE_SOURCE`.
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
        cpu: The CPU model and torch's CPU capability (``eval.provenance.cpu_identity``).
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
    cpu: str = field(default_factory=cpu_identity)
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
        return hashlib.sha256(canonical_json(self.as_dict()).encode()).hexdigest()


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
        model_label: How rows name the model (:func:`model_label`).
    """

    spec: RunSpec
    model_path: str
    state_hash: str
    threads: int | None = None
    executor: str = "serial"
    ignore_pretraining_limits: bool = False
    model_label: str = ""


def model_label(model: str | Path) -> str:
    """How a stored row names a model, without an absolute path of this machine.

    A name such as ``"embedded"`` or ``"v3"`` is kept; a path becomes relative
    to the working directory when it lies under it, else its file name (the
    row's ``checkpoint_sha256`` identifies the file either way).
    """
    text = str(model)
    path = Path(text).expanduser()
    if not path.exists():
        return text
    try:
        return path.resolve().relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        return path.name


def host_default_tau(model_path: str | Path) -> float:
    """The tau an unset ``--tau`` means for this checkpoint: the host's default.

    The same resolution as the estimator, ``predict``, ``predict-batch`` and
    ``patch`` (:func:`retrofit.patcher.resolve_for_model`): 1.0 for v3 and
    v3.5, 0.1 for v2 and v2.5, scaled by the norm weights for v2.6.

    Args:
        model_path: A resolved checkpoint file.
    """
    return resolve_for_model(load_host(model_path).model, {}).tau


def make_tasks(
    *,
    suite: str,
    model_path: str | Path,
    modes: Sequence[str] = DEFAULT_MODES,
    taus: Sequence[float] | None = None,
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
    label: str | None = None,
) -> list[Task]:
    """Every (case, variant, tau) of a suite as tasks, baselines first per case.

    Args:
        suite: Suite name.
        model_path: A resolved checkpoint file.
        modes: Variants; ``"none"`` runs once per case whatever ``taus``.
        taus: Presence scales of the retrofit variants (None: the host's
            default, :func:`host_default_tau`).
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
        label: How the user named the model (default: ``model_path``); rows
            record :func:`model_label` of it.

    Returns:
        The tasks, dataset-major, then seed, then mode, then tau.

    Raises:
        ValueError: On an unknown suite, mode, dataset or seed, or invalid
            retrofit settings (``retrofit.InvalidPatchConfigError``).
            A classification suite given a checkpoint that is not a classifier.
    """
    if suite not in SUITE_SOURCE:
        raise ValueError(f"unknown suite {suite!r}; valid suites: {', '.join(SUITE_SOURCE)}")
    for mode in modes:
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}; valid modes: {', '.join(MODES)}")
    if n_estimators is not None and (isinstance(n_estimators, bool) or n_estimators < 1):
        # Otherwise every case would be stored as failed, and skipped by later runs.
        raise ValueError(f"n_estimators must be an integer >= 1, got {n_estimators!r}")
    if taus is None:
        taus = [host_default_tau(model_path)]
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
    check_host_task(model_path, suite)
    ckpt_sha = sha256_file(model_path)
    state_hash = state_dict_sha256(model_path)
    n_est = resolve_n_estimators(model_path) if n_estimators is None else int(n_estimators)
    versions = package_versions()
    code = code_sha256()
    tasks: list[Task] = []
    for case in cases:
        data_sha = load_dataset(case.dataset, SUITE_SOURCE[suite]).sha256
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
            Task(
                spec,
                model_path,
                state_hash,
                threads,
                executor,
                ignore_pretraining_limits,
                model_label(label if label is not None else model_path),
            )
            for spec in specs
        )
    return tasks
