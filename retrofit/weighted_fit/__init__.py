"""An estimator fitted with row weights: tabpfn's ``fit``, preprocessing and forwards weighted.

Row ``j`` of weight ``w_j`` counts as ``w_j`` copies everywhere rows meet
(DESIGN.md section 10): in tabpfn's preprocessing
(:mod:`retrofit.weighted_preprocessing`), in the targets' statistics, and in
every forward of the model (:func:`retrofit.row_weights`). This room joins
them at the estimator: the hooks on tabpfn's ``fit``
(:mod:`.estimator`), the inference engines whose forwards carry each
member's weights (:mod:`.engines`) and a classifier's ``class_weight``
(:mod:`.class_weights`).
"""

from __future__ import annotations

from retrofit.weighted_fit.class_weights import class_row_weights
from retrofit.weighted_fit.engines import member_weight_runs, weighted_inference_engine
from retrofit.weighted_fit.estimator import (
    WeightedClassifierFit,
    WeightedRegressorFit,
    WeightedTabPFNClassifier,
    WeightedTabPFNRegressor,
    refuse_unpatched,
    unpatched_refusal,
)

__all__ = [
    "WeightedClassifierFit",
    "WeightedRegressorFit",
    "WeightedTabPFNClassifier",
    "WeightedTabPFNRegressor",
    "class_row_weights",
    "member_weight_runs",
    "refuse_unpatched",
    "unpatched_refusal",
    "weighted_inference_engine",
]
