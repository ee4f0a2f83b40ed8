"""``OTabPFNRegressor``: ``tabpfn.TabPFNRegressor`` with the zero vector as a true NULL state.

The estimator *is* a ``TabPFNRegressor`` (a subclass): every constructor
parameter, method, fitted attribute, input and error is tabpfn's, plus four
retrofit settings (``mode``, ``tau``, ``support``, ``eps_den``). Only model
loading differs: tabpfn loads the model(s) as usual, then each fresh model is
patched in place (:func:`retrofit.patch`); ``mode="none"`` patches nothing and
is tabpfn itself.

Two private tabpfn methods are overridden (``tests/retrofit/test_tabpfn_private_api.py``
fails when tabpfn changes either), both shared with ``OTabPFNClassifier`` in
:mod:`retrofit.estimator_base`:

* ``_initialize_model_variables``, where every fit (and
  ``get_inference_config``) loads the models: tabpfn is given the translated
  ``model_path`` (:func:`retrofit.models.loading.resolve_model`) and the models
  it loaded are patched before anything runs them.
* ``_get_tuning_regressor``, which builds the holdout regressors of
  ``tuning_config`` as ``TabPFNRegressor(**self.get_params())``: here they
  are of this class, so they load and patch the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import torch
from tabpfn import TabPFNRegressor

from retrofit.batching.dispatch import (
    check_batch_lists,
    check_batch_weights,
    needs_padding,
    tabpfn_batched,
)
from retrofit.batching.regression import predict_batched
from retrofit.estimator_base import ModelPath, RetrofitEstimatorMixin
from retrofit.validation import check_numeric_target
from retrofit.weighted_fit import WeightedRegressorFit, unpatched_refusal

if TYPE_CHECKING:
    from tabpfn.constants import MemorySavingMode
    from tabpfn.inference_config import InferenceConfig
    from tabpfn.inference_tuning import RegressorEvalMetrics, RegressorTuningConfig
    from tabpfn.utils import DevicesSpecification

__all__ = ["ModelPath", "OTabPFNRegressor"]


class OTabPFNRegressor(RetrofitEstimatorMixin, WeightedRegressorFit, TabPFNRegressor):
    """TabPFN regression with the zero vector as a true NULL state.

    Every argument but the first four is ``tabpfn.TabPFNRegressor``'s, with its
    default and meaning: ``model_path`` defaults to tabpfn's ``"auto"`` (tabpfn's
    default model, downloaded once); ``"embedded"`` names the small stand-in
    shipped with this package, which runs offline.

    Args:
        mode: ``"none"`` (tabpfn's unpatched model), ``"oattention"`` or
            ``"full-o"``. None: the saved directory's, else ``"full-o"``.
        tau: Presence temperature ``> 0``. None: saved, else the host class's
            default (``retrofit.settings.DEFAULT_TAU_BY_HOST``; 1.0 for v3).
        support: ``n_eff`` of the learned length scaling, ``"count"`` or
            ``"mass"``. None: saved, else ``"count"``.
        eps_den: OAttention denominator floor ``>= 0``. None: saved, else 1e-6.
        model_path: ``"auto"`` (the default: tabpfn's default model, as
            ``TabPFNRegressor()`` loads it), ``"embedded"`` (the small shipped
            stand-in, offline), a version alias ``"v2"`` ... ``"v3.5"``, a
            saved retrofit directory, a checkpoint file, a ``tabpfn.ModelSpecs``
            (patched as a copy; the given model is left as it is), a
            :class:`~retrofit.ResolvedModel` (resolved once, so a saved
            directory is not hashed again), or a list of these (each model
            patched). A saved directory's settings
            are the defaults of ``mode``, ``tau``, ``support`` and ``eps_den``.
        n_estimators: See ``tabpfn.TabPFNRegressor``.
        auto_scale_n_estimators: See ``tabpfn.TabPFNRegressor``.
        categorical_features_indices: See ``tabpfn.TabPFNRegressor``.
        softmax_temperature: See ``tabpfn.TabPFNRegressor``.
        average_before_softmax: See ``tabpfn.TabPFNRegressor``.
        device: See ``tabpfn.TabPFNRegressor``.
        ignore_pretraining_limits: See ``tabpfn.TabPFNRegressor``.
        inference_precision: See ``tabpfn.TabPFNRegressor``.
        fit_mode: See ``tabpfn.TabPFNRegressor``.
        memory_saving_mode: See ``tabpfn.TabPFNRegressor``.
        enable_torch_compile: See ``tabpfn.TabPFNRegressor``.
        keep_cache_on_device: See ``tabpfn.TabPFNRegressor``.
        kv_cache_precision: See ``tabpfn.TabPFNRegressor``.
        random_state: See ``tabpfn.TabPFNRegressor``.
        n_jobs: Deprecated in tabpfn; see ``tabpfn.TabPFNRegressor``.
        n_preprocessing_jobs: See ``tabpfn.TabPFNRegressor``.
        inference_config: See ``tabpfn.TabPFNRegressor``.
        differentiable_input: See ``tabpfn.TabPFNRegressor``.
        eval_metric: See ``tabpfn.TabPFNRegressor``.
        tuning_config: See ``tabpfn.TabPFNRegressor`` (its holdout regressors
            are patched too).
        show_progress_bar: See ``tabpfn.TabPFNRegressor``.

    Attributes:
        settings_: The resolved ``mode``, ``tau``, ``support``, ``eps_den`` (of
            the first model; with several, each model's tau is in ``patch_reports_``).
        patch_reports_: One :class:`~retrofit.PatchReport` per model in
            ``models_``; empty for ``mode="none"``.
        patch_report_: The report of the single model (None for ``"none"``).
        models_: tabpfn's fitted attribute: the (patched) models in use; every
            other fitted attribute is tabpfn's too.
    """

    tabpfn_class = TabPFNRegressor

    def __init__(
        self,
        *,
        mode: str | None = None,
        tau: float | None = None,
        support: str | None = None,
        eps_den: float | None = None,
        n_estimators: int | Literal["auto"] = "auto",
        auto_scale_n_estimators: bool = True,
        categorical_features_indices: Sequence[int] | None = None,
        softmax_temperature: float | Literal["auto"] = "auto",
        average_before_softmax: bool = False,
        model_path: ModelPath = "auto",
        device: DevicesSpecification = "auto",
        ignore_pretraining_limits: bool = False,
        inference_precision: torch.dtype | Literal["autocast", "auto"] = "auto",
        fit_mode: Literal[
            "low_memory", "fit_preprocessors", "fit_with_cache", "batched"
        ] = "fit_preprocessors",
        memory_saving_mode: MemorySavingMode = "auto",
        enable_torch_compile: bool = False,
        keep_cache_on_device: bool = True,
        kv_cache_precision: Literal["auto", "int8", "fp8", "adaptive"] | None = None,
        random_state: int | np.random.RandomState | np.random.Generator | None = 0,
        n_jobs: int | None = None,
        n_preprocessing_jobs: int = 1,
        inference_config: dict | InferenceConfig | None = None,
        differentiable_input: bool = False,
        eval_metric: str | RegressorEvalMetrics | None = None,
        tuning_config: dict | RegressorTuningConfig | None = None,
        show_progress_bar: bool = False,
    ) -> None:
        super().__init__(
            n_estimators=n_estimators,
            auto_scale_n_estimators=auto_scale_n_estimators,
            categorical_features_indices=categorical_features_indices,
            softmax_temperature=softmax_temperature,
            average_before_softmax=average_before_softmax,
            model_path=model_path,
            device=device,
            ignore_pretraining_limits=ignore_pretraining_limits,
            inference_precision=inference_precision,
            fit_mode=fit_mode,
            memory_saving_mode=memory_saving_mode,
            enable_torch_compile=enable_torch_compile,
            keep_cache_on_device=keep_cache_on_device,
            kv_cache_precision=kv_cache_precision,
            random_state=random_state,
            n_jobs=n_jobs,
            n_preprocessing_jobs=n_preprocessing_jobs,
            inference_config=inference_config,
            differentiable_input=differentiable_input,
            eval_metric=eval_metric,
            tuning_config=tuning_config,
            show_progress_bar=show_progress_bar,
        )
        self.mode = mode
        self.tau = tau
        self.support = support
        self.eps_den = eps_den

    def fit(self, X: Any, y: Any, sample_weight: Any = None) -> OTabPFNRegressor:
        """``TabPFNRegressor.fit``, each row counted ``sample_weight`` times.

        A target that is not numbers is refused first; numbers written as text
        are numbers, in a list or numpy string array too
        (:func:`retrofit.validation.check_numeric_target`).

        ``sample_weight`` (None, a number, or ``(N,)`` finite weights ``>= 0``,
        not all 0) are frequencies: weight ``k`` is the row given ``k`` times,
        0 is the row removed, and scaling every weight by ``c`` is ``c``
        copies of the data (docs/weights.md). None, or every weight 1, is
        tabpfn's ``fit``, the same code path. With ``mode="none"`` weights are
        refused (they act in the patched blocks).

        Raises:
            InvalidInputError: On a target that is not numbers ("y must be numeric").
            InvalidSampleWeightError: Malformed weights.
            UnsupportedWeightingError: Weights with ``mode="none"`` or a setting
                they cannot be applied to.
        """
        return super().fit(X, check_numeric_target(y), sample_weight)

    def predict_batched(
        self,
        X_train_list: list[Any],
        y_train_list: list[Any],
        X_test_list: list[Any],
        *,
        output_type: str = "mean",
        quantiles: list[float] | None = None,
        sample_weight: list[Any] | None = None,
    ) -> list[Any]:
        """``TabPFNRegressor.predict_batched``, for datasets of different shapes too.

        Same-shape input is tabpfn's own ``predict_batched``, in every mode. Ragged
        input on a patched host runs each dataset's stages before ICL as
        ``predict`` does and its ICL stage in zero-padded, length-bucketed forwards,
        which the retrofit makes exact (:func:`retrofit.batching.regression.predict_batched`,
        which also reports the padding); with ``mode="none"`` it keeps tabpfn's
        error. Same-shape input in ``inference_precision=torch.float64``, which
        tabpfn's fused forward refuses, takes the padded path too on a patched
        host (:func:`retrofit.batching.dispatch.needs_padding` is the rule). Like
        tabpfn's, every call loads the model from the current parameters
        (``set_params`` after ``fit`` counts), and ``self`` is left unchanged.

        ``sample_weight``: None, or one entry per dataset, None or the weights
        of its train rows as ``fit`` takes them: each dataset's result is then
        what ``fit(X, y, sample_weight=w).predict`` gives, on the padded path
        (a patched mode).

        Raises:
            BatchInputError: Malformed lists, datasets or weights (the message
                names the index).
            UnsupportedWeightingError: Weights with ``mode="none"``.
        """
        # Malformed lists and weights are refused before the model is loaded.
        y_train_list = check_batch_lists(X_train_list, y_train_list, X_test_list)
        weights = check_batch_weights(sample_weight, X_train_list)
        if weights is not None and self.mode == "none":
            raise unpatched_refusal()
        if weights is not None or needs_padding(self, X_train_list, y_train_list, X_test_list):
            return predict_batched(
                self.batched_host(),
                X_train_list,
                y_train_list,
                X_test_list,
                output_type=output_type,
                quantiles=quantiles,
                sample_weight=weights,
            ).results
        # tabpfn's own method on self (a subclass's overrides apply), its errors
        # naming the dataset where one fails on its own.
        return tabpfn_batched(
            lambda: TabPFNRegressor.predict_batched(
                self,
                X_train_list,
                y_train_list,
                X_test_list,
                output_type=output_type,
                quantiles=quantiles,
            ),
            self.batched_host,
            X_train_list,
            y_train_list,
            X_test_list,
        )

    def _get_tuning_regressor(self, **overwrite_kwargs: Any) -> OTabPFNRegressor:
        """The holdout regressor tabpfn builds for ``tuning_config``, as one of this class."""
        return self._tuning_estimator(TabPFNRegressor._get_tuning_regressor, **overwrite_kwargs)
