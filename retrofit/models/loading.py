"""Loading a TabPFN host: from a ``model_path`` to a fresh in-memory model.

:func:`resolve_checkpoint` turns a ``model_path`` into a checkpoint file;
:func:`load_host` builds a new model object from it through tabpfn's own
loader and wraps it in :class:`tabpfn.ModelSpecs`, which ``TabPFNRegressor``
accepts as ``model_path`` and uses by reference. Every call builds its own
model: tabpfn casts a forced inference dtype into the weights in place, so a
model must never be shared between estimators or runs.

Accepted ``model_path`` values (one resolver each, tried in order):
``"embedded"`` (the shipped host), ``"v2"``, ``"v2.5"``, ``"v2.6"``, ``"v3"``,
``"v3.5"`` or ``"auto"`` (tabpfn's default checkpoints and tabpfn's default
version, see :mod:`retrofit.models.weights`), a saved retrofit directory (see
:mod:`retrofit.models.saved`), or a local ``.safetensors``/``.ckpt`` file.

:func:`resolve_for_tabpfn` translates the estimator's ``model_path`` (any of
the above, or whatever tabpfn itself takes: ``"auto"``, a ``ModelSpecs``, a
list) into the ``model_path`` tabpfn's own loader receives.
"""

from __future__ import annotations

import copy
import dataclasses
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tabpfn import ModelSpecs, model_loading
from tabpfn.inference_config import cpu_sample_limit
from tabpfn.model_loading import ModelSource

from retrofit.errors import (
    CheckpointNotFoundError,
    CorruptCheckpointError,
    InvalidModelPathError,
)
from retrofit.models import saved, weights
from retrofit.models.aliases import alias_list
from retrofit.models.checkpoints import check_checkpoint
from retrofit.models.embedded import embedded_model_path
from retrofit.models.weights import Which
from retrofit.tabpfn_surface import models_may_be_shared

__all__ = [
    "CHECKPOINT_SUFFIXES",
    "ModelPathLike",
    "ResolvedModel",
    "TabPFNModelPath",
    "load_host",
    "resolve_checkpoint",
    "resolve_for_tabpfn",
    "resolve_model",
]

ModelPathLike = str | os.PathLike
CHECKPOINT_SUFFIXES = (".safetensors", ".ckpt")


def _embedded(model_path: ModelPathLike, which: Which = "regressor") -> Path | None:
    """``"embedded"``: the shipped host of the estimator's kind (or its one-line error)."""
    if model_path != "embedded":
        return None
    return embedded_model_path(which)


def _version_alias(model_path: ModelPathLike, which: Which = "regressor") -> Path | None:
    if not weights.is_version_alias(model_path):
        return None
    return weights.default_weights(str(model_path), which=which)


def _saved_directory(model_path: ModelPathLike) -> saved.SavedRetrofit | None:
    if not saved.is_saved_dir(model_path):
        return None
    return saved.load_saved(model_path)


def _local_file(model_path: ModelPathLike) -> Path | None:
    path = Path(model_path).expanduser()
    if path.is_dir():
        raise CheckpointNotFoundError(
            f"model_path {str(model_path)!r} is a directory, not a checkpoint, and not a "
            f"saved retrofit: it has no {saved.MANIFEST_NAME} ({saved.MANIFEST_NAME} is missing)"
        )
    if not path.is_file():
        raise CheckpointNotFoundError(
            f"model_path {str(model_path)!r}: no such file, and not "
            f"{alias_list(embedded=True, auto=True)} or a saved retrofit directory"
        )
    if path.suffix not in CHECKPOINT_SUFFIXES:
        raise CorruptCheckpointError(
            f"model_path {str(path)!r} is not a TabPFN checkpoint "
            f"(expected {' or '.join(CHECKPOINT_SUFFIXES)})"
        )
    return path.resolve()


@dataclasses.dataclass(frozen=True)
class ResolvedModel:
    """A ``model_path`` resolved once (a saved directory's weights are hashed once).

    Attributes:
        label: How the user named the model (``"embedded"``, ``"v3"``, a path).
        checkpoint: An existing checkpoint file.
        saved: The verified saved directory, or None.
    """

    label: str
    checkpoint: Path
    saved: saved.SavedRetrofit | None = None

    @property
    def saved_settings(self) -> dict | None:
        """The saved directory's retrofit settings, None for a plain checkpoint."""
        return None if self.saved is None else dict(self.saved.settings)


_Resolver = Callable[[ModelPathLike], Path | saved.SavedRetrofit | None]


