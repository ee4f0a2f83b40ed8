"""tabpfn's preprocessing steps with their fits weighted, and the pipeline of one member.

:func:`weighted_pipeline` turns the steps of a member's unfitted
``PreprocessingPipeline`` into weighted ones in place: each fit then counts
row ``j`` ``w_j`` times (the weights of
:func:`~retrofit.weighted_preprocessing.fitting.fitting_with`), and transforms
test rows exactly as tabpfn's. Per step, against the rows repeated:

* ``RemoveConstantFeaturesStep``, ``ShuffleFeaturesStep``: unchanged (a
  column is constant over the repeated rows iff over the distinct ones; the
  permutation reads no rows);
* ``ReshapeFeatureDistributionsStep``: its transforms sized by ``sum w`` (the
  quantile count) and fitted weighted
  (:mod:`retrofit.weighted_preprocessing.transformers`);
* ``EncodeCategoricalFeaturesStep``: the "common categories" filters count
  ``sum w`` per category and ``sum w`` rows, one-hot's 1,000,000-cell guard
  counts ``sum w`` rows (when more than the rows held); the encoders
  themselves read category sets only;
* ``AddSVDFeaturesStep``: ``sum w`` sets the number of components, the scaler
  and the SVD are weighted;
* ``NanHandlingPolynomialFeaturesStep``: its standardiser is weighted;
* ``AddFingerprintFeaturesStep``: defined, not equal. The fingerprint tells
  copies of a row apart, and a weighted row is one row with one
  fingerprint: that of its first copy among the repeated rows (the hash is
  salted with ``sum w`` times the columns, the repeated rows' cell count).

Any other step is refused in one line.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from tabpfn.preprocessing.datamodel import FeatureSchema
from tabpfn.preprocessing.pipeline_interface import PreprocessingPipeline, PreprocessingStepResult
from tabpfn.preprocessing.steps import (
    AddFingerprintFeaturesStep,
    AddSVDFeaturesStep,
    EncodeCategoricalFeaturesStep,
    NanHandlingPolynomialFeaturesStep,
    RemoveConstantFeaturesStep,
    ReshapeFeatureDistributionsStep,
    ShuffleFeaturesStep,
)
from tabpfn.preprocessing.steps.add_svd_features_step import get_svd_features_transformer
from tabpfn.utils import infer_random_state

from retrofit.errors import UnsupportedWeightingError
from retrofit.weighted_preprocessing.fitting import fit_weights, weight_total, weighted_count
from retrofit.weighted_preprocessing.statistics import weighted_count_per_value
from retrofit.weighted_preprocessing.transformers import as_weighted

__all__ = [
    "WeightedAddFingerprintFeaturesStep",
    "WeightedAddSVDFeaturesStep",
    "WeightedEncodeCategoricalFeaturesStep",
    "WeightedReshapeFeatureDistributionsStep",
    "weighted_pipeline",
]

#: tabpfn's one-hot encoding falls back to no encoding at this many output cells.
ONE_HOT_CELL_LIMIT = 1_000_000
#: The "common categories" encoders keep a category column whose rarest category
#: has at least this many rows.
COMMON_CATEGORY_ROWS = 10


class WeightedReshapeFeatureDistributionsStep(ReshapeFeatureDistributionsStep):
    """The reshape step with its transform sized by ``sum w`` and fitted weighted."""

    def _create_transformers_and_new_schema(
        self, n_samples: int, n_features: int, feature_schema: FeatureSchema
    ) -> tuple[Any, FeatureSchema]:
        count = weighted_count(n_samples, "the reshape step")
        transformer, schema = super()._create_transformers_and_new_schema(
            count, n_features, feature_schema
        )
        if transformer is not None:
            as_weighted(transformer, where=f"the reshape transform {self.transform_name!r}")
        return transformer, schema


class WeightedEncodeCategoricalFeaturesStep(EncodeCategoricalFeaturesStep):
    """The categorical encoder whose row-count rules count ``sum w``."""

    def _get_transformer(self, X: np.ndarray, categorical_features: list[int]) -> Any:
        name = self.categorical_transform_name
        w_N = fit_weights(len(X), "the categorical encoder")
        filters = ("ordinal_common_categories", "ordinal_very_common_categories")
        if w_N is None or not name.startswith(filters):
            return super()._get_transformer(X, categorical_features)
        very_common = name.startswith(filters[1])
        count = weight_total(w_N)
        kept = []
        for i in categorical_features:
            values, weights = weighted_count_per_value(X[:, i], w_N)
            rarest = weights.min() if len(values) else 0
            if rarest >= COMMON_CATEGORY_ROWS and (not very_common or len(values) < count // 10):
                kept.append(i)
        # tabpfn's plain ordinal encoder (shuffled or not) over the columns kept here.
        self.categorical_transform_name = "ordinal" + name.removeprefix(
            filters[1] if very_common else filters[0]
        )
        try:
            return super()._get_transformer(X, sorted(kept))
        finally:
            self.categorical_transform_name = name

    def fit_transform(
        self, X: np.ndarray, feature_schema: FeatureSchema
    ) -> PreprocessingStepResult:
        """The encoder's fit, redone without encoding where the repeated rows pass its guard."""
        result = super().fit_transform(X, feature_schema)
        w_N = fit_weights(len(X), "the categorical encoder")
        if (
            w_N is None
            or self.categorical_transform_name != "onehot"
            or self.categorical_transformer_ is None
            or weight_total(w_N) * result.X.shape[1] < ONE_HOT_CELL_LIMIT
        ):
            return result
        # The repeated rows would pass tabpfn's size guard: no encoding at all, which
        # is what the "numeric" encoder does (the same schema, X handed through).
        self.categorical_transform_name = "numeric"
        try:
            return super().fit_transform(X, feature_schema)
        finally:
            self.categorical_transform_name = "onehot"


