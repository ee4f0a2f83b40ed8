"""Prediction intervals of a retrofit regressor: jackknife+, CV+, split conformal.

:func:`prediction_intervals` gets every fold's model ``mu_{-k}``: the
held-out rows' predictions give the residuals ``R_i = |y_i - mu_{-k(i)}(X_i)|``,
the test rows' predictions from every fold give ``mu_{-k}(x)``, and
:mod:`retrofit.leave_out.intervals` turns them into intervals. Each fold's
model is the context of its train rows in :func:`retrofit.cross_val_predict`'s
fold engine (:func:`retrofit.leave_out.cross_val.fold_predictions`): fitted
and preprocessed on those rows as a refit would be, all folds run as one
ragged batch, each fold's queries its held-out rows and ``X_test``. Split
conformal, for comparison, is one fit on part of the rows and a calibration
on the rest.

Row weights (``params={"sample_weight": w}``, as scikit-learn and MAPIE pass
them): every fold's model, and split conformal's fit, is the weighted fit of
its train rows (``w`` restricted to them); the conformal quantiles count each
row's residual once, as MAPIE counts them.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.base import clone, is_classifier
from sklearn.model_selection import KFold, LeaveOneOut

from retrofit.errors import InvalidInputError
from retrofit.leave_out.cross_val import (
    checked_fold_estimator,
    checked_splitter,
    fold_predictions,
    partition_folds,
    refuse_other_estimator,
)
from retrofit.leave_out.intervals import (
    PredictionIntervals,
    checked_alpha,
    cv_plus_intervals,
    split_conformal_intervals,
)
from retrofit.regressor import OTabPFNRegressor
from retrofit.validation import check_leave_out_data, check_leave_out_params

__all__ = ["FOLD_MODELS", "INTERVAL_METHODS", "prediction_intervals"]

#: The methods of :func:`prediction_intervals`.
INTERVAL_METHODS: tuple[str, ...] = ("jackknife+", "cv+", "split")

#: How :func:`prediction_intervals` gets each fold's model (recorded by reports).
FOLD_MODELS = (
    "the fold engine of cross_val_predict: each fold's train rows fitted and preprocessed "
    "on their own (per_fold), all folds' ICL forwards in one ragged batch, each fold "
    "predicting its held-out rows and X_test"
)


def _checked_estimator(estimator: Any) -> OTabPFNRegressor:
    if is_classifier(estimator):
        raise InvalidInputError(
            f"prediction_intervals: {type(estimator).__name__} is a classifier; jackknife+, "
            "CV+ and split-conformal intervals are for OTabPFNRegressor only"
        )
    refuse_other_estimator(estimator, "prediction_intervals", (OTabPFNRegressor,))
    return estimator


def _split_conformal(
    estimator: OTabPFNRegressor,
    X: np.ndarray,
    y: np.ndarray,
    X_test: np.ndarray,
    *,
    alpha: float,
    calibration_fraction: float,
    random_state: int | None,
    sample_weight: np.ndarray | None,
) -> PredictionIntervals:
    if not 0.0 < calibration_fraction < 1.0:
        raise InvalidInputError(
            f"prediction_intervals (method='split'): calibration_fraction must be in (0, 1), "
            f"got {calibration_fraction!r}"
        )
    n = len(X)
    n_cal = round(calibration_fraction * n)
    if n_cal < 1 or n - n_cal < 2:
        # tabpfn fits on 2 rows or more.
        raise InvalidInputError(
            f"prediction_intervals (method='split'): calibration_fraction "
            f"{calibration_fraction} of {n} rows leaves {max(n - n_cal, 0)} to fit and "
            f"{n_cal} to calibrate; the fit needs at least 2 and the calibration 1: give "
            "more rows or another fraction"
        )
    order = np.random.default_rng(random_state).permutation(n)
    fit_rows, cal_rows = order[n_cal:], order[:n_cal]
    weights = None if sample_weight is None else sample_weight[fit_rows]
    model = clone(estimator).fit(X[fit_rows], y[fit_rows], sample_weight=weights)
    residuals_M = np.abs(y[cal_rows] - model.predict(X[cal_rows]))
    return split_conformal_intervals(residuals_M, model.predict(X_test), alpha=alpha)


def _fold_residuals(
    estimator: OTabPFNRegressor,
    X: np.ndarray,
    y: np.ndarray,
    X_test: np.ndarray,
    splitter: Any,
    groups: Any,
    sample_weight: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Residuals, the fold of each row, and each fold's predictions of ``X_test``.

    Each fold's model is the fold engine's context of its train rows
    (:func:`retrofit.leave_out.cross_val.fold_predictions`): all folds in one
    ragged batch, each predicting its held-out rows followed by ``X_test``.
    Per-fold preprocessing, always: jackknife+ and CV+ are defined on refits
    (each fold's model blind to its held-out rows, features included).
    """
    caller = "prediction_intervals"
    folds = partition_folds(splitter, X, y, groups, caller=caller)
    predictions = fold_predictions(
        estimator,
        X,
        y,
        folds,
        X_extra=X_test,
        preprocessing="per_fold",
        sample_weight=sample_weight,
        caller=caller,
    )
    residuals_N = np.empty(len(X))
    fold_of_row_N = np.empty(len(X), dtype=np.intp)
    mu_query_KQ = np.empty((len(folds), len(X_test)))
    for k, ((_, test), prediction) in enumerate(zip(folds, predictions, strict=True)):
        residuals_N[test] = np.abs(y[test] - prediction[: len(test)])
        fold_of_row_N[test] = k
        mu_query_KQ[k] = prediction[len(test) :]
    return residuals_N, fold_of_row_N, mu_query_KQ


