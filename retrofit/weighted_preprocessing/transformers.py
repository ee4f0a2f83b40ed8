"""Weighted counterparts of the scikit-learn transformers inside tabpfn's steps.

Each class here is the transformer tabpfn builds (same constructor, same
``transform``), with a ``fit`` that counts row ``j`` as many times as the
member's weight says (:func:`~retrofit.weighted_preprocessing.fitting.fit_weights`);
outside a weighted fit, or with all weights 1, it is tabpfn's fit unchanged.
:func:`as_weighted` swaps them into a tree of transformers (``Pipeline``,
``ColumnTransformer``, ``FeatureUnion``) and refuses one it has no weighted
fit for, so nothing is fitted unweighted by accident.

What each fit weighs, against the rows repeated (integer weights):

* percentiles (the squashing scaler's 25/50/75, the quantile transformer's
  grid, the robust scaler's median and quartiles): bit-identical
  (:mod:`retrofit.weighted_preprocessing.statistics`);
* means and variances (the mean imputer, the standard scaler, the KDI
  stand-in's imputation): the same sums in another order, equal to rounding;
* power-transform lambdas: the weighted likelihood under the same solver,
  equal to its tolerance (:mod:`retrofit.weighted_preprocessing.power`);
* the truncated SVD: the right singular vectors of ``diag(sqrt w) X``, which
  are the repeated rows' (``X^T W X`` is their Gram matrix), equal to ARPACK's
  tolerance;
* min/max, category sets and constant checks need no weights once the
  weight-0 rows are gone: ``MinMaxScaler``, ``OrdinalEncoder``,
  ``OneHotEncoder`` and ``FunctionTransformer`` stay tabpfn's.

Defined rather than equal: with ``sum w`` above the quantile transformer's
subsample size (100,000) the weighted fit takes the exact weighted quantiles
of all rows where the repeated rows' fit would draw a random subsample of
them. Refused: the KDI transform when the ``kditransform`` package is
installed (its kernel density has no weighted fit here).
"""

from __future__ import annotations

import copy
import numbers
from typing import Any

import numpy as np
from scipy import stats
from sklearn.compose import ColumnTransformer
from sklearn.decomposition import TruncatedSVD
from sklearn.impute import SimpleImputer
from sklearn.pipeline import FeatureUnion, Pipeline
from sklearn.preprocessing import (
    FunctionTransformer,
    MinMaxScaler,
    OneHotEncoder,
    OrdinalEncoder,
    PowerTransformer,
    RobustScaler,
    StandardScaler,
)
from sklearn.utils.validation import FLOAT_DTYPES, validate_data
from tabpfn.preprocessing.steps.adaptive_quantile_transformer import (
    AdaptiveQuantileTransformer,
    compute_effective_n_quantiles,
)
from tabpfn.preprocessing.steps.kdi_transformer import KDITransformer, KDITransformerWithNaN
from tabpfn.preprocessing.steps.safe_power_transformer import SafePowerTransformer
from tabpfn.preprocessing.steps.squashing_scaler_transformer import SquashingScaler

from retrofit.errors import UnsupportedWeightingError
from retrofit.tabpfn_surface import no_inverse_imputer
from retrofit.weighted_preprocessing.fitting import fit_weights, weight_total
from retrofit.weighted_preprocessing.power import (
    weighted_box_cox_lambda,
    weighted_yeo_johnson_lambda,
)
from retrofit.weighted_preprocessing.statistics import (
    weighted_nanmean,
    weighted_nanmedian,
    weighted_nanpercentile,
)

__all__ = [
    "WeightedAdaptiveQuantileTransformer",
    "WeightedKDITransformerWithNaN",
    "WeightedNoInverseImputer",
    "WeightedPowerTransformer",
    "WeightedRobustScaler",
    "WeightedSafePowerTransformer",
    "WeightedSimpleImputer",
    "WeightedSquashingScaler",
    "WeightedStandardScaler",
    "WeightedTruncatedSVD",
    "as_weighted",
]


def _rows(X: Any) -> int:
    return int(np.shape(X)[0])


class _WeightedMeanImputation:
    """A mean ``SimpleImputer`` whose column means count row ``j`` ``w_j`` times."""

    def fit(self, X: Any, y: Any = None) -> Any:
        super().fit(X, y)  # type: ignore[misc]
        w_N = fit_weights(_rows(X), type(self).__name__)
        if w_N is None:
            return self
        if self.strategy != "mean":  # type: ignore[attr-defined]
            raise UnsupportedWeightingError(
                f"row weights: {type(self).__name__}(strategy={self.strategy!r}) has no "  # type: ignore[attr-defined]
                "weighted fit (only the mean)"
            )
        mean_F = weighted_nanmean(np.asarray(X, dtype=np.float64), w_N)
        # Columns without a value keep the imputer's own fill (0 with keep_empty_features).
        self.statistics_ = np.where(np.isnan(mean_F), self.statistics_, mean_F)  # type: ignore[has-type]
        return self