class WeightedAddSVDFeaturesStep(AddSVDFeaturesStep):
    """The SVD features of the weighted rows: ``sum w`` sizes them, the fit is weighted."""

    def _fit(self, X: np.ndarray, feature_schema: FeatureSchema) -> FeatureSchema:
        w_N = fit_weights(len(X), "the SVD features step")
        if w_N is None:
            return super()._fit(X, feature_schema)
        self.is_no_op = X.shape[1] < 2
        if self.is_no_op:
            return feature_schema
        static_seed, _ = infer_random_state(self.random_state)
        transformer = get_svd_features_transformer(
            self.global_transformer_name, weight_total(w_N), X.shape[1], random_state=static_seed
        )
        # tabpfn fits the solver on a Fortran-ordered array (its basis depends on the layout).
        self.transformer_ = as_weighted(transformer, where="the SVD features step").fit(
            np.asfortranarray(X)
        )
        self.feature_schema_updated_ = feature_schema
        return feature_schema


class WeightedAddFingerprintFeaturesStep(AddFingerprintFeaturesStep):
    """A weighted row's fingerprint is its first copy's: the salt counts ``sum w`` rows."""

    def _fit(self, X: np.ndarray, feature_schema: FeatureSchema) -> FeatureSchema:
        schema = super()._fit(X, feature_schema)
        self.n_cells_ = weighted_count(len(X), "the fingerprint step") * X.shape[1]
        return schema


#: tabpfn's step class -> the weighted class it becomes (same state, weighted fit).
WEIGHTED_STEPS: dict[type, type] = {
    ReshapeFeatureDistributionsStep: WeightedReshapeFeatureDistributionsStep,
    EncodeCategoricalFeaturesStep: WeightedEncodeCategoricalFeaturesStep,
    AddSVDFeaturesStep: WeightedAddSVDFeaturesStep,
    AddFingerprintFeaturesStep: WeightedAddFingerprintFeaturesStep,
}
#: Steps whose fit reads no count over rows.
UNWEIGHTED_STEPS: tuple[type, ...] = (RemoveConstantFeaturesStep, ShuffleFeaturesStep)


def weighted_pipeline(pipeline: PreprocessingPipeline) -> PreprocessingPipeline:
    """``pipeline`` (unfitted, one member's) with every step's fit weighted; changed in place.

    Each step keeps its state and becomes its weighted class (the classes add
    no state, so the object is the same step with another fit).

    Raises:
        UnsupportedWeightingError: A step with no weighted fit, named in one line.
    """
    for step, _modalities in pipeline.steps:
        kind = type(step)
        if kind in WEIGHTED_STEPS:
            step.__class__ = WEIGHTED_STEPS[kind]
        elif isinstance(step, NanHandlingPolynomialFeaturesStep):
            step.standardizer = as_weighted(step.standardizer, where="the polynomial features")
        elif kind not in UNWEIGHTED_STEPS and kind not in WEIGHTED_STEPS.values():
            raise UnsupportedWeightingError(
                f"row weights: the preprocessing step {kind.__name__} has no weighted fit; "
                "fit without sample_weight"
            )
    return pipeline
