"""tabpfn's estimator-side preprocessing fitted with row weights.

Row weights are multiplicities (DESIGN.md section 10): row ``j`` of weight
``w_j`` counts as ``w_j`` copies in every fit that reads across train rows, so
integer weights equal the rows repeated and real weights use the same
formulas. This room weighs everything between the user's ``(X, y, w)`` and the
model's input: weight-0 rows dropped (:mod:`.rows`), tabpfn's row-count rules
on ``sum w``, each ensemble member's pipeline (:mod:`.steps`, over the
transformers of :mod:`.transformers` and the order statistics of
:mod:`.statistics`, the power lambdas of :mod:`.power`), its target transform,
its outlier clipping (:mod:`.outliers`), the whole ensemble
(:mod:`.ensemble`, whose :func:`weighted_ensemble_preprocessor` the
estimators call) and the targets' statistics (:mod:`.targets`).

Exact, approximate, defined and refused (one line each; the tests measure
the bounds):

* bit-identical to the repeated rows: percentiles and medians (quantile
  transforms, squashing and robust scaling), category sets and counts,
  constant columns, every count tabpfn reads (``sum w``);
* equal to rounding: means and variances (imputation, standard scaling,
  targets, outlier clipping);
* equal to the solver's tolerance: power-transform lambdas (scipy's bounded
  solvers on the weighted likelihood) and SVD features (ARPACK on
  ``diag(sqrt w) X``);
* defined: the fingerprint feature exists to tell copies apart; a weighted
  row is one row with one fingerprint, its first copy's;
* defined: rows subsampled per member (``SUBSAMPLE_SAMPLES``) are drawn from
  the weighted multiset (integer weights: the repeated rows' draws exactly);
* defined: above the quantile transform's subsample size (``sum w`` over
  100,000) the weighted quantiles are those of all rows, not of a random
  subsample;
* refused: real weights with row subsampling, subsample index lists, tabpfn's
  GPU preprocessing, importance-ranked feature subsets, quantile target
  transforms, KDI with ``kditransform`` installed, differentiable input;
* bf16 and fp16 (the model's concern): ``log 2`` rounds, so weight 2 acts as
  about 1.996 there; the preprocessing runs in float64 whatever the dtype.
"""

from __future__ import annotations

from retrofit.weighted_preprocessing.ensemble import (
    WeightedEnsembleMember,
    WeightedEnsemblePreprocessor,
    weighted_ensemble_preprocessor,
)
from retrofit.weighted_preprocessing.fitting import fitting_with
from retrofit.weighted_preprocessing.rows import (
    categorical_inference_threshold,
    drop_zero_weight_rows,
    positive_row_weights,
)
from retrofit.weighted_preprocessing.targets import (
    weighted_class_counts,
    weighted_target_standardisation,
)

__all__ = [
    "WeightedEnsembleMember",
    "WeightedEnsemblePreprocessor",
    "categorical_inference_threshold",
    "drop_zero_weight_rows",
    "fitting_with",
    "positive_row_weights",
    "weighted_class_counts",
    "weighted_ensemble_preprocessor",
    "weighted_target_standardisation",
]
