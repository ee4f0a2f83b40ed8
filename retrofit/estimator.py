"""``OTabPFNRegressor``: a scikit-learn regressor over a retrofitted TabPFN.

``fit`` loads a fresh host model (:func:`retrofit.loading.load_host`), patches
it in place (:func:`retrofit.patch`; ``mode="none"`` leaves it unpatched but
takes the same code path) and hands it by reference to an inner
``tabpfn.TabPFNRegressor`` through ``tabpfn.ModelSpecs``. Every ``fit`` builds
its own model object, so estimators and refits never share weights.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from sklearn.base import BaseEstimator, RegressorMixin, clone
from sklearn.utils.validation import check_is_fitted, validate_data
from tabpfn import TabPFNRegressor

from retrofit.batched import check_batch_lists, predict_batched
from retrofit.loading import load_host, resolve_model
from retrofit.patcher import PatchReport, patch
from retrofit.settings import SETTING_NAMES, resolve_settings

__all__ = ["OTabPFNRegressor"]


class OTabPFNRegressor(RegressorMixin, BaseEstimator):
    """TabPFN regression with the zero vector as a true NULL state.

    Args:
        mode: ``"none"`` (the unpatched host, same code path), ``"oattention"``
            or ``"full-o"``. None: the saved directory's, else ``"full-o"``.
        tau: Presence temperature ``> 0``. None: saved, else 1.0.
        support: ``n_eff`` of the learned length scaling, ``"count"`` or
            ``"mass"``. None: saved, else ``"count"``.
        eps_den: OAttention denominator floor ``>= 0``. None: saved, else 1e-6.
        model_path: ``"embedded"`` (the shipped host), ``"v3"``/``"v2"``, a
            saved retrofit directory, or a checkpoint file.
        n_estimators: Forward passes per prediction (tabpfn's ``"auto"``: the
            checkpoint's inference config).
        device: Passed to ``TabPFNRegressor`` (``"auto"``, ``"cpu"``, ...).
        random_state: Passed to ``TabPFNRegressor``.
        fit_mode: ``"fit_preprocessors"``, ``"low_memory"``, ``"fit_with_cache"``
            or ``"batched"``; passed through.
        inference_precision: ``"auto"``, ``"autocast"`` or a ``torch.dtype``.
        memory_saving_mode: Passed through (chunked in-place evaluation).
        ignore_pretraining_limits: Passed through.
        kv_cache_precision: Storage of the ``fit_with_cache`` KV cache (None:
            tabpfn's default, int8 for v3).

    Attributes:
        regressor_: The fitted inner ``tabpfn.TabPFNRegressor``.
        model_: The (patched) host model it uses.
        patch_report_: The :class:`~retrofit.PatchReport`, None for ``"none"``.
        settings_: The resolved ``mode``, ``tau``, ``support``, ``eps_den``.
        n_features_in_: Number of features seen in ``fit``.
    """

    def __init__(
        self,
        mode: str | None = None,
        tau: float | None = None,
        support: str | None = None,
        eps_den: float | None = None,
        model_path: str = "embedded",
        n_estimators: int | str = "auto",
        device: str = "auto",
        random_state: int | None = 0,
        fit_mode: str = "fit_preprocessors",
        inference_precision: torch.dtype | str = "auto",
        memory_saving_mode: bool | str | float = "auto",
        ignore_pretraining_limits: bool = False,
        kv_cache_precision: str | None = None,
    ) -> None:
        self.mode = mode
        self.tau = tau
        self.support = support
        self.eps_den = eps_den
        self.model_path = model_path
        self.n_estimators = n_estimators
        self.device = device
        self.random_state = random_state
        self.fit_mode = fit_mode
        self.inference_precision = inference_precision
        self.memory_saving_mode = memory_saving_mode
        self.ignore_pretraining_limits = ignore_pretraining_limits
        self.kv_cache_precision = kv_cache_precision

    def __sklearn_tags__(self):
        """TabPFN handles missing feature values itself."""
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = True
        return tags

    def fit(self, X: Any, y: Any) -> OTabPFNRegressor:
        """Loads a fresh host, patches it and fits the inner TabPFN regressor.

        Args:
            X: Features ``(n_samples, n_features)``; NaN allowed.
            y: Finite targets ``(n_samples,)``.

        Returns:
            self.

        Raises:
            InvalidPatchConfigError: On an unknown mode or support, or a bad tau/eps_den.
            ValueError: On NaN/inf targets or malformed input.
            retrofit.loading.CheckpointNotFoundError: If the checkpoint is missing.
            retrofit.loading.CorruptCheckpointError: If it cannot be loaded.
            retrofit.UnsupportedArchitectureError: If the host has no patch table.
        """
        model = resolve_model(self.model_path)
        settings = resolve_settings(
            {name: getattr(self, name) for name in SETTING_NAMES},
            model.saved_settings,
            where=f"saved model {self.model_path}",
        )
        X, y = validate_data(
            self,
            X,
            y,
            dtype=np.float64,
            ensure_all_finite="allow-nan",
            ensure_min_samples=2,
            y_numeric=True,
        )
        specs = load_host(model)
        report: PatchReport | None = None
        if settings.mode != "none":
            report = patch(specs.model, **settings.to_dict())
        regressor = TabPFNRegressor(
            model_path=specs,
            n_estimators=self.n_estimators,
            device=self.device,
            random_state=self.random_state,
            fit_mode=self.fit_mode,
            inference_precision=self.inference_precision,
            memory_saving_mode=self.memory_saving_mode,
            ignore_pretraining_limits=self.ignore_pretraining_limits,
            kv_cache_precision=self.kv_cache_precision,
        )
        regressor.fit(X, y)
        self.regressor_ = regressor
        self.model_ = specs.model
        self.patch_report_ = report
        self.settings_ = settings.to_dict()
        return self

    def predict(self, X: Any) -> np.ndarray:
        """Mean predictions ``(n_samples,)``.

        Raises:
            sklearn.exceptions.NotFittedError: Before ``fit``.
            ValueError: If ``X`` has a different number of features than in ``fit``.
        """
        check_is_fitted(self, "regressor_")
        X = validate_data(self, X, reset=False, dtype=np.float64, ensure_all_finite="allow-nan")
        return np.asarray(self.regressor_.predict(X), dtype=np.float64)

    def predict_batched(
        self,
        X_train_list: list[Any],
        y_train_list: list[Any],
        X_test_list: list[Any],
        *,
        output_type: str = "mean",
        quantiles: list[float] | None = None,
    ) -> list[Any]:
        """Predictions for many datasets (tabpfn's ``predict_batched``), ragged ones too.

        Same signature and return as ``TabPFNRegressor.predict_batched``; see
        :func:`retrofit.batched.predict_batched` (which also reports the padding).
        ``self`` is left unchanged; unfitted, a clone fitted on dataset 0 loads the host.
        """
        check_batch_lists(X_train_list, y_train_list, X_test_list)
        fitted = (
            self
            if hasattr(self, "regressor_")
            else clone(self).fit(X_train_list[0], y_train_list[0])
        )
        return predict_batched(
            fitted.regressor_,
            X_train_list,
            y_train_list,
            X_test_list,
            output_type=output_type,
            quantiles=quantiles,
        ).results