def prediction_intervals(
    estimator: OTabPFNRegressor,
    X: Any,
    y: Any,
    X_test: Any,
    *,
    alpha: float = 0.1,
    method: str = "jackknife+",
    cv: int | Any = None,
    groups: Any = None,
    calibration_fraction: float = 0.5,
    random_state: int | None = 0,
    params: dict[str, Any] | None = None,
) -> PredictionIntervals:
    """Prediction intervals at ``1 - alpha`` for the rows of ``X_test``.

    Args:
        estimator: A :class:`retrofit.OTabPFNRegressor`, in a patched mode
            for ``"jackknife+"`` and ``"cv+"`` (the folds share one null-padded
            batch); fitted or not, it is left unchanged.
        X: Train features, ``(N, F)``.
        y: Train targets, ``(N,)``.
        X_test: Rows to give intervals for, ``(Q, F)``.
        alpha: Miscoverage level: in (0, 0.5] for ``"jackknife+"`` and
            ``"cv+"`` (their guarantee is ``1 - 2 alpha``; above 0.5 a lower
            end could pass the upper one), in (0, 1) for ``"split"``.
        method: ``"jackknife+"`` (leave-one-out: ``N`` fold contexts),
            ``"cv+"`` (``cv`` folds) or ``"split"`` (split conformal).
        cv: For ``"cv+"``: a number of folds (``KFold``, shuffled by
            ``random_state``) or any scikit-learn splitter whose test folds
            partition the rows; default 10. Not used by the other methods.
        groups: For ``"cv+"`` with a group splitter (``GroupKFold``): one
            group label per row of ``X``.
        calibration_fraction: For ``"split"``: the share of rows that
            calibrates (the rest fit).
        random_state: Seed of the default ``KFold`` and of the split.
        params: scikit-learn's fit parameters: ``{"sample_weight": w}``
            (``(N,)``): every fold's model (and split conformal's) is the
            weighted fit of its train rows; the residuals count once each
            (module docstring).

    Returns:
        The intervals (:class:`retrofit.leave_out.intervals.PredictionIntervals`).

    Raises:
        InvalidInputError: A classifier or a non-retrofit estimator (a
            ``Pipeline`` too), an unknown method, a ``cv`` or ``groups`` given
            with another method, an alpha outside the method's range, data
            that cannot be folded (:func:`retrofit.validation.check_leave_out_data`:
            ``X_test`` of another width, a target that is not numbers or is
            NaN, ``X`` and ``y`` of different lengths), too few rows for the
            folds or the split, or ``mode="none"`` for ``"jackknife+"`` or
            ``"cv+"``; a parameter other than ``sample_weight``.
        InvalidSampleWeightError: Malformed weights.
    """
    caller = "prediction_intervals"
    estimator = _checked_estimator(estimator)
    if method not in INTERVAL_METHODS:
        raise InvalidInputError(
            f"{caller}: unknown method {method!r}; use one of " + ", ".join(INTERVAL_METHODS)
        )
    try:
        checked_alpha(alpha, method=method)
    except InvalidInputError as err:
        raise InvalidInputError(f"{caller}: {err}") from None
    for name, value in (("cv", cv), ("groups", groups)):
        if value is not None and method != "cv+":
            raise InvalidInputError(
                f"{caller}: {name} is for method='cv+' only ({method!r} has its own folds)"
            )
    y = check_leave_out_data(X, y, task="regression", caller=caller, X_test=X_test, groups=groups)
    X = np.asarray(X)
    y = np.asarray(y, dtype=np.float64)
    X_test = np.asarray(X_test)
    sample_weight = check_leave_out_params(params, len(X), caller=caller)
    if method == "split":
        return _split_conformal(
            estimator,
            X,
            y,
            X_test,
            alpha=alpha,
            calibration_fraction=calibration_fraction,
            random_state=random_state,
            sample_weight=sample_weight,
        )
    checked_fold_estimator(estimator, f"{caller} (method={method!r})")
    if method == "jackknife+":
        splitter: Any = LeaveOneOut()
    elif cv is None or (isinstance(cv, int) and not isinstance(cv, bool)):
        n_folds = 10 if cv is None else cv
        if n_folds < 2:
            raise InvalidInputError(f"{caller}: cv={cv} gives no folds; give cv >= 2")
        splitter = KFold(n_folds, shuffle=True, random_state=random_state)
    else:
        splitter = checked_splitter(cv, y, classifier=False, caller=caller)
    residuals_N, fold_of_row_N, mu_query_KQ = _fold_residuals(
        estimator, X, y, X_test, splitter, groups, sample_weight
    )
    return cv_plus_intervals(residuals_N, fold_of_row_N, mu_query_KQ, alpha=alpha, method=method)