def _named_resolvers(which: Which) -> list[_Resolver]:
    """The resolvers of names (embedded, version alias, saved directory), in order."""
    return [lambda e: _embedded(e, which), lambda e: _version_alias(e, which), _saved_directory]


def _resolvers(which: Which) -> list[_Resolver]:
    """Resolvers in order; each returns a path (or a saved directory), None (not mine) or raises."""
    return [*_named_resolvers(which), _local_file]


def resolve_model(
    model_path: ModelPathLike | ResolvedModel, which: Which = "regressor"
) -> ResolvedModel:
    """Resolve ``model_path`` once: its checkpoint file and saved settings.

    Args:
        model_path: ``"embedded"``, ``"v3"``, ``"v2"``, a saved retrofit
            directory, a checkpoint file, or an already resolved model.
        which: The estimator kind a name (``"embedded"``, a version alias)
            stands for.

    Raises:
        InvalidModelPathError: If ``model_path`` is not a string or path.
        CheckpointNotFoundError: If a local file does not exist.
        CorruptCheckpointError: If a local file is not a checkpoint type.
        EmbeddedCheckpointError: If ``"embedded"`` names a kind not shipped.
    """
    if isinstance(model_path, ResolvedModel):
        return model_path
    if not isinstance(model_path, (str, os.PathLike)):
        raise InvalidModelPathError(
            f"model_path must be a string or path, got {type(model_path).__name__}"
        )
    for resolver in _resolvers(which):
        found = resolver(model_path)
        if isinstance(found, saved.SavedRetrofit):
            return ResolvedModel(str(model_path), found.checkpoint, found)
        if found is not None:
            return ResolvedModel(str(model_path), found)
    raise CheckpointNotFoundError(f"cannot resolve model_path {str(model_path)!r}")  # unreachable


def resolve_checkpoint(
    model_path: ModelPathLike | ResolvedModel, which: Which = "regressor"
) -> Path:
    """The checkpoint file behind ``model_path``.

    Args:
        model_path: ``"embedded"``, ``"v3"``, ``"v2"``, a saved retrofit
            directory or a checkpoint file.
        which: The estimator kind a name stands for (:func:`resolve_model`).

    Returns:
        An existing checkpoint file.

    Raises:
        InvalidModelPathError: If ``model_path`` is not a string or path.
        CheckpointNotFoundError: If a local file does not exist.
        CorruptCheckpointError: If a local file is not a checkpoint type.
    """
    return resolve_model(model_path, which).checkpoint


def load_host(
    model_path: ModelPathLike | ResolvedModel = "embedded", *, which: Which = "regressor"
) -> ModelSpecs:
    """A freshly built host model with its configs, ready for ``TabPFNRegressor`` (or ``which``).

    tabpfn's per-path limit on CPU training rows (``MAX_CPU_SAMPLES``, by
    version: 1,000 before v3, 5,000 from v3), which its loader sets only for
    checkpoints given by path, replaces the checkpoint's own value here too, so
    an in-memory model fits exactly the rows on CPU that the same checkpoint
    given by path would.

    Args:
        model_path: See :func:`resolve_model`.
        which: The estimator kind tabpfn loads the checkpoint for.

    Returns:
        ``ModelSpecs(model, architecture_config, inference_config,
        norm_criterion)`` with a model object no one else holds.

    Raises:
        CheckpointNotFoundError: If the checkpoint does not exist.
        UnsafeCheckpointError: If a ``.ckpt`` pickle holds more than tensors and
            plain values (checked with the weights-only unpickler before tabpfn
            reads the file).
        CorruptCheckpointError: If tabpfn cannot read or build it.
    """
    path = resolve_checkpoint(model_path, which)
    check_checkpoint(path)
    try:
        model, criterion, arch_config, inference_config = model_loading.load_model(
            path=path, estimator_type=which
        )
    except Exception as err:
        first = (str(err).strip().splitlines() or [""])[0][:200]
        raise CorruptCheckpointError(
            f"cannot load TabPFN checkpoint {path}: {type(err).__name__}: {first}"
        ) from err
    if models_may_be_shared():
        # TABPFN_MODEL_CACHE_SIZE shares built models between calls; ours must not be.
        model = copy.deepcopy(model)
    version = model_loading.resolve_model_version(path)
    inference_config = dataclasses.replace(
        inference_config, MAX_CPU_SAMPLES=cpu_sample_limit(version)
    )
    return ModelSpecs(
        model=model,
        architecture_config=arch_config,
        inference_config=inference_config,
        norm_criterion=criterion,
    )


