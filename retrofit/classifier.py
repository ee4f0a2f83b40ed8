"""``OTabPFNClassifier``: ``tabpfn.TabPFNClassifier`` with the zero vector as a true NULL state.

The estimator *is* a ``TabPFNClassifier`` (a subclass), as ``OTabPFNRegressor``
is a ``TabPFNRegressor``: every constructor parameter, method (``predict``,
``predict_proba``, ``predict_logits``, ``predict_raw_logits``,
``predict_proba_batched``, ...), fitted attribute, input and error is tabpfn's,
plus the four retrofit settings. Model loading and patching are the
regressor's, shared in :mod:`retrofit.estimator_base`; ``mode="none"`` patches
nothing and is tabpfn itself.

Two private tabpfn methods are overridden (pinned in
``tests/retrofit/test_tabpfn_private_api.py``): ``_initialize_model_variables``
(the shared loader) and ``_get_tuning_classifier``, which builds the holdout
classifiers of ``tuning_config``: here they are of this class, so they load
and patch the same way.

``model_path`` defaults to tabpfn's ``"auto"``, as the regressor's does:
tabpfn's default classifier (v3.5 unless ``TABPFN_MODEL_VERSION`` says
otherwise), downloaded once; offline, without the file, it fails with one
:class:`~retrofit.WeightsUnavailableError` saying how to get it and that
``"embedded"`` runs offline. ``"embedded"`` names the package's own small
classifier stand-in, checked against its SHA-256
(``retrofit/models/embedded/CLASSIFIER_MODEL_CARD.md`` says where it stands; an
installation without it refuses ``"embedded"`` with one
:class:`~retrofit.EmbeddedCheckpointError` naming the choices).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import torch
from tabpfn import TabPFNClassifier

from retrofit.batching.classification import predict_batched_labels, predict_proba_batched
from retrofit.batching.dispatch import (
    check_batch_lists,
    check_batch_weights,
    first_other_class_set,
    needs_padding,
    tabpfn_batched,
)
from retrofit.errors import BatchInputError, InvalidSampleWeightError
from retrofit.estimator_base import ModelPath, RetrofitEstimatorMixin
from retrofit.weighted_fit import WeightedClassifierFit, class_row_weights, unpatched_refusal

if TYPE_CHECKING:
    from tabpfn.constants import MemorySavingMode
    from tabpfn.inference_config import InferenceConfig
    from tabpfn.inference_tuning import ClassifierEvalMetrics, ClassifierTuningConfig
    from tabpfn.utils import DevicesSpecification

__all__ = ["OTabPFNClassifier"]


class OTabPFNClassifier(RetrofitEstimatorMixin, WeightedClassifierFit, TabPFNClassifier):
    """TabPFN classification with the zero vector as a true NULL state.

    Every argument but the first four is ``tabpfn.TabPFNClassifier``'s, with
    its default and meaning: ``model_path`` defaults to tabpfn's ``"auto"``
    (tabpfn's default classifier, downloaded once); ``"embedded"`` names the
    small stand-in shipped with this package, which runs offline.

    Args:
        mode: ``"none"`` (tabpfn's unpatched model), ``"oattention"`` or
            ``"full-o"``. None: the saved directory's, else ``"full-o"``.
        tau: Presence temperature ``> 0``. None: saved, else the host class's
            default (``retrofit.settings.DEFAULT_TAU_BY_HOST``; 1.0 for v3).
        support: ``n_eff`` of the learned length scalings (ICL blocks and the
            v3/v3.5 many-class decoder), ``"count"`` or ``"mass"``. None:
            saved, else ``"count"``.
        eps_den: OAttention denominator floor ``>= 0``. None: saved, else 1e-6.
        model_path: ``"auto"`` (the default: tabpfn's default classifier),
            ``"embedded"`` (the small shipped classifier stand-in, offline,
            verified against its SHA-256), a version alias ``"v2"`` ...
            ``"v3.5"`` (tabpfn's default classifier of that version), a
            classifier checkpoint file, a saved retrofit directory of a
            classifier, a ``tabpfn.ModelSpecs`` (patched as a copy), a
            :class:`~retrofit.ResolvedModel`, or a list of these.
        n_estimators: See ``tabpfn.TabPFNClassifier``.
        auto_scale_n_estimators: See ``tabpfn.TabPFNClassifier``.
        categorical_features_indices: See ``tabpfn.TabPFNClassifier``.
        softmax_temperature: See ``tabpfn.TabPFNClassifier``.
        balance_probabilities: See ``tabpfn.TabPFNClassifier``.
        average_before_softmax: See ``tabpfn.TabPFNClassifier``.
        device: See ``tabpfn.TabPFNClassifier``.
        ignore_pretraining_limits: See ``tabpfn.TabPFNClassifier``.
        inference_precision: See ``tabpfn.TabPFNClassifier``.
        fit_mode: See ``tabpfn.TabPFNClassifier``.
        memory_saving_mode: See ``tabpfn.TabPFNClassifier``.
        enable_torch_compile: See ``tabpfn.TabPFNClassifier``.
        keep_cache_on_device: See ``tabpfn.TabPFNClassifier``.
        kv_cache_precision: See ``tabpfn.TabPFNClassifier``.
        random_state: See ``tabpfn.TabPFNClassifier``.
        n_jobs: Deprecated in tabpfn; see ``tabpfn.TabPFNClassifier``.
        n_preprocessing_jobs: See ``tabpfn.TabPFNClassifier``.
        inference_config: See ``tabpfn.TabPFNClassifier``.
        differentiable_input: See ``tabpfn.TabPFNClassifier``.
        eval_metric: See ``tabpfn.TabPFNClassifier``.
        tuning_config: See ``tabpfn.TabPFNClassifier`` (its holdout
            classifiers are patched too).
        show_progress_bar: See ``tabpfn.TabPFNClassifier``.
        class_weight: scikit-learn's: None (every class weighs 1),
            ``"balanced"`` (class ``c`` weighs ``n / (n_classes * n_c)``,
            counted with the sample weights) or a dict ``{label: weight}``
            (labels not named weigh 1); it multiplies ``fit``'s
            ``sample_weight`` (:mod:`retrofit.weighted_fit.class_weights`).
            Needs a patched mode, as ``sample_weight`` does.

    Attributes:
        settings_: The resolved ``mode``, ``tau``, ``support``, ``eps_den`` (of
            the first model; with several, each model's tau is in ``patch_reports_``).
        patch_reports_: One :class:`~retrofit.PatchReport` per model in
            ``models_``; empty for ``mode="none"``.
        patch_report_: The report of the single model (None for ``"none"``).
        models_: tabpfn's fitted attribute: the (patched) models in use; every
            other fitted attribute is tabpfn's too.
    """

    tabpfn_class = TabPFNClassifier

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
        balance_probabilities: bool = False,
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
        eval_metric: str | ClassifierEvalMetrics | None = None,
        tuning_config: dict | ClassifierTuningConfig | None = None,
        show_progress_bar: bool = False,
        class_weight: dict | str | None = None,
    ) -> None:
        super().__init__(
            n_estimators=n_estimators,
            auto_scale_n_estimators=auto_scale_n_estimators,
            categorical_features_indices=categorical_features_indices,
            softmax_temperature=softmax_temperature,
            balance_probabilities=balance_probabilities,
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
        self.class_weight = class_weight

    def fit(self, X: Any, y: Any, sample_weight: Any = None) -> OTabPFNClassifier:
        """``TabPFNClassifier.fit``, each row counted ``sample_weight`` times its class weight.

        ``sample_weight`` (None, a number, or ``(N,)`` finite weights ``>= 0``,
        not all 0) are frequencies: weight ``k`` is the row given ``k`` times,
        0 is the row removed (a class left with no weight is no class of the
        fit), and scaling every weight by ``c`` is ``c`` copies of the data
        (docs/weights.md). ``class_weight`` multiplies them. None (or every
        weight 1) and ``class_weight=None`` is tabpfn's ``fit``, the same code
        path. With ``mode="none"`` weights are refused.

        Raises:
            InvalidSampleWeightError: Malformed weights or ``class_weight``.
            UnsupportedWeightingError: Weights with ``mode="none"`` or a setting
                they cannot be applied to.
        """
        return super().fit(X, y, sample_weight)

    def _row_weights_for_fit(self, y: Any, w_N: Any) -> Any:
        """The sample weights times each row's ``class_weight``."""
        return class_row_weights(self.class_weight, y, w_N)

    def predict_proba_batched(
        self,
        X_train_list: list[Any],
        y_train_list: list[Any],
        X_test_list: list[Any],
        sample_weight: list[Any] | None = None,
    ) -> np.ndarray | list[np.ndarray]:
        """``TabPFNClassifier.predict_proba_batched``, for datasets of other shapes and classes too.

        Same-shape input of one class set is tabpfn's own method, in every
        mode. Ragged input, and same-shape input whose class sets differ
        (other classes, or integer labels beside text ones), on a patched host
        of any class run each dataset's stages before ICL as ``predict_proba``
        does and its ICL stage in zero-padded, length-bucketed forwards, exact
        by the retrofit; each dataset is scored over its own classes
        (:mod:`retrofit.batching.classification` says which limit still binds). With
        ``mode="none"`` ragged input keeps tabpfn's error, and differing class
        sets are refused naming the dataset. Same-shape input in
        ``inference_precision=torch.float64``, which tabpfn's fused forward
        refuses, takes the padded path too on a patched host
        (:func:`retrofit.batching.dispatch.needs_padding` is the rule). ``self``
        is left unchanged. ``sample_weight``: None, or per dataset None or the
        weights of its train rows as ``fit`` takes them, times ``class_weight``
        on the dataset's labels: each dataset's result is what ``fit(X, y,
        sample_weight=w).predict_proba`` gives, on the padded path.

        Returns:
            tabpfn's ``(n_datasets, n_test, n_classes)`` array when every
            dataset has the same test rows and classes; otherwise a list with
            ``predict_proba``'s ``(n_test, n_classes)`` array per dataset, its
            columns the dataset's ``classes_``.

        Raises:
            BatchInputError: Malformed lists, datasets or weights, a missing
                label, or more classes than the model scores (the message
                names the index).
            UnsupportedWeightingError: Weights with ``mode="none"``.
        """
        # Malformed lists and missing labels are refused before the model is loaded.
        check_batch_lists(X_train_list, y_train_list, X_test_list, numeric=False)
        weights = self._batch_row_weights(X_train_list, y_train_list, sample_weight)
        if weights is None and not needs_padding(self, X_train_list, y_train_list, X_test_list):
            # tabpfn's own method on self (a subclass's overrides apply), its
            # errors naming the dataset where one fails on its own.
            return tabpfn_batched(
                lambda: TabPFNClassifier.predict_proba_batched(
                    self, X_train_list, y_train_list, X_test_list
                ),
                self.batched_host,
                X_train_list,
                y_train_list,
                X_test_list,
            )
        results = predict_proba_batched(
            self.batched_host(), X_train_list, y_train_list, X_test_list, sample_weight=weights
        ).results
        if len({r.shape for r in results}) == 1 and first_other_class_set(y_train_list) is None:
            return np.stack(results)
        return results

    def predict_log_proba(self, X: Any) -> np.ndarray:
        """The log of :meth:`predict_proba`, as scikit-learn's classifiers give it.

        tabpfn's classifier has none; scikit-learn's
        ``cross_val_predict(method="predict_log_proba")`` and log-loss
        scorers call it. ``np.exp`` of it gives ``predict_proba`` back within
        one rounding of the dtype; a probability of exactly 0 gives ``-inf``.

        Args:
            X: The rows to predict, as for ``predict_proba``.

        Returns:
            ``(n_samples, n_classes)`` log-probabilities, columns ``classes_``.
        """
        proba = self.predict_proba(X)
        with np.errstate(divide="ignore"):  # log(0) is -inf, as scikit-learn's classifiers give
            return np.log(proba)

    def predict_batched(
        self,
        X_train_list: list[Any],
        y_train_list: list[Any],
        X_test_list: list[Any],
        sample_weight: list[Any] | None = None,
    ) -> list[np.ndarray]:
        """The labels ``predict`` gives each dataset, for many datasets at once.

        tabpfn's classifier has no ``predict_batched``; this one takes the path
        :meth:`predict_proba_batched` takes (tabpfn's for same-shape input of
        one class set, the null-padded one for ragged input or differing class
        sets on a patched host) and returns, per
        dataset, the labels of its most probable classes
        (:func:`retrofit.batching.classification.predict_batched_labels`);
        ``sample_weight`` as :meth:`predict_proba_batched` takes it.

        Raises:
            BatchInputError: Malformed lists, datasets or weights (the message
                names the index).
        """
        check_batch_lists(X_train_list, y_train_list, X_test_list, numeric=False)
        weights = self._batch_row_weights(X_train_list, y_train_list, sample_weight)
        return predict_batched_labels(
            self.batched_host(), X_train_list, y_train_list, X_test_list, sample_weight=weights
        ).results

    def _batch_row_weights(
        self, X_train_list: list[Any], y_train_list: list[Any], sample_weight: Any
    ) -> list[Any] | None:
        """Each dataset's checked sample weights times its ``class_weight``; None for none."""
        weights = check_batch_weights(sample_weight, X_train_list)
        if self.class_weight is not None:
            weights = weights or [None] * len(X_train_list)
            try:
                weights = [
                    class_row_weights(self.class_weight, y, w)
                    for y, w in zip(y_train_list, weights, strict=True)
                ]
            except InvalidSampleWeightError as err:
                raise BatchInputError(str(err)) from None
        if weights is not None and self.mode == "none":
            raise unpatched_refusal()
        return weights

    def _get_tuning_classifier(self, **overwrite_kwargs: Any) -> OTabPFNClassifier:
        """The holdout classifier tabpfn builds for ``tuning_config``, as one of this class."""
        return self._tuning_estimator(TabPFNClassifier._get_tuning_classifier, **overwrite_kwargs)
