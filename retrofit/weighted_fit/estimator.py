"""The tabpfn ``fit`` with row weights: the hooks that weigh it, on any tabpfn estimator.

A weighted fit is tabpfn's own ``fit`` on the rows of positive weight, with
four of its steps weighted where tabpfn calls them (DESIGN.md section 10):

1. ``_initialize_dataset_preprocessing``: tabpfn's 100-row rule of
   categorical inference counts ``sum w``
   (:func:`~retrofit.weighted_preprocessing.categorical_inference_threshold`);
   the cleaned rows and targets are kept for the steps below;
2. the regressor's ``_build_ensemble_preprocessor_and_executor``: the
   targets are standardised with their weighted mean and standard deviation
   (:func:`~retrofit.weighted_preprocessing.weighted_target_standardisation`,
   plus tabpfn's ``1e-20``), and the bar distribution with them;
3. ``_compute_downsample_correction`` (which both estimators call right after
   tabpfn built its ensemble preprocessor): the preprocessor is replaced by
   the weighted one (:func:`~retrofit.weighted_preprocessing.weighted_ensemble_preprocessor`),
   the classifier's ``class_counts_`` are weighted, and a majority-downsampling
   correction reads the targets of the repeated rows;
4. the inference engine: tabpfn's ``fit`` runs with ``fit_mode="low_memory"``
   (whose engine fits and runs nothing when built), then the engine of the
   estimator's own ``fit_mode`` is built over the weighted preprocessor,
   running every forward under the members' row weights
   (:mod:`retrofit.weighted_fit.engines`).

Everything else is tabpfn's, unchanged: without weights (or with every
weight 1) ``fit`` is tabpfn's ``fit`` itself, the same code path. Refused in
one line (:class:`~retrofit.errors.UnsupportedWeightingError`): an unpatched
model (``mode="none"``: the weights act in the patched blocks), a
``tuning_config`` (its holdout split and refits are unweighted),
``differentiable_input`` and ``fit_mode="batched"`` (fine-tuning); the
weighted preprocessing refuses its own (:mod:`retrofit.weighted_preprocessing`).

:class:`WeightedTabPFNRegressor` and :class:`WeightedTabPFNClassifier` are
plain tabpfn estimators with these hooks and ``fit(X, y, sample_weight=None)``:
the workers of the batched paths. ``OTabPFNRegressor`` and
``OTabPFNClassifier`` mix the same hooks in.

Shape letters: N rows of positive weight.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any, Self

import numpy as np
from tabpfn import TabPFNClassifier, TabPFNRegressor

from retrofit.errors import NotPatchedError, UnsupportedWeightingError
from retrofit.hosts.common.base import patch_config_of
from retrofit.settings import PATCH_MODES
from retrofit.validation import check_sample_weight, rows_of
from retrofit.weighted_fit.engines import weighted_inference_engine
from retrofit.weighted_preprocessing import (
    categorical_inference_threshold,
    drop_zero_weight_rows,
    weighted_class_counts,
    weighted_ensemble_preprocessor,
    weighted_target_standardisation,
)

__all__ = [
    "WeightedClassifierFit",
    "WeightedRegressorFit",
    "WeightedTabPFNClassifier",
    "WeightedTabPFNRegressor",
    "refuse_unpatched",
    "unpatched_refusal",
]

#: Where a fit in progress keeps its weights and what the hooks collect
#: (in ``__dict__``: no parameter, no fitted attribute, never pickled after fit).
_PENDING_ATTR = "_pending_weighted_fit"

#: tabpfn's floor under the regressor's target standard deviation.
_STD_FLOOR = 1e-20


def unpatched_refusal(where: str = "sample_weight") -> UnsupportedWeightingError:
    """The one-line refusal of row weights on an unpatched model (``mode="none"``)."""
    return UnsupportedWeightingError(
        f"{where} needs a patched model: row weights act in the patched blocks, and "
        f"mode='none' is tabpfn's unpatched model; use mode={PATCH_MODES[-1]!r} or "
        f"{PATCH_MODES[0]!r}"
    )


def refuse_unpatched(models: list[Any], where: str = "sample_weight") -> None:
    """Raises :func:`unpatched_refusal` unless every model is patched."""
    for model in models:
        try:
            patch_config_of(model)
        except NotPatchedError:
            raise unpatched_refusal(where) from None


@dataclasses.dataclass
class _PendingFit:
    """A weighted fit in progress: its weights and what tabpfn's steps handed on.

    Attributes:
        w_N: The weights of the rows fitted (all positive, not all 1).
        fit_mode: The estimator's ``fit_mode`` (tabpfn's fit runs as "low_memory").
        X_train: The cleaned rows, as tabpfn hands them to its engine.
        y_train: Their targets as the engine gets them: standardised with the
            weighted moments (regressor) or encoded (classifier).
        y_raw: The regressor's validated targets before standardisation.
        swapped: Whether the weighted ensemble preprocessor replaced tabpfn's.
    """

    w_N: np.ndarray
    fit_mode: str
    X_train: Any = None
    y_train: Any = None
    y_raw: Any = None
    swapped: bool = False


class _WeightedFit:
    """The hooks and the fit path both weighted estimators share (module docstring)."""

    def _fit_rows(self, X: Any, y: Any, w_N: np.ndarray | None) -> Self:
        """The tabpfn ``fit`` with row ``j`` counted ``w_N[j]`` times; validated weights or None.

        None, or weights all 1, is tabpfn's ``fit`` itself; weight-0 rows are
        dropped first (removal).
        """
        tabpfn_fit = self._tabpfn_fit_method()
        if w_N is None:
            return tabpfn_fit(self, X, y)
        X, y, w_N = drop_zero_weight_rows(X, y, w_N)
        if np.all(w_N == 1.0):
            return tabpfn_fit(self, X, y)
        self._refuse_weighted_settings()
        pending = _PendingFit(w_N=w_N, fit_mode=self.fit_mode)
        self.__dict__[_PENDING_ATTR] = pending
        # tabpfn's fit builds a low_memory engine (it fits and runs nothing); the
        # engine of the real fit_mode is built once, weighted, below.
        self.fit_mode = "low_memory"
        try:
            tabpfn_fit(self, X, y)
            if pending.swapped:  # a regressor's constant target needs no engine
                self.executor_ = self._weighted_engine(pending)
        finally:
            self.fit_mode = pending.fit_mode
            self.__dict__.pop(_PENDING_ATTR, None)
        return self

    def _tabpfn_fit_method(self) -> Any:
        """The tabpfn ``fit`` of this estimator's class."""
        return TabPFNClassifier.fit if isinstance(self, TabPFNClassifier) else TabPFNRegressor.fit

    def _refuse_weighted_settings(self) -> None:
        """Refuses, in one line each, the settings a weighted fit cannot honour."""
        if self.tuning_config is not None:
            raise UnsupportedWeightingError(
                "sample_weight: tuning_config calibrates on an unweighted holdout split of the "
                "rows; fit with tuning_config=None"
            )
        if self.differentiable_input:
            raise UnsupportedWeightingError(
                "sample_weight: differentiable_input fits through fit_with_differentiable_input, "
                "which takes no weights"
            )
        if self.fit_mode == "batched":
            raise UnsupportedWeightingError(
                "sample_weight: fit_mode='batched' is tabpfn's fine-tuning mode; use "
                "'fit_preprocessors', 'low_memory' or 'fit_with_cache'"
            )

    def _pending(self) -> _PendingFit | None:
        return self.__dict__.get(_PENDING_ATTR)

    def _initialize_dataset_preprocessing(self, X: Any, y: Any, random_state: Any) -> Any:
        """The tabpfn step, its categorical-inference threshold counting ``sum w`` when weighted."""
        pending = self._pending()
        if pending is None:
            return super()._initialize_dataset_preprocessing(X, y, random_state)
        refuse_unpatched(self.models_)
        config = self.inference_config_
        counted = copy.copy(config)
        counted.MIN_NUMBER_SAMPLES_FOR_CATEGORICAL_INFERENCE = categorical_inference_threshold(
            pending.w_N, config.MIN_NUMBER_SAMPLES_FOR_CATEGORICAL_INFERENCE
        )
        self.inference_config_ = counted
        try:
            result = super()._initialize_dataset_preprocessing(X, y, random_state)
        finally:
            self.inference_config_ = config
        pending.X_train, pending.y_train = result[1], result[2]
        pending.y_raw = result[2]
        return result

    def _swap_in_weighted_preprocessor(self, pending: _PendingFit) -> Any:
        """Replaces tabpfn's ensemble preprocessor by its weighted counterpart; returns it."""
        weighted = weighted_ensemble_preprocessor(
            self.ensemble_preprocessor_,
            pending.w_N,
            inference_config=self.inference_config_,
            task_type=self.estimator_type,
            X_train=pending.X_train,
            y_train=pending.y_train,
        )
        # tabpfn built its preprocessor while fit ran as "low_memory".
        weighted.keep_fitted_cache = pending.fit_mode == "fit_with_cache"
        self.ensemble_preprocessor_ = weighted
        pending.swapped = True
        return weighted

    def _weighted_engine(self, pending: _PendingFit) -> Any:
        """The engine of the estimator's ``fit_mode``, over the weighted members."""
        built = self.executor_  # tabpfn's low_memory engine: its inputs are the engine's
        return weighted_inference_engine(
            fit_mode=pending.fit_mode,
            X_train=built.X_train,
            y_train=built.y_train,
            ensemble_preprocessor=self.ensemble_preprocessor_,
            models=self.models_,
            devices_=self.devices_,
            byte_size=built.dtype_byte_size,
            forced_inference_dtype_=self.forced_inference_dtype_,
            memory_saving_mode=self.memory_saving_mode,
            use_autocast_=self.use_autocast_,
            task_type="multiclass" if isinstance(self, TabPFNClassifier) else "regression",
            inference_mode=True,
            keep_cache_on_device=self.keep_cache_on_device,
            kv_cache_precision=self.kv_cache_precision,
            enable_torch_compile=self.enable_torch_compile,
        )


