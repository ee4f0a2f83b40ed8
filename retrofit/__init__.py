"""Retrofit a frozen pretrained TabPFN regressor so the zero vector is a true NULL.

Public API: :func:`patch` / :func:`unpatch` (in place, one patch table per
host architecture), :class:`PatchReport`, the scikit-learn estimator
:class:`OTabPFNRegressor`, model loading (:func:`resolve_checkpoint`,
:func:`load_host`) and :func:`embedded_model_path`.
"""

from __future__ import annotations

from retrofit import errors
from retrofit.embedded import embedded_model_path
from retrofit.errors import *  # noqa: F403 -- every error is public at the top level
from retrofit.estimator import OTabPFNRegressor
from retrofit.loading import ResolvedModel, load_host, resolve_checkpoint, resolve_model
from retrofit.patcher import PatchReport, ReplacedModule, is_patched, patch, unpatch
from retrofit.saving import save_patched
from retrofit.settings import (
    DEFAULT_SETTINGS,
    DEFAULT_TAU_BY_HOST,
    MODES,
    PATCH_MODES,
    SUPPORTS,
    PatchConfig,
    RetrofitSettings,
)

__all__ = [
    *errors.__all__,
    "DEFAULT_SETTINGS",
    "DEFAULT_TAU_BY_HOST",
    "MODES",
    "PATCH_MODES",
    "SUPPORTS",
    "OTabPFNRegressor",
    "PatchConfig",
    "PatchReport",
    "ReplacedModule",
    "ResolvedModel",
    "RetrofitSettings",
    "embedded_model_path",
    "is_patched",
    "load_host",
    "patch",
    "resolve_checkpoint",
    "resolve_model",
    "save_patched",
    "unpatch",
]
