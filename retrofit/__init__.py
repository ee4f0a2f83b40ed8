"""Retrofit a frozen pretrained TabPFN model so the zero vector is a true NULL.

Public API: :func:`patch` / :func:`unpatch` (in place, one patch table per
host architecture), :class:`PatchReport`, the scikit-learn estimators
:class:`OTabPFNRegressor` and :class:`OTabPFNClassifier`, model loading
(:func:`resolve_model`, :func:`load_host`), :func:`embedded_model_path`,
:func:`row_presence` (train rows of a patched forward marked absent),
:func:`row_weights` (train rows of a patched forward counted ``w_j`` times each),
:func:`cross_val_predict` (out-of-fold predictions, the folds in one ragged
batch; the feature preprocessing fitted once on all rows by default, or per
fold), the regressor's jackknife+/CV+/split-conformal
:func:`prediction_intervals` and :func:`bootstrap_predict` (bootstrap
replicates as weighted contexts of one ragged batch).
"""

from __future__ import annotations

import importlib
from typing import Any

from retrofit import errors
from retrofit.errors import *  # noqa: F403 -- every error is public at the top level

# Public names and the module that defines each. They are imported on first
# use (PEP 562), so that ``import retrofit.cli.commands`` or ``retrofit.settings`` (and
# so ``tabpfn-retrofit --help``) does not import tabpfn, sklearn or pandas.
_EXPORTS: dict[str, str] = {
    "DEFAULT_SETTINGS": "retrofit.settings",
    "DEFAULT_TAU_BY_HOST": "retrofit.settings",
    "MODES": "retrofit.settings",
    "PATCH_MODES": "retrofit.settings",
    "SUPPORTS": "retrofit.settings",
    "PatchConfig": "retrofit.settings",
    "RetrofitSettings": "retrofit.settings",
    "OTabPFNRegressor": "retrofit.regressor",
    "OTabPFNClassifier": "retrofit.classifier",
    "ResolvedModel": "retrofit.models.loading",
    "load_host": "retrofit.models.loading",
    "resolve_model": "retrofit.models.loading",
    "PatchReport": "retrofit.patcher",
    "ReplacedModule": "retrofit.hosts.common.base",
    "is_patched": "retrofit.hosts.common.base",
    "row_presence": "retrofit.hosts.common.row_presence",
    "row_weights": "retrofit.hosts.common.row_weights",
    "patch": "retrofit.patcher",
    "unpatch": "retrofit.patcher",
    "save_patched": "retrofit.models.saved.save",
    "embedded_model_path": "retrofit.models.embedded",
    "PredictionIntervals": "retrofit.leave_out.intervals",
    "prediction_intervals": "retrofit.leave_out.estimator_intervals",
    "cross_val_predict": "retrofit.leave_out.cross_val",
    "bootstrap_predict": "retrofit.leave_out.bootstrap",
}

__all__ = [*errors.__all__, *sorted(_EXPORTS)]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'retrofit' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