class WeightedRegressorFit(_WeightedFit):
    """The weighted fit's hooks of a ``TabPFNRegressor`` (mixed in before it)."""

    def _build_ensemble_preprocessor_and_executor(self, *, X: Any, y: Any, **options: Any) -> None:
        """The tabpfn step, on targets standardised with their weighted moments when weighted."""
        pending = self._pending()
        if pending is not None:
            mean, std = weighted_target_standardisation(pending.y_raw, pending.w_N)
            self.y_train_std_ = std + _STD_FLOOR
            self.y_train_mean_ = mean
            y = (np.asarray(pending.y_raw) - self.y_train_mean_) / self.y_train_std_
            self._rebuild_raw_space_bardist()
            pending.y_train = y
        super()._build_ensemble_preprocessor_and_executor(X=X, y=y, **options)

    def _compute_downsample_correction(self, *, y_raw: np.ndarray) -> None:
        """The tabpfn step, after the weighted preprocessor replaced tabpfn's when weighted."""
        pending = self._pending()
        if pending is not None:
            weighted = self._swap_in_weighted_preprocessor(pending)
            if weighted.repeated_rows is not None:
                y_raw = np.asarray(y_raw)[weighted.repeated_rows]
        super()._compute_downsample_correction(y_raw=y_raw)


