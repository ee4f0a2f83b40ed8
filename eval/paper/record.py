"""The store's typed records: one run (:class:`RunRecord`) and one ``eval`` session.

Execution builds a :class:`RunRecord`, the store writes and reads it, and
completeness and the reports read its fields by name; nothing passes a run
around as a dict. A run's file (``runs/<key>.json``) is the record's JSON form,
one flat object in the order of the fields below: the key, the fields of its
:class:`~eval.paper.spec.RunSpec` (each package version as ``<name>_version``),
what it measured and where it ran. A regression run's file holds the
regression metrics alone, a classification run's the classification ones, as
before classification suites existed.

Reading takes every run file the runner has written, the committed stores'
included: a field that older or failed runs lack (a run that failed before its
estimator existed has no resolved dtype) reads as ``None``; a field the record
does not name is kept in ``extra`` and written back. A file without one of the
fields that say which run it is (:data:`REQUIRED_FIELDS`) is not a run record.

Light on purpose (no torch or tabpfn): the reports read the store without the runner.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from eval.paper.protocol import METRICS, SUITE_TASK

__all__ = [
    "REQUIRED_FIELDS",
    "SPEC_FIELDS",
    "CaseVariant",
    "RunContext",
    "RunRecord",
    "SessionRecord",
    "spec_columns",
    "version_pairs",
]

_VERSION = "_version"

SPEC_FIELDS: tuple[str, ...] = (
    "suite",
    "dataset",
    "seed",
    "mode",
    "tau",
    "support",
    "eps_den",
    "n_estimators",
    "checkpoint_sha256",
    "data_sha256",
    "dtype",
    "device",
    "fit_mode",
    "max_train_rows",
    "max_test_rows",
    "code_sha256",
    "cpu",
)
"""The fields of a run's :class:`~eval.paper.spec.RunSpec` that a record holds as they are
(the spec's ``versions`` become ``<name>_version`` fields)."""

REQUIRED_FIELDS: tuple[str, ...] = ("key", "baseline_key", *SPEC_FIELDS, "status")
"""The fields without which a file is not a run record."""


def version_pairs(versions: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """``{distribution: version}`` as ``(name, version)``, named as a record's fields name them."""
    return tuple((name.replace("-", "_"), value) for name, value in versions.items())


def spec_columns(spec: Mapping[str, Any]) -> dict[str, Any]:
    """A run spec's fields (``RunSpec.as_dict()``) as a run file names them.

    The fields of :data:`SPEC_FIELDS` and one ``<name>_version`` per package.
    """
    columns = {name: spec.get(name) for name in SPEC_FIELDS}
    columns.update({f"{n}{_VERSION}": v for n, v in version_pairs(spec.get("versions") or {})})
    return columns


@dataclass(frozen=True)
class CaseVariant:
    """One case (dataset and seed) under one variant (mode, and a retrofit's settings).

    ``tau``, ``support`` and ``eps_den`` are ``None`` for mode ``"none"``.
    """

    dataset: str
    seed: int
    mode: str
    tau: float | None
    support: str | None
    eps_den: float | None

    @property
    def label(self) -> str:
        """``dataset/seed/mode`` and, for a retrofit, its tau (as cases.csv names runs)."""
        tail = "" if self.tau is None else f"/tau={self.tau:g}"
        return f"{self.dataset}/{self.seed}/{self.mode}{tail}"


@dataclass(frozen=True)
class RunContext:
    """What runs must share to be in one table: every key field but the case and the variant."""

    suite: str
    cpu: str
    checkpoint_sha256: str
    code_sha256: str
    n_estimators: int
    dtype: str
    device: str
    fit_mode: str
    max_train_rows: int | None
    max_test_rows: int | None
    versions: tuple[tuple[str, str], ...]
    """Every package version the runs record, sorted by name: a run made after an
    upgrade (of safetensors, say) never joins an older run's table."""

    def fields(self) -> dict[str, Any]:
        """Every field by the name a run file gives it (versions as ``<name>_version``)."""
        named = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        named.pop("versions")
        return {**named, **{f"{n}{_VERSION}": v for n, v in self.versions}}

    def differences(self, other: RunContext) -> dict[str, tuple[Any, Any]]:
        """``{field: (this context's value, other's)}`` for each field in which they differ."""
        mine, theirs = self.fields(), other.fields()
        names = [*mine, *(n for n in theirs if n not in mine)]
        return {n: (mine.get(n), theirs.get(n)) for n in names if mine.get(n) != theirs.get(n)}


@dataclass(frozen=True, kw_only=True)
class RunRecord:
    """One stored run: its key and config, what it measured, and where and when it ran.

    Attributes:
        key: SHA-256 of the run's spec (its file's name).
        baseline_key: Key of the unpatched run of its case (its own for mode ``"none"``).
        suite, dataset, seed, mode, tau, support, eps_den, n_estimators,
        checkpoint_sha256, data_sha256, dtype, device, fit_mode, max_train_rows,
        max_test_rows, code_sha256, cpu: The spec's fields (:class:`~eval.paper.spec.RunSpec`).
        versions: ``(name, version)`` of each package the key names, as written
            (``("scikit_learn", "1.9.1")``: the file's ``scikit_learn_version``).
        model: How the user named the model (``"embedded"``, a relative path).
        state_dict_sha256: Hash of the checkpoint's tensors at the start of the run.
        status: ``"ok"``, ``"failed"`` (stored with its error) or ``"nonfinite"``.
        rmse, mae: A regression run's metrics (``None`` unless ``status`` is ``"ok"``).
        log_loss, accuracy, roc_auc: A classification run's metrics.
        n_train, n_test, n_features: The case's sizes after its row limits.
        nonfinite_predictions: How many predictions were not finite.
        error, traceback: Why the run failed (one line; the last frames).
        fit_s, predict_s: Wall seconds of ``fit`` and of ``predict``.
        threads, executor, ignore_pretraining_limits, hostname, pid: Where and how it ran.
        started_at, finished_at: UTC times, ISO 8601.
        warnings: Each distinct warning of the case, one line each.
        resolved_dtype, autocast, resolved_device: What tabpfn resolved for the fit.
        patch_digest, patch_report: The retrofit's patch report (``None`` unpatched).
        provenance: The machine and packages (``eval.provenance``), as stored.
        extra: Fields of the file that the record does not name, kept as read.
    """

    key: str
    baseline_key: str
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
    dtype: str
    device: str
    fit_mode: str
    max_train_rows: int | None
    max_test_rows: int | None
    code_sha256: str
    cpu: str
    versions: tuple[tuple[str, str], ...] = ()
    model: str | None = None
    state_dict_sha256: str | None = None
    status: str = "failed"
    rmse: float | None = None
    mae: float | None = None
    log_loss: float | None = None
    accuracy: float | None = None
    roc_auc: float | None = None
    n_train: int | None = None
    n_test: int | None = None
    n_features: int | None = None
    nonfinite_predictions: int | None = None
    error: str | None = None
    traceback: str | None = None
    fit_s: float | None = None
    predict_s: float | None = None
    threads: int | None = None
    executor: str | None = None
    ignore_pretraining_limits: bool = False
    hostname: str | None = None
    pid: int | None = None
    started_at: str | None = None
    warnings: tuple[str, ...] = ()
    resolved_dtype: str | None = None
    autocast: bool | None = None
    resolved_device: str | None = None
    patch_digest: str | None = None
    patch_report: Any = None
    finished_at: str | None = None
    provenance: Any = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """Whether the run measured its metrics (status ``"ok"``)."""
        return self.status == "ok"

    @property
    def variant(self) -> CaseVariant:
        """Its case and variant."""
        return CaseVariant(self.dataset, self.seed, self.mode, self.tau, self.support, self.eps_den)

    @property
    def context(self) -> RunContext:
        """What it must share with the other runs of a table."""
        return RunContext(
            suite=self.suite,
            cpu=self.cpu,
            checkpoint_sha256=self.checkpoint_sha256,
            code_sha256=self.code_sha256,
            n_estimators=self.n_estimators,
            dtype=self.dtype,
            device=self.device,
            fit_mode=self.fit_mode,
            max_train_rows=self.max_train_rows,
            max_test_rows=self.max_test_rows,
            versions=tuple(sorted(self.versions)),
        )

    def key_fields(self) -> dict[str, Any]:
        """The fields its key hashes, as a run file names them (versions as ``<name>_version``)."""
        spec = {name: getattr(self, name) for name in SPEC_FIELDS}
        return {**spec, **{f"{n}{_VERSION}": v for n, v in self.versions}}

    def version(self, name: str) -> str | None:
        """The recorded version of package ``name``, as its field names it (``"scikit_learn"``)."""
        return dict(self.versions).get(name)

    def metric(self, name: str) -> float | None:
        """One of its metrics by name (``"rmse"``, ``"log_loss"``...)."""
        if name not in _METRIC_NAMES:
            raise ValueError(f"unknown metric {name!r}; metrics: {', '.join(_METRIC_NAMES)}")
        return getattr(self, name)

    def to_json(self) -> dict[str, Any]:
        """The run file's object: every field in order, versions and ``extra`` flattened."""
        metrics = METRICS.get(SUITE_TASK.get(self.suite, ""), _METRIC_NAMES)
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name == "versions":
                out.update({f"{n}{_VERSION}": v for n, v in value})
            elif f.name == "extra":
                out.update(value)
            elif f.name in _METRIC_NAMES:
                if f.name in metrics:
                    out[f.name] = value
            elif f.name == "warnings":
                out[f.name] = list(value)
            else:
                out[f.name] = value
        return out

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> RunRecord:
        """The record of a run file's object.

        Raises:
            ValueError: If ``obj`` is not an object or lacks a field of
                :data:`REQUIRED_FIELDS`.
        """
        if not isinstance(obj, Mapping):
            raise ValueError(f"a run record is a JSON object, not {type(obj).__name__}")
        lacking = [name for name in REQUIRED_FIELDS if name not in obj]
        if lacking:
            raise ValueError(f"not a run record: it lacks {', '.join(lacking)}")
        named: dict[str, Any] = {}
        versions: list[tuple[str, str]] = []
        extra: dict[str, Any] = {}
        for name, value in obj.items():
            if name in _RECORD_FIELDS:
                named[name] = value
            elif name.endswith(_VERSION):
                versions.append((name.removesuffix(_VERSION), value))
            else:
                extra[name] = value
        named["warnings"] = tuple(named.get("warnings") or ())
        return cls(**named, versions=tuple(versions), extra=extra)


_METRIC_NAMES: tuple[str, ...] = tuple(dict.fromkeys(m for ms in METRICS.values() for m in ms))
_RECORD_FIELDS = frozenset(
    f.name for f in dataclasses.fields(RunRecord) if f.name not in ("versions", "extra")
)


@dataclass(frozen=True, kw_only=True)
class SessionRecord:
    """What one ``eval`` command did (``sessions/<time>.json``).

    Records written before the runs were named (the committed stores') lack
    ``computed_keys`` and ``reused_keys``: ``None`` says "not recorded", never "none".

    Attributes:
        command: The command line.
        suite: Suite name.
        model: How the user named the model.
        checkpoint_sha256: SHA-256 of its checkpoint file.
        n_estimators: Ensemble size.
        host_default_tau: What an unset ``--tau`` means for the checkpoint (the
            report's default table).
        taus: Every tau the eval planned.
        sweep: Whether it ran ``--sweep``.
        executor: The executor's description.
        threads: Torch threads per case (``None``: the process's).
        planned: Runs planned.
        computed: Runs it computed (failed and non-finite ones included).
        skipped: Runs already in the store (from an earlier eval).
        claimed_elsewhere: Runs left to another eval process computing them.
        failed: Computed runs that failed.
        nonfinite: Computed runs with non-finite predictions.
        runs_wall_s: Wall seconds of the runs.
        carriers: The carrier statistics file it wrote, if any.
        started_at: UTC start, ISO 8601.
        finished_at: UTC end, ISO 8601.
        wall_s: Wall seconds of the command.
        provenance: The machine, packages and git state.
        reused_committed: Runs copied from the committed store (``--reuse-committed``).
        reused_from: The committed store they were copied from.
        computed_keys: The keys of the runs it computed.
        reused_keys: The keys of the runs it copied from ``reused_from``.
        extra: Fields of the file that the record does not name, kept as read.
    """

    command: str | None = None
    suite: str
    model: str | None = None
    checkpoint_sha256: str
    n_estimators: int | None = None
    host_default_tau: float | None = None
    taus: tuple[float, ...] = ()
    sweep: bool = False
    executor: str | None = None
    threads: int | None = None
    planned: int | None = None
    computed: int | None = None
    skipped: int | None = None
    claimed_elsewhere: int | None = None
    failed: int | None = None
    nonfinite: int | None = None
    runs_wall_s: float | None = None
    carriers: str | None = None
    started_at: str | None = None
    finished_at: str | None = None
    wall_s: float | None = None
    provenance: Any = None
    reused_committed: int = 0
    reused_from: str | None = None
    computed_keys: tuple[str, ...] | None = None
    reused_keys: tuple[str, ...] | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def names_its_runs(self) -> bool:
        """Whether it recorded the keys of the runs it computed and reused."""
        return self.computed_keys is not None

    def to_json(self) -> dict[str, Any]:
        """The session file's object."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name == "extra":
                out.update(value)
            else:
                out[f.name] = list(value) if isinstance(value, tuple) else value
        return out

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> SessionRecord:
        """The record of a session file's object.

        Raises:
            ValueError: If ``obj`` is not an object naming its suite and checkpoint.
        """
        if not isinstance(obj, Mapping) or not {"suite", "checkpoint_sha256"} <= set(obj):
            raise ValueError("not a session record: it lacks suite or checkpoint_sha256")
        named = {k: v for k, v in obj.items() if k in _SESSION_FIELDS}
        for name in ("taus", "computed_keys", "reused_keys"):
            if named.get(name) is not None:
                named[name] = tuple(named[name])
        named["taus"] = named.get("taus") or ()
        extra = {k: v for k, v in obj.items() if k not in _SESSION_FIELDS}
        return cls(**named, extra=extra)


_SESSION_FIELDS = frozenset(f.name for f in dataclasses.fields(SessionRecord)) - {"extra"}
