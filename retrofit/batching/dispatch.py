"""Which path answers a batch of datasets, and the checks of the lists before either runs.

One rule for both estimators, both tasks and ``predict-batch``:
:func:`needs_padding` says whether tabpfn's fused forward refuses input that
the null-padded engine (:mod:`retrofit.batching.engine`) runs exactly (ragged
arrays, :func:`is_ragged`; float64; a classifier's differing class sets); it
reads only the input and the parameters, so an estimator asks it before loading
a model. :func:`takes_padded_path` adds the models' support once they are
loaded. Everything else is tabpfn's own batched method, run through
:func:`tabpfn_batched`, which names the dataset its error is about. Sample
weights (:func:`check_batch_weights`, one vector per dataset) always take the
padded path: tabpfn's batched methods take none.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pandas as pd
import torch
from tabpfn import TabPFNClassifier

from retrofit.batching.engine import Estimator, failing_dataset, models_of
from retrofit.errors import BatchInputError, InvalidInputError, InvalidSampleWeightError
from retrofit.hosts.common.base import supports_padded_icl
from retrofit.validation import check_numeric_target, check_sample_weight
from retrofit.weighted_fit import unpatched_refusal

__all__ = [
    "check_batch_lists",
    "check_batch_weights",
    "first_other_class_set",
    "is_ragged",
    "n_rows",
    "needs_padding",
    "refuse_other_class_sets",
    "tabpfn_batched",
    "takes_padded_path",
]


def n_rows(X: Any) -> int:
    """The rows of an array, a DataFrame or a list of rows."""
    return int(X.shape[0]) if hasattr(X, "shape") else len(X)


def check_batch_lists(
    X_train_list: Sequence[Any],
    y_train_list: Sequence[Any],
    X_test_list: Sequence[Any],
    *,
    numeric: bool = True,
) -> list[Any]:
    """Refuses malformed batch input before anything is fitted.

    Args:
        X_train_list: Training features, one array per dataset.
        y_train_list: Training targets, one array per dataset.
        X_test_list: Test features, one array per dataset.
        numeric: True for regression targets (numbers); False for class
            labels (any values tabpfn's classifier takes, none missing).

    Returns:
        The targets as ``OTabPFNRegressor.fit`` takes them (text that spells
        numbers converted: :func:`retrofit.validation.check_numeric_target`);
        class labels as given.

    Raises:
        BatchInputError: If the lists differ in length or are empty, or a
            dataset (named by its index) has fewer than two train rows, a
            target of another length than its train rows, a non-finite or
            non-numeric target (a missing label), or no test rows.
    """
    lengths = (len(X_train_list), len(y_train_list), len(X_test_list))
    if len(set(lengths)) != 1:
        raise BatchInputError(
            "X_train_list, y_train_list and X_test_list must have equal length; got "
            f"{lengths[0]}, {lengths[1]} and {lengths[2]}"
        )
    if lengths[0] == 0:
        raise BatchInputError("nothing to predict: empty dataset list")
    targets = []
    for i, (X, y, X_test) in enumerate(zip(X_train_list, y_train_list, X_test_list, strict=True)):
        n = n_rows(X)
        if n < 2:
            raise BatchInputError(f"dataset {i}: needs at least 2 train rows, got {n}")
        if numeric:
            y = _numeric_target(i, y)
        y_arr = _target_values(i, y) if numeric else np.asarray(y, dtype=object).reshape(-1)
        if y_arr.shape[0] != n:
            raise BatchInputError(
                f"dataset {i}: y_train has {y_arr.shape[0]} values for {n} train rows"
            )
        bad = int((~np.isfinite(y_arr)).sum()) if numeric else int(pd.isna(y_arr).sum())
        if bad:
            what = "NaN or infinite values" if numeric else "missing labels"
            raise BatchInputError(f"dataset {i}: y_train has {bad} {what}")
        if n_rows(X_test) < 1:
            raise BatchInputError(f"dataset {i}: X_test has no rows")
        targets.append(y)
    return targets


def check_batch_weights(sample_weight: Sequence[Any] | None, X_train_list: Sequence[Any]) -> Any:
    """Each dataset's sample weights, checked as ``fit`` checks them; None when none has any.

    Args:
        sample_weight: None, or one entry per dataset: None (every row counts
            once) or the weights of its train rows
            (:func:`retrofit.validation.check_sample_weight`).
        X_train_list: Training features, one array per dataset.

    Returns:
        None, or a list with None or a float64 ``(n_d,)`` array per dataset.

    Raises:
        BatchInputError: Another number of entries than datasets, or a dataset's
            malformed weights (named by its index).
    """
    if sample_weight is None:
        return None
    if isinstance(sample_weight, np.ndarray) or len(sample_weight) != len(X_train_list):
        raise BatchInputError(
            "sample_weight must be a list with one weight vector (or None) per dataset; got "
            f"{type(sample_weight).__name__} of length {len(sample_weight)} for "
            f"{len(X_train_list)} datasets"
        )
    checked = []
    for i, (w, X) in enumerate(zip(sample_weight, X_train_list, strict=True)):
        try:
            checked.append(None if w is None else check_sample_weight(w, n_rows(X)))
        except InvalidSampleWeightError as err:
            raise BatchInputError(f"dataset {i}: {err}") from None
    return None if all(w is None for w in checked) else checked


def _target_values(index: int, y: Any) -> np.ndarray:
    """A regression target's values as float64, naming the dataset when they are not numbers."""
    try:
        return np.asarray(y, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError) as err:
        raise BatchInputError(f"dataset {index}: y_train is not numeric ({err})") from None


def _numeric_target(index: int, y: Any) -> Any:
    """``y`` as ``OTabPFNRegressor.fit`` takes it (text numbers converted), naming the dataset."""
    try:
        return check_numeric_target(y)
    except InvalidInputError as err:
        raise BatchInputError(f"dataset {index}: {err}") from None


def is_ragged(X_train_list: Sequence[Any], X_test_list: Sequence[Any]) -> bool:
    """Whether the raw arrays differ in shape (tabpfn's ``predict_batched`` refuses that)."""
    train_shapes = {_shape(X) for X in X_train_list}
    test_shapes = {_shape(X) for X in X_test_list}
    return len(train_shapes) > 1 or len(test_shapes) > 1


def _shape(X: Any) -> tuple[int, ...]:
    # An array's or a DataFrame's own shape, without copying it into a new array.
    return tuple(X.shape) if hasattr(X, "shape") else np.shape(X)


def _class_set(y: Any) -> frozenset:
    """A dataset's distinct labels, compared as tabpfn compares class sets (``1 == 1.0 != "1"``)."""
    values = pd.unique(np.asarray(y, dtype=object).reshape(-1))
    return frozenset(v.item() if isinstance(v, np.generic) else v for v in values)


def first_other_class_set(y_train_list: Sequence[Any]) -> int | None:
    """The first dataset whose class set is not dataset 0's; None when all share one.

    tabpfn's ``predict_proba_batched`` scores every dataset with one set of
    classes; labels of different kinds (integers beside text) are different
    classes. Missing labels are refused before (:func:`check_batch_lists`).
    """
    first = _class_set(y_train_list[0])
    for i, y in enumerate(y_train_list[1:], start=1):
        if _class_set(y) != first:
            return i
    return None


def refuse_other_class_sets(y_train_list: Sequence[Any]) -> None:
    """Refuses, naming the dataset, class sets that tabpfn's one-class-set method cannot score.

    Raises:
        BatchInputError: A dataset whose classes are not dataset 0's.
    """
    index = first_other_class_set(y_train_list)
    if index is not None:
        ours, theirs = (_shown(_class_set(y_train_list[i])) for i in (index, 0))
        raise BatchInputError(
            f"dataset {index}: its classes {ours} are not dataset 0's {theirs}, and tabpfn's "
            "predict_proba_batched needs the same set of classes in every dataset: batch "
            "datasets of one class set together, or use a patched host (a mode other than "
            "'none'), which scores each dataset over its own classes"
        )


def _shown(labels: frozenset, limit: int = 8) -> str:
    """Up to ``limit`` labels, sorted (by their text when they are of kinds that do not compare)."""
    try:
        ordered = sorted(labels)
    except TypeError:
        ordered = sorted(labels, key=repr)
    more = f", ... ({len(ordered)} in all)" if len(ordered) > limit else ""
    return "[" + ", ".join(repr(v) for v in ordered[:limit]) + more + "]"


def needs_padding(
    estimator: Estimator,
    X_train_list: Sequence[Any],
    y_train_list: Sequence[Any],
    X_test_list: Sequence[Any],
) -> bool:
    """Whether tabpfn's fused forward refuses the input that the padded path runs exactly.

    The one rule, for both estimators and tasks: ragged arrays,
    ``inference_precision=torch.float64``, and for a classifier datasets whose
    class sets differ (:func:`first_other_class_set`: other classes, or labels
    of another kind), which the padded path scores each over its own classes.
    It reads only the input and the parameters, so an estimator asks it before
    loading any model.
    """
    return (
        is_ragged(X_train_list, X_test_list)
        or estimator.get_params(deep=False)["inference_precision"] == torch.float64
        or (
            isinstance(estimator, TabPFNClassifier)
            and first_other_class_set(y_train_list) is not None
        )
    )


def takes_padded_path(
    estimator: Estimator,
    X_train_list: Sequence[Any],
    y_train_list: Sequence[Any],
    X_test_list: Sequence[Any],
    padded: bool | None,
    *,
    weighted: bool = False,
) -> bool:
    """Whether the null-padded path answers, given the caller's ``padded`` (None: decide).

    None decides: input that :func:`needs_padding`, on models that all have a
    null-padded ICL stage; anything else is tabpfn's own batched method.
    ``weighted`` (sample weights given): always the padded path.

    Raises:
        BatchInputError: Sample weights with ``padded=False``.
        UnsupportedWeightingError: Sample weights on an unpatched model.
    """
    if weighted:
        if padded is False:
            raise BatchInputError(
                "sample_weight: tabpfn's batched methods take no weights; leave padded=None"
            )
        if not all(supports_padded_icl(m) for m in models_of(estimator)):
            raise unpatched_refusal()
        return True
    if padded is not None:
        return padded
    return needs_padding(estimator, X_train_list, y_train_list, X_test_list) and all(
        supports_padded_icl(m) for m in models_of(estimator)
    )


def tabpfn_batched(
    call: Callable[[], Any],
    host: Callable[[], Estimator],
    X_train_list: Sequence[Any],
    y_train_list: Sequence[Any],
    X_test_list: Sequence[Any],
) -> Any:
    """Runs tabpfn's batched method (``call``), naming the dataset an error is about.

    Args:
        call: tabpfn's method, bound to its input.
        host: Gives the plain tabpfn estimator (its model loaded) whose
            per-dataset fits find the failing dataset; called only after a
            failure.
        X_train_list: Training features, one array per dataset.
        y_train_list: Training targets, one array per dataset.
        X_test_list: Test features, one array per dataset.

    Raises:
        BatchInputError: tabpfn's ``ValueError``, ``TypeError`` or
            ``IndexError`` (a class past the decoder's logits) when one dataset
            fails on its own too (the message names it, and for too many
            classes the model's class limit: :func:`~retrofit.batching.engine.check_class_limit`).
        ValueError: tabpfn's refusal of the whole batch (ragged input), as is.
    """
    try:
        return call()
    except (ValueError, TypeError, IndexError) as err:
        if is_ragged(X_train_list, X_test_list):
            raise  # tabpfn's refusal of the whole batch
        failure = failing_dataset(host(), X_train_list, y_train_list, X_test_list)
        if failure is None:
            raise
        index, own = failure
        raise BatchInputError(f"dataset {index}: {own}") from err
