"""Out-of-fold predictions of a retrofit estimator: ``cross_val_predict`` on the padded engine.

:func:`cross_val_predict` is scikit-learn's ``cross_val_predict`` for
:class:`retrofit.OTabPFNRegressor` and :class:`retrofit.OTabPFNClassifier`:
the same signature's core (``estimator, X, y, *, groups, cv, method``), the
same folds (``cv`` through ``sklearn.model_selection.check_cv``) and the same
return value, every row predicted from a context that did not contain it.
Instead of ``k`` clones fitted and run one after the other, the ``k`` folds
are the datasets of one ragged batch through the null-padded engine
(:func:`retrofit.batching.engine.run_padded`, by way of the batching front
ends): each fold's train rows are its context, its held-out rows its queries,
and the ICL forwards of all folds run fused per length bucket.

Preprocessing. ``preprocessing="transductive"`` (the default): the X side
(input cleaning, each ensemble member's feature pipeline) is fitted once on
all rows, from no label, and each fold's context and queries are rows of that
one transform; the y side (target standardisation and transforms, bar
distribution, class encoding and permutations) is each fold's own, from its
train rows (:mod:`retrofit.leave_out.transductive`). No held-out label
reaches anything that predicts it; held-out rows' features do reach the
feature pipelines (transductive). ``preprocessing="per_fold"``: each fold's
context is fitted and preprocessed on its own train rows, exactly as a clone
fitted on them would be, so the result equals scikit-learn's
``cross_val_predict`` with ``k`` refits of the same estimator (an integer
``random_state``) within the padded path's rounding bound. Either way the
batch shares the model, the patching and the fused ICL forwards.

Row weights. ``params={"sample_weight": w}``, as scikit-learn's
``cross_val_predict`` takes it: each fold's weights are ``w`` on its train
rows (times a classifier's ``class_weight`` on their labels), so
``"per_fold"`` is scikit-learn's ``cross_val_predict`` with ``k`` weighted
refits, and ``"transductive"`` fits the X side once with ``w``
(:mod:`retrofit.leave_out.transductive`). Every row is predicted, weight 0
included (it is no context of any fold). Measured
(``python -m lab oof-gap``, ``results/leave_out/{offline18,offline_cls6}``:
every case, all train rows, ``k = 5``, the embedded hosts in Full-O, float32):
transductive's per-case largest difference from ``k`` refits averages 0.022
of the target's std (at most 0.11; RMSE +0.044 %) on offline18 and 0.045 in
probability (at most 0.21; log loss -0.00013) on offline_cls6; ``per_fold``'s
is 0 on offline18 and at most 3e-7 (float32 rounding) on offline_cls6. tabpfn
itself run ``k`` times is 0.019 std and 0.0095 from the patched refits.

:func:`partition_folds` is the one check that a splitter's test folds hold out
every row exactly once and that no fold trains on a row it holds out (a leaky
custom splitter would break the promise above), and :func:`fold_predictions`
the fold engine itself; the data are checked once, before any fold, by
:func:`retrofit.validation.check_leave_out_data`;
:mod:`retrofit.leave_out.estimator_intervals` builds jackknife+ and CV+ on
both.

Shape letters: N rows of ``X``, Q extra query rows, C classes of ``y``.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
from sklearn.base import is_classifier
from sklearn.model_selection import check_cv
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import LabelEncoder
from sklearn.utils import _safe_indexing

from retrofit.batching.classification import predict_batched_labels, predict_proba_batched
from retrofit.batching.engine import models_of
from retrofit.batching.regression import predict_batched
from retrofit.classifier import OTabPFNClassifier
from retrofit.errors import (
    BatchInputError,
    InputWarning,
    InvalidInputError,
    InvalidSampleWeightError,
)
from retrofit.hosts.common.base import supports_padded_icl
from retrofit.leave_out.transductive import TransductiveFit, refuse_label_reading
from retrofit.regressor import OTabPFNRegressor
from retrofit.validation import check_leave_out_data, check_leave_out_params
from retrofit.weighted_fit import class_row_weights

__all__ = [
    "CLASSIFIER_METHODS",
    "PREPROCESSING_MODES",
    "REGRESSOR_METHODS",
    "Fold",
    "checked_fold_estimator",
    "checked_splitter",
    "cross_val_predict",
    "fold_predictions",
    "partition_folds",
    "refuse_other_estimator",
]

#: ``(train_rows, held_out_rows)`` of one fold, as a splitter's ``split`` yields them.
Fold = tuple[np.ndarray, np.ndarray]

#: The regressor's methods: ``predict`` (the mean) and the output types of
#: ``TabPFNRegressor.predict(output_type=...)`` that give one value per row
#: (``quantiles``, ``full`` and ``main`` give several and are not offered).
REGRESSOR_METHODS: tuple[str, ...] = ("predict", "mean", "median", "mode")

#: The classifier's methods (``predict_log_proba``: the log of ``predict_proba``,
#: as :meth:`retrofit.OTabPFNClassifier.predict_log_proba` gives it).
CLASSIFIER_METHODS: tuple[str, ...] = ("predict", "predict_proba", "predict_log_proba")

#: The values of ``preprocessing``: the X side fitted once on all rows (the
#: default), or each fold fitted and preprocessed on its own rows.
PREPROCESSING_MODES: tuple[str, ...] = ("transductive", "per_fold")


def checked_fold_estimator(estimator: Any, caller: str) -> OTabPFNRegressor | OTabPFNClassifier:
    """``estimator`` if the fold engine can run it: a retrofit estimator not in ``mode="none"``.

    Raises:
        InvalidInputError: Another estimator (a ``Pipeline`` included: its
            steps would need fitting per fold), or ``mode="none"`` (padding a
            fold's context with null rows needs a patched host).
    """
    refuse_other_estimator(estimator, caller, (OTabPFNRegressor, OTabPFNClassifier))
    if estimator.mode == "none":
        raise InvalidInputError(
            f"{caller}: mode='none' is the unpatched host, whose folds cannot share one "
            "null-padded batch; use mode='full-o' or 'oattention' (or sklearn's "
            "cross_val_predict for k refits)"
        )
    return estimator


def refuse_other_estimator(estimator: Any, caller: str, allowed: tuple[type, ...]) -> None:
    """Refuses an estimator of none of the ``allowed`` classes, saying what works instead.

    Raises:
        InvalidInputError: For a ``Pipeline``, naming the two ways that work;
            for any other estimator, naming scikit-learn's ``k`` refits.
    """
    if isinstance(estimator, allowed):
        return
    wanted = " or ".join(cls.__name__ for cls in allowed)
    if isinstance(estimator, Pipeline):
        last = type(estimator.steps[-1][1]).__name__ if estimator.steps else "no step"
        raise InvalidInputError(
            f"{caller} takes an {wanted} itself, not a Pipeline (ending in {last}), whose "
            "steps would have to be fitted per fold: pass its last step with X transformed "
            "by the other steps, or use sklearn.model_selection.cross_val_predict(pipeline, "
            "...) for k refits"
        )
    raise InvalidInputError(
        f"{caller} needs a retrofit.{wanted}, got {type(estimator).__name__}; for any other "
        "estimator use sklearn.model_selection.cross_val_predict (k refits)"
    )


def _requests_groups(splitter: Any) -> bool:
    """Whether ``splitter.split`` needs ``groups`` (scikit-learn's metadata routing says so)."""
    try:
        return splitter.get_metadata_routing().split.requests.get("groups") is True
    except AttributeError:  # a splitter without scikit-learn's routing
        return False


def checked_splitter(cv: Any, y: Any, *, classifier: bool, caller: str) -> Any:
    """``cv`` as a splitter (scikit-learn's ``check_cv``), refused in one line if it is none.

    Raises:
        InvalidInputError: ``cv`` is neither a number of folds >= 2 nor a splitter.
    """
    try:
        return check_cv(cv, y, classifier=classifier)
    except (TypeError, ValueError) as err:
        raise InvalidInputError(f"{caller}: cv={cv!r} gives no folds: {_one_line(err)}") from None


def _one_line(err: BaseException) -> str:
    return " ".join(str(err).split())


def partition_folds(
    splitter: Any, X: Any, y: Any, groups: Any = None, *, caller: str
) -> list[Fold]:
    """The folds of ``splitter`` on ``X``, refused unless each predicts rows it was not fitted on.

    Args:
        splitter: Any scikit-learn splitter (``split(X, y, groups)``).
        X: The rows, ``(N, F)``.
        y: The targets, ``(N,)`` (stratified splitters read them).
        groups: Group labels for group splitters, or None.
        caller: The entry point named in the error.

    Returns:
        ``(train_rows, held_out_rows)`` per fold, in the splitter's order.

    Raises:
        InvalidInputError: A group splitter without ``groups``; a splitter
            that cannot split these rows (more folds than rows, say); a row
            held out twice or never (``ShuffleSplit``, ``TimeSeriesSplit``), as
            scikit-learn's ``cross_val_predict`` refuses; a fold whose train
            rows hold one of its held-out rows (a leaky custom splitter), named
            by its index, or a row index outside ``X``.
    """
    name = type(splitter).__name__
    if groups is None and _requests_groups(splitter):
        raise InvalidInputError(
            f"{caller}: {name} splits by group; pass groups= (one group label per row)"
        )
    try:
        folds = [
            (np.asarray(train), np.asarray(test)) for train, test in splitter.split(X, y, groups)
        ]
    except ValueError as err:
        raise InvalidInputError(
            f"{caller}: {name} cannot split these {len(X)} rows: {_one_line(err)}"
        ) from None
    held_out = np.concatenate([test for _, test in folds]) if folds else np.empty(0, int)
    if np.sort(held_out).tolist() != list(range(len(X))):
        raise InvalidInputError(
            f"{caller}: the folds of {name} must hold out every row "
            "exactly once (a partition, as KFold and LeaveOneOut are)"
        )
    for k, (train, test) in enumerate(folds):
        outside = (train < 0) | (train >= len(X)) if train.size else np.zeros(0, bool)
        if outside.any():
            raise InvalidInputError(
                f"{caller}: fold {k} of {name} trains on row {train[outside][0]}, outside "
                f"the {len(X)} rows of X"
            )
        leaked = np.intersect1d(train, test)
        if leaked.size:
            raise InvalidInputError(
                f"{caller}: fold {k} of {name} trains on {leaked.size} of the rows it holds "
                f"out (first: row {leaked[0]}); every row must be predicted from a context "
                "without it"
            )
    return folds


def _fold_weights(
    estimator: Any,
    y: Any,
    folds: Sequence[Fold],
    sample_weight: np.ndarray | None,
    caller: str,
) -> list[np.ndarray | None] | None:
    """Each fold's row weights: ``sample_weight`` on its train rows, times its class weights."""
    class_weight = getattr(estimator, "class_weight", None)
    if sample_weight is None and class_weight is None:
        return None
    weights = []
    for k, (train, _) in enumerate(folds):
        w_n = None if sample_weight is None else sample_weight[train]
        if w_n is not None and not np.any(w_n > 0):
            raise InvalidSampleWeightError(
                f"{caller}: sample_weight: fold {k}'s train rows all weigh 0 (an empty context)"
            )
        weights.append(class_row_weights(class_weight, _safe_indexing(y, train), w_n))
    return weights


def _stacked(X: Any, X_extra: Any) -> Any:
    """``X_extra``'s rows after ``X``'s, in ``X``'s kind (array or DataFrame)."""
    if isinstance(X, pd.DataFrame):
        return pd.concat([X, pd.DataFrame(X_extra, columns=X.columns)], ignore_index=True)
    return np.concatenate([np.asarray(X), np.asarray(X_extra)])


def fold_predictions(
    estimator: OTabPFNRegressor | OTabPFNClassifier,
    X: Any,
    y: Any,
    folds: Sequence[Fold],
    *,
    method: str = "predict",
    X_extra: Any = None,
    preprocessing: str = "per_fold",
    sample_weight: np.ndarray | None = None,
    caller: str = "cross_val_predict",
) -> list[Any]:
    """Each fold's predictions from its own train rows, all folds in one ragged batch.

    Trusts its caller (:func:`cross_val_predict`,
    :func:`retrofit.leave_out.estimator_intervals.prediction_intervals`) to
    have checked the estimator, the method and the folds.

    Args:
        estimator: A retrofit estimator in a patched mode.
        X: The rows, ``(N, F)``, an array or a DataFrame.
        y: The targets or labels, ``(N,)``.
        folds: ``(train_rows, held_out_rows)`` per fold.
        method: One of :data:`REGRESSOR_METHODS` or :data:`CLASSIFIER_METHODS`.
        X_extra: Rows ``(Q, F)`` every fold predicts too, after its held-out
            rows; None: none.
        preprocessing: ``"per_fold"``: each fold's worker is tabpfn's fit on
            its train rows; ``"transductive"``: the X side fitted once on
            ``X``'s rows (:class:`~retrofit.leave_out.transductive.TransductiveFit`).
        sample_weight: The checked weights of ``X``'s rows, or None: each
            fold's train rows count by them (times a classifier's class weights).
        caller: The entry point named in the errors.

    Returns:
        Per fold, what the estimator's ``method`` returns for the fold's
        held-out rows followed by ``X_extra``'s, from a context of the fold's
        train rows: ``(n_held_out + Q,)`` values, or ``(n_held_out + Q, C_k)``
        probabilities (or their logs) over the fold's own classes ``C_k``.

    Raises:
        InvalidInputError: A fold the batch refuses (fewer than two train
            rows, a missing target), named by its index; or a model without a
            null-padded ICL stage.
    """
    host = estimator.batched_host()
    if not all(supports_padded_icl(model) for model in models_of(host)):
        raise InvalidInputError(
            "the folds need a patched host with a null-padded ICL stage; this model has "
            "none (a saved unpatched model?): give mode='full-o' or 'oattention'"
        )
    X_train_list = [_safe_indexing(X, train) for train, _ in folds]
    y_train_list = [_safe_indexing(y, train) for train, _ in folds]
    X_test_list = [_safe_indexing(X, test) for _, test in folds]
    if X_extra is not None:
        X_test_list = [_stacked(X_test, X_extra) for X_test in X_test_list]
    fold_weights = _fold_weights(estimator, y, folds, sample_weight, caller)
    fit = None
    if preprocessing == "transductive":
        refuse_label_reading(host)
        fit = TransductiveFit(
            host, X, folds, sample_weight=sample_weight, fold_weights=fold_weights
        )
        fold_weights = None  # the transductive fit counts them itself
    try:
        if isinstance(estimator, OTabPFNClassifier):
            run = predict_batched_labels if method == "predict" else predict_proba_batched
            batch = run(
                host,
                X_train_list,
                y_train_list,
                X_test_list,
                padded=True,
                fit=fit,
                sample_weight=fold_weights,
            )
        else:
            output_type = "mean" if method == "predict" else method
            batch = predict_batched(
                host,
                X_train_list,
                y_train_list,
                X_test_list,
                output_type=output_type,
                padded=True,
                fit=fit,
                sample_weight=fold_weights,
            )
    except BatchInputError as err:
        # The batch names its datasets, which are the folds in split order.
        message = re.sub(r"^dataset (\d+)", r"fold \1", _one_line(err))
        raise InvalidInputError(f"{caller}: {message}") from None
    if method == "predict_log_proba":
        with np.errstate(divide="ignore"):  # a probability of 0 is a log of -inf
            return [np.log(proba) for proba in batch.results]
    return batch.results


def _checked_method(estimator: OTabPFNRegressor | OTabPFNClassifier, method: str) -> str:
    if isinstance(estimator, OTabPFNClassifier):
        if method in REGRESSOR_METHODS and method not in CLASSIFIER_METHODS:
            raise InvalidInputError(
                f"cross_val_predict: method {method!r} is a regressor output type; "
                f"a classifier takes one of {', '.join(CLASSIFIER_METHODS)}"
            )
        allowed = CLASSIFIER_METHODS
    else:
        allowed = REGRESSOR_METHODS
    if method not in allowed:
        raise InvalidInputError(
            f"cross_val_predict: unknown method {method!r} for {type(estimator).__name__}; "
            f"use one of {', '.join(allowed)}"
        )
    return method


def _warn_missing_classes(y: Any, folds: Sequence[Fold], caller: str) -> None:
    """One warning per fold whose train rows lack a class of ``y`` (its model cannot predict it).

    scikit-learn's ``cross_val_predict`` warns likewise (for probabilities);
    a stratified splitter (the default for ``cv=K``) avoids it.
    """
    classes = np.unique(np.asarray(y))
    for k, (train, _) in enumerate(folds):
        lacking = np.setdiff1d(classes, np.unique(np.asarray(_safe_indexing(y, train))))
        if lacking.size:
            names = ", ".join(repr(c.item() if hasattr(c, "item") else c) for c in lacking[:3])
            more = f" and {lacking.size - 3} more" if lacking.size > 3 else ""
            warnings.warn(
                f"{caller}: fold {k}'s train rows hold no row of class {names}{more}, so its "
                "model cannot predict it for the fold's held-out rows; use stratified folds "
                "or more rows of that class",
                InputWarning,
                stacklevel=3,
            )


def _aligned_probabilities(
    probas: list[np.ndarray], y: Any, folds: Sequence[Fold], *, fill: float = 0.0
) -> list[np.ndarray]:
    """Each fold's probabilities in the columns of every class of ``y``, ``fill`` where it has none.

    scikit-learn's ``cross_val_predict`` does the same for a fold whose train
    rows lack a class (its ``_enforce_prediction_order``: 0 for probabilities,
    the dtype's most negative number for their logs); tabpfn sorts the
    classes as ``LabelEncoder`` does.
    """
    encoder = LabelEncoder().fit(np.asarray(y))
    aligned = []
    for proba_MC, (train, _) in zip(probas, folds, strict=True):
        own = encoder.transform(np.unique(np.asarray(_safe_indexing(y, train))))
        full = np.full((proba_MC.shape[0], len(encoder.classes_)), fill, dtype=proba_MC.dtype)
        full[:, own] = proba_MC
        aligned.append(full)
    return aligned


def cross_val_predict(
    estimator: OTabPFNRegressor | OTabPFNClassifier,
    X: Any,
    y: Any,
    *,
    groups: Any = None,
    cv: int | Any = 5,
    method: str = "predict",
    preprocessing: str = "transductive",
    params: dict[str, Any] | None = None,
) -> np.ndarray:
    """Every row's prediction from a context that did not contain it (scikit-learn's semantics).

    Args:
        estimator: An :class:`~retrofit.OTabPFNRegressor` or
            :class:`~retrofit.OTabPFNClassifier` in a patched mode (fitted or
            not; it is left unchanged, as scikit-learn clones it).
        X: Features, ``(N, F)``: an array or a DataFrame.
        y: Targets (regressor) or labels (classifier), ``(N,)``.
        groups: Group labels for a group splitter (``GroupKFold``), or None.
        cv: A number of folds (as scikit-learn: ``KFold`` unshuffled, and
            ``StratifiedKFold`` for a classifier on class labels) or any
            splitter whose test folds partition the rows (``LeaveOneOut()``
            included).
        method: Regressor: ``"predict"`` (the mean), or ``"mean"``,
            ``"median"``, ``"mode"`` (``predict(output_type=...)``).
            Classifier: ``"predict"`` (labels), ``"predict_proba"`` or
            ``"predict_log_proba"``.
        preprocessing: ``"transductive"`` (default): the X side fitted once
            on all rows of ``X`` from no label, the y side per fold from its
            train rows (transductive: held-out rows' features reach the
            feature pipelines, their labels nothing). ``"per_fold"``: each
            fold's context fitted and preprocessed on its own train rows, as a
            refit would be. Either way all folds' ICL forwards run in one
            ragged batch.
        params: scikit-learn's fit parameters: ``{"sample_weight": w}``
            (``(N,)``, as ``fit`` takes it), each fold's restricted to its
            train rows; a classifier's ``class_weight`` multiplies them per
            fold (module docstring). None: every row counts once.

    Returns:
        ``(N,)`` predictions, or ``(N, C)`` probabilities (or their logs) with
        the sorted classes of ``y`` as columns (for a class a fold's train rows
        lack: 0, or for logs the dtype's most negative number, as
        scikit-learn), in the order of ``X``'s rows.

    Raises:
        InvalidInputError: Another estimator (a ``Pipeline`` too),
            ``mode="none"``, an unknown method or preprocessing mode, a
            regressor output type asked of a classifier; data that cannot be
            folded (:func:`retrofit.validation.check_leave_out_data`: ``X`` not
            2-D, ``y`` not one value per row, a target that is not numbers or
            is NaN, a missing label); a ``cv`` that gives no folds, a group
            splitter without ``groups``, folds that do not partition the rows
            or train on a row they hold out, a fold the estimator cannot fit;
            for ``"transductive"``, X steps that read labels or a
            ``random_state`` that is not an integer
            (:func:`~retrofit.leave_out.transductive.refuse_label_reading`); a
            parameter other than ``sample_weight``.
        InvalidSampleWeightError: Malformed weights, or a fold whose train
            rows all weigh 0.
        UnsupportedWeightingError: A setting the weights cannot be applied to.

    Warns:
        InputWarning: A fold whose train rows hold no row of some class of a
            classifier's ``y`` (its model cannot predict that class).
    """
    caller = "cross_val_predict"
    estimator = checked_fold_estimator(estimator, caller)
    method = _checked_method(estimator, method)
    if preprocessing not in PREPROCESSING_MODES:
        raise InvalidInputError(
            f"{caller}: unknown preprocessing {preprocessing!r}; use one of "
            + ", ".join(repr(m) for m in PREPROCESSING_MODES)
        )
    classify = is_classifier(estimator)
    task = "classification" if classify else "regression"
    y = check_leave_out_data(X, y, task=task, caller=caller, groups=groups)
    sample_weight = check_leave_out_params(params, len(X), caller=caller)
    splitter = checked_splitter(cv, y, classifier=classify, caller=caller)
    folds = partition_folds(splitter, X, y, groups, caller=caller)
    if classify:
        _warn_missing_classes(y, folds, caller)
    predictions = fold_predictions(
        estimator,
        X,
        y,
        folds,
        method=method,
        preprocessing=preprocessing,
        sample_weight=sample_weight,
        caller=caller,
    )
    if method == "predict_proba":
        predictions = _aligned_probabilities(predictions, y, folds)
    elif method == "predict_log_proba":
        float_min = np.finfo(predictions[0].dtype).min
        predictions = _aligned_probabilities(predictions, y, folds, fill=float_min)
    # As scikit-learn: the folds' predictions in split order, then put back in row order.
    held_out_N = np.concatenate([test for _, test in folds])
    order_N = np.empty(len(held_out_N), dtype=np.intp)
    order_N[held_out_N] = np.arange(len(held_out_N))
    return np.concatenate([np.asarray(p) for p in predictions])[order_N]