class WeightedClassifierFit(_WeightedFit):
    """The weighted fit's hooks of a ``TabPFNClassifier`` (mixed in before it)."""

    def _compute_downsample_correction(self, *, y_encoded: np.ndarray) -> None:
        """The tabpfn step, with the weighted preprocessor and class counts when weighted."""
        pending = self._pending()
        if pending is not None:
            weighted = self._swap_in_weighted_preprocessor(pending)
            self.class_counts_ = weighted_class_counts(y_encoded, pending.w_N, self.n_classes_)
            if weighted.repeated_rows is not None:
                y_encoded = np.asarray(y_encoded)[weighted.repeated_rows]
        super()._compute_downsample_correction(y_encoded=y_encoded)


class WeightedTabPFNRegressor(WeightedRegressorFit, TabPFNRegressor):
    """``tabpfn.TabPFNRegressor`` whose ``fit`` takes ``sample_weight`` (a batch's worker).

    Its model must be patched (a patched ``ModelSpecs``); the weights are
    checked as the estimators check them.
    """

    def fit(self, X: Any, y: Any, sample_weight: Any = None) -> Self:
        """The tabpfn ``fit``, row ``j`` counted ``sample_weight[j]`` times (None: tabpfn's)."""
        w_N = None if sample_weight is None else check_sample_weight(sample_weight, rows_of(X))
        return self._fit_rows(X, y, w_N)


class WeightedTabPFNClassifier(WeightedClassifierFit, TabPFNClassifier):
    """``tabpfn.TabPFNClassifier`` whose ``fit`` takes ``sample_weight`` (a batch's worker)."""

    def fit(self, X: Any, y: Any, sample_weight: Any = None) -> Self:
        """The tabpfn ``fit``, row ``j`` counted ``sample_weight[j]`` times (None: tabpfn's)."""
        w_N = None if sample_weight is None else check_sample_weight(sample_weight, rows_of(X))
        return self._fit_rows(X, y, w_N)
