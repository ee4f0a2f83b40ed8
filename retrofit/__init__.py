"""Retrofit a frozen pretrained TabPFN regressor so the zero vector is a true NULL.

Public API: :func:`patch` / :func:`unpatch` (in place, one patch table per
host architecture), :class:`PatchReport`, the scikit-learn estimator
:class:`OTabPFNRegressor`, model loading (:func:`resolve_checkpoint`,
:func:`load_host`) and :func:`embedded_model_path`.
"""

from __future__ import annotations

from pathlib import Path

from retrofit.estimator import OTabPFNRegressor
from retrofit.loading import CheckpointNotFound, CorruptCheckpoint, load_host, resolve_checkpoint
from retrofit.patcher import (
    AlreadyPatched,
    InvalidPatchConfig,
    NothingMatched,
    NotPatched,
    PatchConfig,
    PatchReport,
    ReplacedModule,
    RetrofitError,
    UnsupportedArchitecture,
    is_patched,
    patch,
    unpatch,
)

__all__ = [
    "AlreadyPatched",
    "CheckpointNotFound",
    "CorruptCheckpoint",
    "InvalidPatchConfig",
    "NotPatched",
    "NothingMatched",
    "OTabPFNRegressor",
    "PatchConfig",
    "PatchReport",
    "ReplacedModule",
    "RetrofitError",
    "UnsupportedArchitecture",
    "embedded_model_path",
    "is_patched",
    "load_host",
    "patch",
    "resolve_checkpoint",
    "unpatch",
]


def embedded_model_path() -> Path:
    """Path of the shipped embedded v3 host checkpoint.

    Imported lazily from :mod:`retrofit.embedded`, so this package imports
    before the checkpoint ships.
    """
    from retrofit.embedded import embedded_model_path as _embedded_model_path

    return _embedded_model_path()