class WeightedSimpleImputer(_WeightedMeanImputation, SimpleImputer):
    """``SimpleImputer(strategy="mean")`` with weighted column means."""


# tabpfn's imputer class, or scikit-learn's where a tabpfn release lacks it (then
# nothing is converted to it: it only subclasses what it replaces).
_NoInverseImputerBase: type = (
    no_inverse_imputer if isinstance(no_inverse_imputer, type) else SimpleImputer
)


class WeightedNoInverseImputer(_WeightedMeanImputation, _NoInverseImputerBase):  # type: ignore[misc, valid-type]
    """tabpfn's mean imputer of its safe scalers (no inverse) with weighted column means."""


class WeightedStandardScaler(StandardScaler):
    """``StandardScaler`` fitted with the weights as scikit-learn's ``sample_weight``."""

    def fit(self, X: Any, y: Any = None, sample_weight: Any = None) -> WeightedStandardScaler:
        """scikit-learn's weighted fit, the active weights as ``sample_weight``."""
        if sample_weight is None:
            sample_weight = fit_weights(_rows(X), type(self).__name__)
        return super().fit(X, y, sample_weight=sample_weight)


class _WeightedLambdas:
    """A power transformer whose lambdas maximise the weighted likelihood.

    scikit-learn calls ``_yeo_johnson_optimize`` / ``_box_cox_optimize`` with
    each whole column (its rows in order), so the active weights align with it;
    its internal standard scaler (``standardize=True``) is refitted with them.
    """

    def _yeo_johnson_optimize(self, x: np.ndarray) -> float:
        w_N = fit_weights(len(x), type(self).__name__)
        if w_N is None:
            return super()._yeo_johnson_optimize(x)  # type: ignore[misc]
        valid = ~np.isnan(x)
        return weighted_yeo_johnson_lambda(x[valid], w_N[valid], stats.yeojohnson)

    def _box_cox_optimize(self, x: np.ndarray) -> float:
        w_N = fit_weights(len(x), type(self).__name__)
        if w_N is None:
            return super()._box_cox_optimize(x)  # type: ignore[misc]
        valid = ~np.isnan(x)
        if not valid.any():
            raise ValueError("Column must not be all nan.")
        return weighted_box_cox_lambda(x[valid], w_N[valid])

    def fit(self, X: Any, y: Any = None) -> Any:
        super().fit(X, y)  # type: ignore[misc]
        w_N = fit_weights(_rows(X), type(self).__name__)
        if w_N is not None and self.standardize:  # type: ignore[attr-defined]
            unscaled = copy.copy(self)
            unscaled.standardize = False
            self._scaler = StandardScaler(copy=False).set_output(transform="default")
            self._scaler.fit(unscaled.transform(X), sample_weight=w_N)
        return self

    def fit_transform(self, X: Any, y: Any = None) -> np.ndarray:
        if fit_weights(_rows(X), type(self).__name__) is None:
            return super().fit_transform(X, y)  # type: ignore[misc]
        return self.fit(X, y).transform(X)


class WeightedPowerTransformer(_WeightedLambdas, PowerTransformer):
    """scikit-learn's ``PowerTransformer`` (``"power"``, ``"power_box"``) with weighted lambdas."""


class WeightedSafePowerTransformer(_WeightedLambdas, SafePowerTransformer):
    """tabpfn's ``SafePowerTransformer`` (``"safepower"``) with weighted lambdas."""


class WeightedKDITransformerWithNaN(_WeightedLambdas, KDITransformerWithNaN):
    """tabpfn's KDI transform where ``kditransform`` is absent: a Yeo-Johnson fallback.

    tabpfn then fits a standardising ``PowerTransformer`` after imputing NaN
    with the column means; both are weighted here. With ``kditransform``
    installed the kernel density estimate has no weighted fit: refused.
    """

    def fit(self, X: Any, y: Any = None) -> WeightedKDITransformerWithNaN:
        """Weighted imputation means, then the weighted Yeo-Johnson fit."""
        w_N = fit_weights(_rows(X), type(self).__name__)
        if w_N is None:
            return super().fit(X, y)
        if KDITransformer is not PowerTransformer:
            raise UnsupportedWeightingError(
                "row weights: the KDI transforms (kditransform installed) have no weighted "
                "fit; choose another PREPROCESS_TRANSFORMS name"
            )
        X = np.asarray(X, dtype=np.float64)
        imputation_F = np.nan_to_num(weighted_nanmean(X, w_N), nan=0)
        # tabpfn's fit imputes with the unweighted means; with no NaN left they are unused.
        super().fit(np.nan_to_num(X, nan=imputation_F), y)
        self.imputation_values_ = imputation_F
        return self