def _tabpfn_file_names() -> frozenset[str]:
    # Every checkpoint file name tabpfn can download (ModelSource.get_* lists them).
    sources = [getattr(ModelSource, n)() for n in dir(ModelSource) if n.startswith("get_")]
    return frozenset(name for source in sources for name in source.filenames)


def _tabpfn_entry(entry: Any, which: Which) -> tuple[Any, saved.SavedRetrofit | None]:
    """One ``model_path`` entry in tabpfn's terms (for a ``which``), and its saved directory."""
    if isinstance(entry, ModelSpecs) or entry is None:
        return entry, None
    if isinstance(entry, ResolvedModel):  # resolved (and hashed) once, at the boundary
        return str(entry.checkpoint), entry.saved
    if entry == "auto":
        # tabpfn's default version, through its own resolver and downloader, with
        # the one-line offline error naming where to place the file.
        return str(weights.default_weights("auto", which=which)), None
    if not isinstance(entry, (str, os.PathLike)):
        raise InvalidModelPathError(
            "model_path must be 'auto', 'embedded', a version alias, a path, a ModelSpecs "
            f"or a list of these; got {type(entry).__name__}"
        )
    for resolver in _named_resolvers(which):  # a local file goes to tabpfn's resolver below
        found = resolver(entry)
        if isinstance(found, saved.SavedRetrofit):
            return str(found.checkpoint), found
        if found is not None:
            return str(found), None
    if Path(entry).expanduser().is_dir():
        _local_file(entry)  # a directory without retrofit.json: raises, naming the file
    where = model_loading.resolve_model_path(entry, which=which)[0][0]
    if where.is_file():
        check_checkpoint(where)  # weights-only, before tabpfn unpickles it
    if where.is_file() or Path(entry).name in _tabpfn_file_names():
        return entry, None  # tabpfn loads it, or downloads one of its own checkpoints
    raise CheckpointNotFoundError(
        f"model_path {str(entry)!r}: no such file, and not {alias_list(embedded=True, auto=True)}, "
        "a saved retrofit directory or one of tabpfn's checkpoint names"
    )


@dataclasses.dataclass(frozen=True)
class TabPFNModelPath:
    """An estimator's ``model_path`` resolved once into what tabpfn's loader takes.

    Attributes:
        value: tabpfn's ``model_path``: ``"auto"``, a checkpoint path, a
            ``ModelSpecs``, or a list of paths or of ``ModelSpecs``.
        saved: The saved retrofit directories among the entries.
        by_reference: Whether tabpfn will use in-memory models by reference
            (``ModelSpecs``); a patch must then go to a copy.
    """

    value: Any
    saved: tuple[saved.SavedRetrofit, ...] = ()
    by_reference: bool = False


def resolve_for_tabpfn(model_path: Any, which: Which = "regressor") -> TabPFNModelPath:
    """Translate an estimator's ``model_path`` into tabpfn's, for a regressor or a classifier.

    ``"embedded"``, ``"v3"``/``"v2"`` and saved directories become their
    checkpoint files; ``"auto"``, checkpoint files, tabpfn's own checkpoint
    names (which tabpfn downloads) and ``ModelSpecs`` pass unchanged. In a list
    each entry is translated; a list mixing ``ModelSpecs`` and files (which
    tabpfn refuses) has its files loaded by :func:`load_host`.

    Args:
        model_path: What ``OTabPFNRegressor(model_path=...)`` (or the
            classifier's) was given.
        which: The estimator's kind: ``"regressor"`` or ``"classifier"``
            (which default checkpoints the aliases and ``"embedded"`` name).

    Returns:
        The translation, with the saved directories it named.

    Raises:
        InvalidModelPathError: An entry is of a type no loader takes.
        CheckpointNotFoundError: A file that does not exist and is not one tabpfn
            downloads.
        SavedModelError: A saved directory fails its check.
        WeightsUnavailableError: ``"v3"``/``"v2"`` weights cannot be had.
        EmbeddedCheckpointError: ``"embedded"`` for a kind this installation does
            not ship, or a shipped file that fails its SHA-256.
    """
    if not isinstance(model_path, list):
        value, found = _tabpfn_entry(model_path, which)
        return TabPFNModelPath(value, (found,) if found else (), isinstance(value, ModelSpecs))
    pairs = [_tabpfn_entry(entry, which) for entry in model_path]
    values = [value for value, _ in pairs]
    by_reference = any(isinstance(value, ModelSpecs) for value in values)
    if by_reference:
        values = [
            v
            if isinstance(v, ModelSpecs)
            else load_host(ResolvedModel(str(v), Path(v)), which=which)
            for v in values
        ]
    return TabPFNModelPath(values, tuple(f for _, f in pairs if f is not None), by_reference)
