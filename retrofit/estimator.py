"""``OTabPFNRegressor``: ``tabpfn.TabPFNRegressor`` with the zero vector as a true NULL state.

The estimator *is* a ``TabPFNRegressor`` (a subclass): every constructor
parameter, method, fitted attribute, input and error is tabpfn's, plus four
retrofit settings (``mode``, ``tau``, ``support``, ``eps_den``). Only model
loading differs: tabpfn loads the model(s) as usual, then each fresh model is
patched in place (:func:`retrofit.patch`); ``mode="none"`` patches nothing and
is tabpfn itself.

Two private tabpfn methods are overridden, both here and nowhere else
(``tests/retrofit/test_tabpfn_private_api.py`` fails when tabpfn changes either):

* ``_initialize_model_variables``, where every fit (and
  ``get_inference_config``) loads the models: tabpfn is given the translated
  ``model_path`` (:func:`retrofit.models.loading.resolve_for_tabpfn`) and the models
  it loaded are patched before anything runs them.
* ``_get_tuning_regressor``, which builds the holdout regressors of
  ``tuning_config`` as ``TabPFNRegressor(**self.get_params())``: here they
  are of this class, so they load and patch the same way.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from os import PathLike
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import torch
from sklearn.base import clone
from tabpfn import ModelSpecs, TabPFNRegressor

from retrofit.batching.predict import check_batch_lists, is_ragged, predict_batched
from retrofit.errors import SettingsConflictError
from retrofit.models.loading import ResolvedModel, resolve_for_tabpfn
from retrofit.models.patched_host import PatchedHostCache
from retrofit.models.saved import check_patch_digest
from retrofit.patcher import PatchReport, patch, resolve_for_model
from retrofit.settings import SETTING_NAMES, RetrofitSettings, check_given
from retrofit.tabpfn_surface import models_may_be_shared
from retrofit.validation import check_numeric_target

if TYPE_CHECKING:
    from tabpfn.constants import MemorySavingMode
    from tabpfn.inference_config import InferenceConfig
    from tabpfn.inference_tuning import RegressorEvalMetrics, RegressorTuningConfig
    from tabpfn.utils import DevicesSpecification

__all__ = ["ModelPath", "OTabPFNRegressor"]

#: Where an estimator keeps its patched host between fits (not a fitted attribute:
#: no trailing underscore; left out of pickles and copies, never cloned).
_HOSTS_ATTR = "_patched_hosts"

#: What ``model_path`` takes: tabpfn's kinds plus "embedded", the aliases, saved
#: directories and a model resolved once (:func:`retrofit.resolve_model`).
ModelPath = (
    str | PathLike | ModelSpecs | ResolvedModel | list[str | PathLike | ModelSpecs | ResolvedModel]
)


class OTabPFNRegressor(TabPFNRegressor):
    """TabPFN regression with the zero vector as a true NULL state.

    Every argument but the first four is ``tabpfn.TabPFNRegressor``'s, with its
    default and meaning, except ``model_path``'s default (``"embedded"``, which
    works offline; ``"auto"`` is tabpfn's default model).

    Args:
        mode: ``"none"`` (tabpfn's unpatched model), ``"oattention"`` or
            ``"full-o"``. None: the saved directory's, else ``"full-o"``.
        tau: Presence temperature ``> 0``. None: saved, else the host class's
            default (``retrofit.settings.DEFAULT_TAU_BY_HOST``; 1.0 for v3).
        support: ``n_eff`` of the learned length scaling, ``"count"`` or
            ``"mass"``. None: saved, else ``"count"``.
        eps_den: OAttention denominator floor ``>= 0``. None: saved, else 1e-6.
        model_path: ``"embedded"`` (the shipped host), ``"auto"`` (tabpfn's
            default model), ``"v3"``/``"v2"``, a saved retrofit directory, a
            checkpoint file, a ``tabpfn.ModelSpecs`` (patched as a copy; the
            given model is left as it is), a :class:`~retrofit.ResolvedModel`
            (resolved once, so a saved directory is not hashed again), or a
            list of these (each model patched). A saved directory's settings
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
        model_path: ModelPath = "embedded",
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

    @property
    def patch_report_(self) -> PatchReport | None:
        """The patch report of the single model; None for ``mode="none"``.

        Raises:
            AttributeError: Before the model is loaded.
            ValueError: With several models (use ``patch_reports_``), as
                tabpfn's ``model_`` does.
        """
        reports = self.__dict__.get("patch_reports_")
        if reports is None:
            raise AttributeError("patch_report_ is set when the model is loaded (in fit)")
        if len(self.models_) > 1:
            raise ValueError("several models are in use; read patch_reports_ instead")
        return reports[0] if reports else None

    def _saved_settings(self, saved_settings: list[dict]) -> dict | None:
        """The one set of settings the saved directories in ``model_path`` carry, if any."""
        distinct = {tuple(sorted(s.items())) for s in saved_settings}
        if len(distinct) > 1:
            raise SettingsConflictError(
                "the saved directories in model_path were retrofitted with different "
                f"settings: {'; '.join(str(dict(s)) for s in sorted(distinct))}"
            )
        return saved_settings[0] if saved_settings else None

    def fit(self, X: Any, y: Any) -> OTabPFNRegressor:
        """``TabPFNRegressor.fit``, refusing a target that is not numbers first.

        Numbers written as text are numbers, in a list or numpy string array too
        (:func:`retrofit.validation.check_numeric_target`).

        Raises:
            InvalidInputError: On a target that is not numbers ("y must be numeric").
        """
        return super().fit(X, check_numeric_target(y))

    def _initialize_model_variables(self) -> int:
        """Loads the models as tabpfn does, from the translated ``model_path``, and patches them.

        A patched host is loaded, verified and patched once per model file and
        settings and kept between fits (:mod:`retrofit.models.patched_host`);
        ``mode="none"``, in-memory models and files tabpfn has yet to download
        load at every fit, as in tabpfn.
        """
        requested = {name: getattr(self, name) for name in SETTING_NAMES}
        check_given(requested)  # a bad setting fails before anything is loaded
        resolved = resolve_for_tabpfn(self.model_path)
        saved = self._saved_settings([dict(s.settings) for s in resolved.saved])
        label = self.model_path
        if isinstance(label, ResolvedModel):
            label = label.label
        where = f"saved model {label}"
        hosts = self.__dict__.setdefault(_HOSTS_ATTR, PatchedHostCache())
        host = hosts.host_for(
            resolved, requested, saved, estimator_type=self.estimator_type, where=where
        )
        requested_path = self.model_path
        if host is None:
            self.model_path = resolved.value
        else:
            self.model_path = host.model_path(as_list=isinstance(resolved.value, list))
        try:
            byte_size = super()._initialize_model_variables()
        finally:
            self.model_path = requested_path
        if host is not None:
            self.models_ = host.models_for_fit(self.devices_, self.forced_inference_dtype_)
            settings, reports, digests = list(host.settings), list(host.reports), host.digests
        else:
            settings, reports = self._patch_loaded(requested, saved, where, resolved.by_reference)
            digests = tuple(report.digest() for report in reports)
        for found in resolved.saved:
            check_patch_digest(found, digests or (None,))
        self.settings_ = settings[0].to_dict()
        self.patch_reports_ = reports
        return byte_size

    def _patch_loaded(
        self, requested: dict, saved: dict | None, where: str, by_reference: bool
    ) -> tuple[list[RetrofitSettings], list[PatchReport]]:
        """Resolves the settings of the models tabpfn just loaded, and patches them."""
        # One resolution per model: an unset tau is each host class's default.
        settings = [
            resolve_for_model(model, requested, saved, where=where) for model in self.models_
        ]
        if settings[0].mode == "none":
            return settings, []
        # Built models are shared when tabpfn's model cache is on, and ModelSpecs
        # models are the caller's: the patch goes to a copy then.
        if by_reference or models_may_be_shared():
            self.models_ = [copy.deepcopy(model) for model in self.models_]
        reports = [
            patch(model, **config.to_dict())
            for model, config in zip(self.models_, settings, strict=True)
        ]
        return settings, reports

    def __getstate__(self) -> dict[str, Any]:
        """The pickled state: sklearn's, without the patched host kept between fits."""
        state = super().__getstate__()
        return {name: value for name, value in state.items() if name != _HOSTS_ATTR}

    def predict_batched(
        self,
        X_train_list: list[Any],
        y_train_list: list[Any],
        X_test_list: list[Any],
        *,
        output_type: str = "mean",
        quantiles: list[float] | None = None,
    ) -> list[Any]:
        """``TabPFNRegressor.predict_batched``, for datasets of different shapes too.

        Same-shape input is tabpfn's own ``predict_batched``, in every mode. Ragged
        input on a patched host runs each dataset's stages before ICL as
        ``predict`` does and its ICL stage in zero-padded, length-bucketed forwards,
        which the retrofit makes exact (:func:`retrofit.batching.predict.predict_batched`,
        which also reports the padding); with ``mode="none"`` it keeps tabpfn's
        error. Same-shape input in ``inference_precision=torch.float64``, which
        tabpfn's fused forward refuses, takes the padded path too on a patched
        host. Like tabpfn's, every call loads the model from the current
        parameters (``set_params`` after ``fit`` counts), and ``self`` is left
        unchanged.

        Raises:
            BatchInputError: Malformed lists or datasets (the message names the index).
        """
        lengths = {len(X_train_list), len(y_train_list), len(X_test_list)}
        if lengths == {0} or len(lengths) > 1:
            # A BatchInputError (a ValueError) in tabpfn's wording, with the lengths.
            check_batch_lists(X_train_list, y_train_list, X_test_list)
        if not is_ragged(X_train_list, X_test_list) and self.inference_precision != torch.float64:
            # tabpfn's own method, its checks and errors included.
            return super().predict_batched(
                X_train_list,
                y_train_list,
                X_test_list,
                output_type=output_type,
                quantiles=quantiles,
            )
        check_batch_lists(X_train_list, y_train_list, X_test_list)
        return predict_batched(
            self.batched_host(),
            X_train_list,
            y_train_list,
            X_test_list,
            output_type=output_type,
            quantiles=quantiles,
        ).results

    def batched_host(self) -> TabPFNRegressor:
        """A plain ``TabPFNRegressor`` over a model loaded and patched from the current parameters.

        The model is loaded on a clone, as tabpfn's own ``predict_batched`` fits
        a clone: parameters changed with ``set_params`` after ``fit`` apply, and
        ``self`` is left unchanged.
        """
        source = clone(self)
        source._initialize_model_variables()
        names = TabPFNRegressor._get_param_names()
        params = {k: v for k, v in self.get_params(deep=False).items() if k in names}
        specs = [
            ModelSpecs(
                model=model,
                architecture_config=config,
                inference_config=source.inference_config_,
                norm_criterion=source.znorm_space_bardist_,
            )
            for model, config in zip(source.models_, source.configs_, strict=True)
        ]
        params["model_path"] = specs[0] if len(specs) == 1 else specs
        return TabPFNRegressor(**params)

    def _get_tuning_regressor(self, **overwrite_kwargs: Any) -> OTabPFNRegressor:
        """The holdout regressor tabpfn builds for ``tuning_config``, as one of this class."""
        # tabpfn builds it from get_params(), which here holds the four retrofit
        # settings that TabPFNRegressor does not take: let tabpfn build it from a
        # TabPFNRegressor view of this estimator, then add them back.
        view = copy.copy(self)
        view.__class__ = TabPFNRegressor
        plain = TabPFNRegressor._get_tuning_regressor(view, **overwrite_kwargs)
        settings = {name: getattr(self, name) for name in SETTING_NAMES}
        return type(self)(**plain.get_params(deep=False), **settings)
