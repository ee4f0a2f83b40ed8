"""Loading a TabPFN host: from a ``model_path`` to a fresh in-memory model.

:func:`resolve_checkpoint` turns a ``model_path`` into a checkpoint file;
:func:`load_host` builds a new model object from it through tabpfn's own
loader and wraps it in :class:`tabpfn.ModelSpecs`, which ``TabPFNRegressor``
accepts as ``model_path`` and uses by reference. Every call builds its own
model: tabpfn casts a forced inference dtype into the weights in place, so a
model must never be shared between estimators or runs.

Accepted ``model_path`` values (one resolver each, tried in order):
``"embedded"`` (the shipped host), ``"v3"``/``"v2"`` (tabpfn's default
checkpoints, see :mod:`retrofit.weights`), a saved retrofit directory (see
:mod:`retrofit.saved`), or a local ``.safetensors``/``.ckpt`` file.
"""

from __future__ import annotations

import copy
import dataclasses
import os
from collections.abc import Callable
from pathlib import Path

from tabpfn import ModelSpecs, model_loading
from tabpfn.inference_config import cpu_sample_limit

from retrofit.patcher import RetrofitError

__all__ = [
    "CHECKPOINT_SUFFIXES",
    "CheckpointNotFound",
    "CorruptCheckpoint",
    "ModelPathLike",
    "load_host",
    "resolve_checkpoint",
]

ModelPathLike = str | os.PathLike
CHECKPOINT_SUFFIXES = (".safetensors", ".ckpt")


class CheckpointNotFound(RetrofitError, FileNotFoundError):  # noqa: N818
    """The checkpoint a ``model_path`` names does not exist."""


class CorruptCheckpoint(RetrofitError, ValueError):  # noqa: N818
    """The checkpoint exists but tabpfn cannot build a model from it."""


def _embedded(model_path: ModelPathLike) -> Path | None:
    if model_path != "embedded":
        return None
    from retrofit.embedded import embedded_model_path

    return embedded_model_path()


def _version_alias(model_path: ModelPathLike) -> Path | None:
    from retrofit import weights

    if not weights.is_version_alias(model_path):
        return None
    return weights.default_weights(str(model_path))


def _saved_directory(model_path: ModelPathLike) -> Path | None:
    from retrofit import saved

    if not saved.is_saved_dir(model_path):
        return None
    return saved.load_saved(model_path).checkpoint


def _local_file(model_path: ModelPathLike) -> Path | None:
    path = Path(model_path).expanduser()
    if path.is_dir():
        raise CheckpointNotFound(f"model_path {str(model_path)!r} is a directory, not a checkpoint")
    if not path.is_file():
        raise CheckpointNotFound(
            f"model_path {str(model_path)!r}: no such file, and not 'embedded', 'v3', 'v2' "
            "or a saved retrofit directory"
        )
    if path.suffix not in CHECKPOINT_SUFFIXES:
        raise CorruptCheckpoint(
            f"model_path {str(path)!r} is not a TabPFN checkpoint "
            f"(expected {' or '.join(CHECKPOINT_SUFFIXES)})"
        )
    return path.resolve()


#: Resolvers in order; each returns a path, None (not mine) or raises.
RESOLVERS: list[Callable[[ModelPathLike], Path | None]] = [
    _embedded,
    _version_alias,
    _saved_directory,
    _local_file,
]


def resolve_checkpoint(model_path: ModelPathLike) -> Path:
    """The checkpoint file behind ``model_path``.

    Args:
        model_path: ``"embedded"``, ``"v3"``, ``"v2"``, a saved retrofit
            directory or a checkpoint file.

    Returns:
        An existing checkpoint file.

    Raises:
        TypeError: If ``model_path`` is not a string or path.
        CheckpointNotFound: If a local file does not exist.
        CorruptCheckpoint: If a local file is not a checkpoint type.
    """
    if not isinstance(model_path, (str, os.PathLike)):
        raise TypeError(f"model_path must be a string or path, got {type(model_path).__name__}")
    for resolver in RESOLVERS:
        path = resolver(model_path)
        if path is not None:
            return path
    raise CheckpointNotFound(f"cannot resolve model_path {str(model_path)!r}")  # unreachable


def load_host(model_path: ModelPathLike = "embedded") -> ModelSpecs:
    """A freshly built host model with its configs, ready for ``TabPFNRegressor``.

    tabpfn's per-path limit on CPU training rows (``MAX_CPU_SAMPLES``), which
    its loader sets only for checkpoints given by path, is applied here too,
    so an in-memory model fits as many rows on CPU as the same checkpoint
    given by path would.

    Args:
        model_path: See :func:`resolve_checkpoint`.

    Returns:
        ``ModelSpecs(model, architecture_config, inference_config,
        norm_criterion)`` with a model object no one else holds.

    Raises:
        CheckpointNotFound: If the checkpoint does not exist.
        CorruptCheckpoint: If tabpfn cannot read or build it.
    """
    path = resolve_checkpoint(model_path)
    try:
        model, criterion, arch_config, inference_config = model_loading.load_model(
            path=path, estimator_type="regressor"
        )
    except Exception as err:
        first = (str(err).strip().splitlines() or [""])[0][:200]
        raise CorruptCheckpoint(
            f"cannot load TabPFN checkpoint {path}: {type(err).__name__}: {first}"
        ) from err
    if model_loading._get_built_model_cache_size() > 0:
        # TABPFN_MODEL_CACHE_SIZE shares built models between calls; ours must not be.
        model = copy.deepcopy(model)
    version = model_loading.resolve_model_version(path)
    limit = max(inference_config.MAX_CPU_SAMPLES, cpu_sample_limit(version))
    inference_config = dataclasses.replace(inference_config, MAX_CPU_SAMPLES=limit)
    return ModelSpecs(
        model=model,
        architecture_config=arch_config,
        inference_config=inference_config,
        norm_criterion=criterion,
    )
