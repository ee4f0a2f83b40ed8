"""Bootstrap replicates from one context: every resample a weighted context of one ragged batch.

A nonparametric bootstrap refits a model on ``R`` resamples of the ``N`` train
rows, each drawn with replacement: resample ``r`` holds row ``j``
``c_rj`` times, with the counts ``(c_r1, ..., c_rN)`` multinomial (``N``
draws over ``N`` equally likely rows). Row weights are multiplicities
(docs/weights.md): the fit with ``sample_weight=c_r`` *is* the refit on the
resampled rows, within rounding, and its context holds only the rows drawn
(about ``1 - 1/e``, 63 %, of them), each once. :func:`bootstrap_predict`
runs the ``R`` weighted fits as the datasets of one ragged batch on the padded
engine (:func:`retrofit.batching.engine.run_padded`): each replicate's
preprocessing is fitted on its weighted rows, and the ICL forwards of all
replicates run fused per length bucket.

A classifier's ``class_weight`` multiplies each replicate's counts, as it
multiplies ``sample_weight`` in ``fit``: ``"balanced"`` counts the classes of
the resample (so the replicate is still the refit on the resampled rows).

Shape letters: R replicates, N train rows, Q test rows, C classes of ``y``.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
from sklearn.preprocessing import LabelEncoder

from retrofit.batching.classification import predict_batched_labels, predict_proba_batched
from retrofit.batching.regression import predict_batched
from retrofit.classifier import OTabPFNClassifier
from retrofit.errors import BatchInputError, InvalidInputError
from retrofit.leave_out.cross_val import (
    CLASSIFIER_METHODS,
    REGRESSOR_METHODS,
    checked_fold_estimator,
)
from retrofit.regressor import OTabPFNRegressor
from retrofit.validation import check_leave_out_data
from retrofit.weighted_fit import class_row_weights

__all__ = ["bootstrap_counts", "bootstrap_predict"]


def bootstrap_counts(n_rows: int, n_replicates: int, random_state: Any) -> np.ndarray:
    """``(R, N)`` multinomial counts: how often each of ``N`` rows is drawn in ``N`` draws.

    Args:
        n_rows: The rows ``N`` (and the draws per replicate).
        n_replicates: The replicates ``R``.
        random_state: An integer seed, None, or a ``numpy.random.Generator``
            (``numpy.random.default_rng``'s argument).
    """
    rng = np.random.default_rng(random_state)
    return rng.multinomial(n_rows, np.full(n_rows, 1.0 / n_rows), size=n_replicates)


def _checked_method(estimator: Any, method: str) -> str:
    allowed = CLASSIFIER_METHODS if isinstance(estimator, OTabPFNClassifier) else REGRESSOR_METHODS
    if method not in allowed:
        raise InvalidInputError(
            f"bootstrap_predict: unknown method {method!r} for {type(estimator).__name__}; "
            f"use one of {', '.join(allowed)}"
        )
    return method


def bootstrap_predict(
    estimator: OTabPFNRegressor | OTabPFNClassifier,
    X: Any,
    y: Any,
    X_test: Any,
    *,
    n_replicates: int,
    random_state: Any,
    method: str = "predict",
    return_counts: bool = False,
) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """Every bootstrap replicate's predictions of ``X_test``, from one ragged batch.

    Replicate ``r`` is the estimator fitted on ``X, y`` with each row counted
    as often as resample ``r`` drew it (:func:`bootstrap_counts`): the refit
    on the resampled rows, within rounding (docs/weights.md gives the bound
    per dtype).

    Args:
        estimator: An :class:`~retrofit.OTabPFNRegressor` or
            :class:`~retrofit.OTabPFNClassifier` in a patched mode (fitted or
            not; it is left unchanged). Its ``random_state`` seeds each
            replicate's fit, as it would seed a refit.
        X: Train features, ``(N, F)``: an array or a DataFrame.
        y: Train targets or labels, ``(N,)``.
        X_test: Rows to predict, ``(Q, F)``.
        n_replicates: ``R >= 1``.
        random_state: Seed of the resamples (an integer, None or a
            ``numpy.random.Generator``).
        method: Regressor: ``"predict"`` (the mean), ``"mean"``, ``"median"``
            or ``"mode"``. Classifier: ``"predict"`` (labels),
            ``"predict_proba"`` or ``"predict_log_proba"`` (its log).
        return_counts: Also return the counts.

    Returns:
        ``(R, Q)`` predictions (labels for a classifier's ``"predict"``), or
        ``(R, Q, C)`` probabilities (or their logs) with the sorted classes
        of ``y`` as columns (for a class a resample did not draw: 0, or for
        logs the dtype's most negative number, as ``cross_val_predict``);
        with ``return_counts``, also the ``(R, N)`` counts.

    Raises:
        InvalidInputError: Another estimator, ``mode="none"``, an unknown
            method, ``n_replicates < 1``, or data that
            :func:`retrofit.validation.check_leave_out_data` refuses (``X``
            not 2-D, ``y`` not one value per row, a regression target that is
            not numbers or is NaN, a missing label, ``X_test`` of another width).
    """
    estimator = checked_fold_estimator(estimator, "bootstrap_predict")
    method = _checked_method(estimator, method)
    if isinstance(n_replicates, bool) or not isinstance(n_replicates, int | np.integer):
        raise InvalidInputError(
            f"bootstrap_predict: n_replicates must be an integer, got {n_replicates!r}"
        )
    if n_replicates < 1:
        raise InvalidInputError(f"bootstrap_predict: n_replicates must be >= 1, got {n_replicates}")
    task = "classification" if isinstance(estimator, OTabPFNClassifier) else "regression"
    y = check_leave_out_data(X, y, task=task, caller="bootstrap_predict", X_test=X_test)
    counts_RN = bootstrap_counts(len(X), int(n_replicates), random_state)
    class_weight = getattr(estimator, "class_weight", None)
    weights = [class_row_weights(class_weight, y, c_N.astype(np.float64)) for c_N in counts_RN]
    lists = ([X] * len(weights), [y] * len(weights), [X_test] * len(weights))
    host = estimator.batched_host()
    try:
        if isinstance(estimator, OTabPFNClassifier):
            run = predict_batched_labels if method == "predict" else predict_proba_batched
            results = run(host, *lists, padded=True, sample_weight=weights).results
        else:
            output_type = "mean" if method == "predict" else method
            results = predict_batched(
                host, *lists, output_type=output_type, padded=True, sample_weight=weights
            ).results
    except BatchInputError as err:
        # The batch names its datasets, which are the replicates in order.
        message = re.sub(r"^dataset (\d+)", r"replicate \1", " ".join(str(err).split()))
        raise InvalidInputError(f"bootstrap_predict: {message}") from None
    if method == "predict_proba":
        predictions = _aligned(results, y, weights)
    elif method == "predict_log_proba":
        with np.errstate(divide="ignore"):  # a probability of 0 is a log of -inf
            logs = [np.log(proba_QC) for proba_QC in results]
        predictions = _aligned(logs, y, weights, fill=np.finfo(logs[0].dtype).min)
    else:
        predictions = np.stack([np.asarray(r) for r in results])
    return (predictions, counts_RN) if return_counts else predictions


def _aligned(
    probas: list[np.ndarray], y: Any, weights: list[np.ndarray], *, fill: float = 0.0
) -> np.ndarray:
    """``(R, Q, C)``: each replicate's probabilities in the columns of every class of ``y``.

    ``fill`` where a replicate drew no row of a class: 0 for probabilities,
    the dtype's most negative number for their logs (scikit-learn's convention).
    """
    labels_N = np.asarray(y)
    encoder = LabelEncoder().fit(labels_N)
    shape = (len(probas), probas[0].shape[0], len(encoder.classes_))
    out_RQC = np.full(shape, fill, dtype=probas[0].dtype)
    for r, (proba_QC, w_N) in enumerate(zip(probas, weights, strict=True)):
        drawn = encoder.transform(np.unique(labels_N[w_N > 0]))
        out_RQC[r][:, drawn] = proba_QC
    return out_RQC