class WeightedAdaptiveQuantileTransformer(AdaptiveQuantileTransformer):
    """tabpfn's quantile transformer with the quantile grid of the weighted rows.

    The number of quantiles is capped by ``sum w`` (the repeated rows' count)
    and the grid's values are the frequency-weighted linear percentiles.
    """

    def fit(self, X: Any, y: Any = None) -> WeightedAdaptiveQuantileTransformer:
        """The quantile grid of the weighted rows (tabpfn's fit when unweighted)."""
        w_N = fit_weights(_rows(X), type(self).__name__)
        if w_N is None:
            return super().fit(X, y)
        if self.extrapolate_ratio is not None and (
            self.extrapolate_ratio < 0 or self.output_distribution != "uniform"
        ):
            return super().fit(X, y)  # raises tabpfn's own error
        X = validate_data(self, X, reset=True, dtype=FLOAT_DTYPES, ensure_all_finite="allow-nan")
        count = weight_total(w_N)
        if self.extrapolate_ratio is not None:
            self.x_min_ = np.nanmin(X, axis=0, keepdims=True)
            self.x_max_ = np.nanmax(X, axis=0, keepdims=True)
        n_quantiles = compute_effective_n_quantiles(self.n_quantiles, count, self.subsample)
        self.n_quantiles_ = max(1, min(n_quantiles, count))
        self.references_ = np.linspace(0, 1, self.n_quantiles_, endpoint=True)
        self.quantiles_ = weighted_nanpercentile(X, w_N, self.references_ * 100)
        return self


class WeightedSquashingScaler(SquashingScaler):
    """tabpfn's squashing scaler with the weighted rows' 25/50/75 percentiles.

    The robust scaling of the scaler's documented formula, its min/max
    fallback and its zero columns, from the frequency-weighted percentiles of
    the finite values (min and max need no weights).
    """

    def fit(self, X: Any, y: Any = None) -> WeightedSquashingScaler:
        """The scaler's statistics from the weighted rows (tabpfn's fit when unweighted)."""
        w_N = fit_weights(_rows(X), type(self).__name__)
        if w_N is None:
            return super().fit(X, y)
        limit = self.max_absolute_value
        if not (isinstance(limit, numbers.Number) and np.isfinite(limit) and limit > 0):
            return super().fit(X, y)  # raises tabpfn's own error
        X = validate_data(self, X, reset=True, dtype=FLOAT_DTYPES, ensure_all_finite=False)
        X = np.where(np.isinf(X), np.nan, X)
        col_min, col_max = np.nanmin(X, axis=0), np.nanmax(X, axis=0)
        lower, upper = self.quantile_range
        q_lower, q_median, q_upper = weighted_nanpercentile(X, w_N, [lower, 50.0, upper])
        zero = col_max == col_min
        minmax = (q_lower == q_upper) & ~zero
        robust = ~(minmax | zero)
        self.robust_center_ = q_median[robust]
        self.robust_scale_ = q_upper[robust] - q_lower[robust]
        self.minmax_center_ = q_median[minmax]
        tiny = np.finfo(X.dtype).tiny
        self.minmax_scale_ = 2.0 / (col_max[minmax] - col_min[minmax] + tiny)
        self.robust_cols_, self.minmax_cols_, self.zero_cols_ = robust, minmax, zero
        return self


class WeightedRobustScaler(RobustScaler):
    """``RobustScaler`` (``"robust"``) with the weighted median and quantile range."""

    def fit(self, X: Any, y: Any = None) -> WeightedRobustScaler:
        """scikit-learn's fit, its centre and scale then taken from the weighted rows."""
        super().fit(X, y)
        w_N = fit_weights(_rows(X), type(self).__name__)
        if w_N is None:
            return self
        X = np.asarray(X, dtype=np.float64)
        if self.with_centering:
            self.center_ = weighted_nanmedian(X, w_N)
        if self.with_scaling:
            q_min, q_max = self.quantile_range
            low_F, high_F = weighted_nanpercentile(X, w_N, [q_min, q_max])
            scale_F = high_F - low_F
            scale_F[scale_F < 10 * np.finfo(scale_F.dtype).eps] = 1.0
            if self.unit_variance:
                scale_F = scale_F / (stats.norm.ppf(q_max / 100.0) - stats.norm.ppf(q_min / 100.0))
            self.scale_ = scale_F
        return self


