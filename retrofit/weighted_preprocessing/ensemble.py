"""The ensemble's preprocessing fitted with row weights: tabpfn's members, weighted.

tabpfn fits each ensemble member in ``TabPFNEnsemblePreprocessor``: it picks
the member's feature subset (and, if configured, its rows), fits the member's
``PreprocessingPipeline`` on them, fits its target transform (regressor) and
builds its device pipeline (the outlier clipping). Every inference engine
calls ``fit_transform_ensemble_members`` or its iterator, at fit or at
predict. :class:`WeightedEnsemblePreprocessor` is that class with those two
calls weighted: each member's pipeline, target transform and outlier
clipping count train row ``j`` ``w_j`` times, and each member
(:class:`WeightedEnsembleMember`) carries the weights of its train rows for
the model (``retrofit.row_weights``). Everything that reads a row count
reads ``sum w``: the feature budget of the SVD step, the quantile count, the
row sampler. :func:`weighted_ensemble_preprocessor` builds one from the
preprocessor tabpfn built for the estimator: the one entry the estimators use.

Rows subsampled per member (``SUBSAMPLE_SAMPLES``) are drawn from the
weighted multiset: with integer weights tabpfn's own sampler draws from the
rows repeated ``w_j`` times (the same draws as on the repeated table), and a
member's weights count how often each row was drawn. Real weights are refused
there, and so are explicit index lists, tabpfn's GPU preprocessing, an
importance ranking of the features (LightGBM, unweighted), target transforms
sized by the row count (the quantile ones) and any step or transformer with
no weighted fit.

Shape letters: N rows held (weights > 0), M the rows of the repeated table
(``sum w``, integer weights), n a member's rows.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any, Literal

import numpy as np
from sklearn.utils.parallel import Parallel, delayed
from tabpfn.constants import AUTO_FEATURE_SUBSAMPLING_IMPORTANCE_MIN_SAMPLES
from tabpfn.preprocessing.configs import (
    FeatureSubsamplingMethod,
    RegressorEnsembleConfig,
    SampleSubsamplingMethod,
)
from tabpfn.preprocessing.ensemble import TabPFNEnsembleMember, TabPFNEnsemblePreprocessor
from tabpfn.preprocessing.steps.adaptive_quantile_transformer import AdaptiveQuantileTransformer
from tabpfn.preprocessing.torch import create_gpu_preprocessing_pipeline

from retrofit.errors import UnsupportedWeightingError
from retrofit.tabpfn_surface import resolve_importance_top_k, transform_labels_one
from retrofit.weighted_preprocessing.fitting import fitting_with, weight_total
from retrofit.weighted_preprocessing.outliers import weighted_device_pipeline
from retrofit.weighted_preprocessing.rows import positive_row_weights
from retrofit.weighted_preprocessing.steps import weighted_pipeline
from retrofit.weighted_preprocessing.transformers import as_weighted

__all__ = [
    "WeightedEnsembleMember",
    "WeightedEnsemblePreprocessor",
    "weighted_ensemble_preprocessor",
]


@dataclasses.dataclass
class WeightedEnsembleMember(TabPFNEnsembleMember):
    """tabpfn's ensemble member, fitted on weighted rows.

    Attributes:
        row_weights: ``(n,)`` the weight of each of ``X_train``'s rows, what the
            model's forward counts them as (``retrofit.row_weights``).
    """

    row_weights: np.ndarray | None = None


def _contains(transformer: Any, kind: type) -> bool:
    """Whether a tree of transformers holds an instance of ``kind``."""
    if isinstance(transformer, kind):
        return True
    children = getattr(transformer, "steps", None) or getattr(transformer, "transformer_list", None)
    if children is None and hasattr(transformer, "transformers"):
        children = [(name, t) for name, t, _ in transformer.transformers]
    return any(_contains(child, kind) for _, child in children or ())


class WeightedEnsemblePreprocessor(TabPFNEnsemblePreprocessor):
    """tabpfn's ensemble preprocessor whose members are fitted on weighted rows.

    Takes tabpfn's keyword arguments (``n_samples`` may be left out: the
    rows given are ``len(row_weights)``, the count read is ``sum w``) and the
    weights of the rows the engines will hand it as ``X_train``.

    Attributes:
        row_weights: ``(N,)`` the weights, all positive.
        repeated_rows: ``(M,)`` the row of each row of the repeated table when
            rows are subsampled (tabpfn's sampler draws from it, so
            ``subsample_row_indices`` index it and a target-aware correction
            reads ``y[repeated_rows]``); None otherwise.
        member_rows: Per member, ``(rows, weights)``: the rows it is fitted on
            (None: all) and their weights.

    Raises:
        UnsupportedWeightingError: A setting the weights cannot be applied to
            (module docstring), in one line.
    """

    def __init__(self, *, row_weights: np.ndarray, **tabpfn_arguments: Any) -> None:
        w_N = positive_row_weights(row_weights)
        n_rows = len(w_N)
        given = tabpfn_arguments.pop("n_samples", n_rows)
        if given != n_rows:
            raise ValueError(f"n_samples={given} but row_weights covers {n_rows} rows")
        unit = bool(np.all(w_N == 1.0))
        count = weight_total(w_N) if not unit else n_rows
        self.repeated_rows = None
        if not unit:
            _refuse_unweightable(tabpfn_arguments, count)
            if isinstance(tabpfn_arguments.get("subsample_samples"), int | float):
                self.repeated_rows = _repeated_rows(w_N)
                y = tabpfn_arguments.get("y_train")
                if y is not None:
                    tabpfn_arguments["y_train"] = y[self.repeated_rows]
        super().__init__(n_samples=count, **tabpfn_arguments)
        self.row_weights = w_N
        for pipeline in self.pipelines:
            weighted_pipeline(pipeline)
        for config in self.configs:
            _weigh_target_transform(config, unit)
        self.member_rows = self._member_rows()

    def _member_rows(self) -> list[tuple[np.ndarray | None, np.ndarray]]:
        if self.subsample_row_indices is None:
            return [(None, self.row_weights)] * len(self.configs)
        if self.repeated_rows is None:  # all weights 1: tabpfn's own draws
            return [(rows, np.ones(len(rows))) for rows in self.subsample_row_indices]
        members = []
        for drawn_m in self.subsample_row_indices:
            rows_n, counts_n = np.unique(self.repeated_rows[drawn_m], return_counts=True)
            members.append((rows_n, counts_n.astype(np.float64)))
        return members

    def fit_transform_ensemble_members_iterator(
        self,
        X_train: np.ndarray,
        y_train: np.ndarray,
        parallel_mode: Literal["block", "as-ready", "in-order"],
    ) -> Iterator[TabPFNEnsembleMember]:
        """The members, in order, each fitted on its weighted rows (tabpfn's signature)."""
        if len(X_train) != len(self.row_weights):
            raise UnsupportedWeightingError(
                f"row weights: the ensemble was given {len(X_train)} train rows but the "
                f"weights cover {len(self.row_weights)}"
            )
        run = Parallel(
            n_jobs=self.n_preprocessing_jobs,
            prefer="threads",
            return_as="list" if parallel_mode == "block" else "generator",
        )
        yield from run(
            delayed(self._fit_member)(index, X_train, y_train) for index in range(len(self.configs))
        )

    def fit_transform_ensemble_members(
        self, X_train: np.ndarray, y_train: np.ndarray
    ) -> list[TabPFNEnsembleMember]:
        """Every member, fitted (tabpfn's signature)."""
        return list(self.fit_transform_ensemble_members_iterator(X_train, y_train, "block"))

    def _fit_member(self, index: int, X_train: Any, y_train: Any) -> WeightedEnsembleMember:
        """Member ``index`` fitted on its rows, in the calling thread."""
        config, pipeline = self.configs[index], self.pipelines[index]
        rows_n, w_n = self.member_rows[index]
        X_nF = X_train if rows_n is None else X_train[rows_n]
        y_n = np.array(y_train if rows_n is None else y_train[rows_n], copy=True)
        schema = self.feature_schema
        features = self.subsample_feature_indices[index]
        if features is not None:
            X_nF = X_nF[..., features]
            schema = schema.slice_for_indices(features.tolist())
        with fitting_with(w_n):
            fitted = pipeline.fit_transform(X_nF, schema)
            y_n = transform_labels_one(config, y_n)
        device = create_gpu_preprocessing_pipeline(config, keep_fitted_cache=self.keep_fitted_cache)
        return WeightedEnsembleMember(
            config=config,
            cpu_preprocessor=pipeline,
            gpu_preprocessor=weighted_device_pipeline(device, config.outlier_removal_std, w_n),
            X_train=fitted.X,
            y_train=y_n,
            feature_schema=fitted.feature_schema,
            feature_indices=features,
            row_weights=w_n,
        )


def _repeated_rows(w_N: np.ndarray) -> np.ndarray:
    """The row of each row of the repeated table; the weights must be integers."""
    if not np.all(w_N == np.round(w_N)):
        raise UnsupportedWeightingError(
            "row weights: SUBSAMPLE_SAMPLES draws rows from the weighted multiset, which "
            "needs integer weights; round the weights or set SUBSAMPLE_SAMPLES=None"
        )
    return np.repeat(np.arange(len(w_N)), w_N.astype(np.int64))


def _refuse_unweightable(arguments: dict[str, Any], count: int) -> None:
    """Refuses the ensemble settings that row weights cannot be applied to."""
    if arguments.get("enable_gpu_preprocessing"):
        raise UnsupportedWeightingError(
            "row weights: tabpfn's GPU preprocessing has no weighted fit; set "
            "ENABLE_GPU_PREPROCESSING=False"
        )
    if isinstance(arguments.get("subsample_samples"), list):
        raise UnsupportedWeightingError(
            "row weights: SUBSAMPLE_SAMPLES as index lists names rows before the weights "
            "drop any; give a count or a fraction"
        )
    schema, configs = arguments["feature_schema"], arguments["configs"]
    n_features = schema.num_columns
    needs = any(c.preprocess_config.max_features_per_estimator < n_features for c in configs)
    method = FeatureSubsamplingMethod(
        arguments.get("feature_subsampling_method", FeatureSubsamplingMethod.RANDOM)
    )
    if method is FeatureSubsamplingMethod.AUTO:
        auto = needs and count > AUTO_FEATURE_SUBSAMPLING_IMPORTANCE_MIN_SAMPLES
        method = FeatureSubsamplingMethod.GINI_FEATURE_IMPORTANCE if auto else method
    top_k = resolve_importance_top_k(arguments.get("importance_top_k_count", "auto"), n_features)
    if method is FeatureSubsamplingMethod.GINI_FEATURE_IMPORTANCE and needs and top_k < n_features:
        raise UnsupportedWeightingError(
            "row weights: the feature-importance ranking (FEATURE_SUBSAMPLING_METHOD "
            f"{method.value!r}) is fitted unweighted; choose 'balanced'"
        )


def _weigh_target_transform(config: Any, unit: bool) -> None:
    """A regressor member's target transform made weighted in place (its config's)."""
    if not isinstance(config, RegressorEnsembleConfig) or config.target_transform is None:
        return
    if not unit and _contains(config.target_transform, AdaptiveQuantileTransformer):
        raise UnsupportedWeightingError(
            "row weights: a quantile target transform is sized from the row count before "
            "the weights apply; choose another REGRESSION_Y_PREPROCESS_TRANSFORMS"
        )
    config.target_transform = as_weighted(config.target_transform, where="the target transform")


def weighted_ensemble_preprocessor(
    preprocessor: TabPFNEnsemblePreprocessor,
    row_weights: np.ndarray,
    *,
    inference_config: Any,
    task_type: Literal["classifier", "regressor"],
    X_train: np.ndarray,
    y_train: np.ndarray,
) -> WeightedEnsemblePreprocessor:
    """The weighted counterpart of the ensemble preprocessor tabpfn built for a fit.

    The one entry of the estimators: tabpfn's ``fit`` builds its
    ``TabPFNEnsemblePreprocessor`` on the rows held (weights > 0); this
    rebuilds it with the same configs, schema, seed and settings (the
    estimator's ``inference_config_``) over the weighted rows. Its members
    then fit weighted wherever an engine asks for them.

    Args:
        preprocessor: tabpfn's, as ``fit`` built it (``ensemble_preprocessor_``).
        row_weights: ``(N,)`` positive weights of the rows ``fit`` held.
        inference_config: The estimator's ``inference_config_``.
        task_type: ``"classifier"`` or ``"regressor"``.
        X_train: The ``N`` rows ``fit`` cleaned (what the engines get).
        y_train: Their targets as ``fit`` hands them to the engines.

    Raises:
        UnsupportedWeightingError: A setting the weights cannot be applied to.
    """
    config = inference_config
    weighted = WeightedEnsemblePreprocessor(
        row_weights=row_weights,
        configs=preprocessor.configs,
        feature_schema=preprocessor.feature_schema,
        random_state=preprocessor.random_state,
        n_preprocessing_jobs=preprocessor.n_preprocessing_jobs,
        keep_fitted_cache=preprocessor.keep_fitted_cache,
        enable_gpu_preprocessing=preprocessor.enable_gpu_preprocessing,
        feature_subsampling_method=FeatureSubsamplingMethod(config.FEATURE_SUBSAMPLING_METHOD),
        constant_feature_count=config.FEATURE_SUBSAMPLING_CONSTANT_FEATURE_COUNT,
        subsample_samples=config.SUBSAMPLE_SAMPLES,
        sample_subsampling_method=SampleSubsamplingMethod(config.SAMPLE_SUBSAMPLING_METHOD),
        importance_top_k_count=config.FEATURE_SUBSAMPLING_IMPORTANCE_TOP_K_COUNT,
        X_train=X_train,
        y_train=y_train,
        task_type=task_type,
    )
    if not np.array_equal(weighted.pipeline_seeds, preprocessor.pipeline_seeds):
        raise UnsupportedWeightingError(
            "row weights: the ensemble preprocessor could not be rebuilt with its seeds "
            "(a random_state that is not an integer seed)"
        )
    return weighted