class WeightedTruncatedSVD(TruncatedSVD):
    """``TruncatedSVD`` whose components are the weighted rows' right singular vectors.

    Row ``j`` scaled by ``sqrt(w_j)`` has the Gram matrix ``X^T W X`` of the
    repeated rows, so the same components up to the solver's tolerance. Past
    the rank of the distinct rows the repeated rows' components are arbitrary
    null-space directions; ARPACK, which needs more rows than components, gets
    zero rows (they leave the Gram matrix unchanged) and returns its own.
    """

    def fit(self, X: Any, y: Any = None) -> WeightedTruncatedSVD:
        """The components of the rows scaled by ``sqrt(w)`` (ARPACK's fit when unweighted)."""
        w_N = fit_weights(_rows(X), type(self).__name__)
        if w_N is None:
            return super().fit(X, y)
        X = np.asarray(X, dtype=np.float64)
        scaled_NF = X * np.sqrt(w_N)[:, None]
        missing = self.n_components + 1 - scaled_NF.shape[0]
        if missing > 0:
            scaled_NF = np.vstack([scaled_NF, np.zeros((missing, scaled_NF.shape[1]))])
        # TruncatedSVD.fit is its fit_transform; the transformed scaled rows are dropped.
        super().fit_transform(np.asfortranarray(scaled_NF), y)
        return self

    def fit_transform(self, X: Any, y: Any = None) -> np.ndarray:
        """The weighted fit, then the rows' projections (unscaled)."""
        if fit_weights(_rows(X), type(self).__name__) is None:
            return super().fit_transform(X, y)
        return self.fit(X, y).transform(X)


#: tabpfn's transformer class (exactly) -> its weighted counterpart.
WEIGHTED_CLASSES: dict[type, type] = {
    SimpleImputer: WeightedSimpleImputer,
    StandardScaler: WeightedStandardScaler,
    PowerTransformer: WeightedPowerTransformer,
    SafePowerTransformer: WeightedSafePowerTransformer,
    KDITransformerWithNaN: WeightedKDITransformerWithNaN,
    AdaptiveQuantileTransformer: WeightedAdaptiveQuantileTransformer,
    SquashingScaler: WeightedSquashingScaler,
    RobustScaler: WeightedRobustScaler,
    TruncatedSVD: WeightedTruncatedSVD,
}
if isinstance(no_inverse_imputer, type):
    WEIGHTED_CLASSES[no_inverse_imputer] = WeightedNoInverseImputer

#: Transformers whose fit reads no count: min/max, category sets, fixed functions.
NEEDS_NO_WEIGHTS: tuple[type, ...] = (
    FunctionTransformer,
    MinMaxScaler,
    OrdinalEncoder,
    OneHotEncoder,
)


def as_weighted(transformer: Any, *, where: str = "a preprocessing step") -> Any:
    """``transformer`` (an unfitted tree of transformers) with every fit weighted.

    Containers (``Pipeline``, ``ColumnTransformer``, ``FeatureUnion``) are
    changed in place and returned; each transformer of :data:`WEIGHTED_CLASSES`
    is replaced by its weighted class built from the same parameters.

    Raises:
        UnsupportedWeightingError: A transformer with no weighted fit (one line
            naming it and ``where`` it is).
    """
    if isinstance(transformer, str) or transformer is None:  # "passthrough", "drop"
        return transformer
    if isinstance(transformer, Pipeline):
        transformer.steps = [(name, as_weighted(t, where=where)) for name, t in transformer.steps]
        return transformer
    if isinstance(transformer, ColumnTransformer):
        transformer.transformers = [
            (name, as_weighted(t, where=where), columns)
            for name, t, columns in transformer.transformers
        ]
        return transformer
    if isinstance(transformer, FeatureUnion):
        transformer.transformer_list = [
            (name, as_weighted(t, where=where)) for name, t in transformer.transformer_list
        ]
        return transformer
    kind = type(transformer)
    if kind in WEIGHTED_CLASSES.values() or kind in NEEDS_NO_WEIGHTS:
        return transformer
    weighted = WEIGHTED_CLASSES.get(kind)
    if weighted is None:
        raise UnsupportedWeightingError(
            f"row weights: {kind.__name__} in {where} has no weighted fit; fit without "
            "sample_weight or choose another preprocessing"
        )
    return weighted(**transformer.get_params(deep=False))
