"""Checks of the data handed to the estimators and the leave-out entry points, once at the boundary.

Each check raises :class:`retrofit.errors.InvalidInputError` (a ``ValueError``)
with one line that says what is wrong and where. :func:`check_numeric_target`
guards a regressor's ``fit`` and :func:`check_sample_weight` both estimators'
``sample_weight`` (raising the subclass
:class:`~retrofit.errors.InvalidSampleWeightError`); what passes is left to
scikit-learn's and tabpfn's own validation. :func:`check_leave_out_data` guards
:func:`retrofit.cross_val_predict` and :func:`retrofit.prediction_intervals`,
whose folds would otherwise fail deep inside (a NaN label in one fold, an
``X_test`` of another width in a concatenation) with errors naming no
argument: every row's target is needed there, as a fold's context or as the
residual it is scored by.
"""

from __future__ import annotations

import numbers
from typing import Any, Literal

import numpy as np
import pandas as pd

from retrofit.errors import InvalidInputError, InvalidSampleWeightError

__all__ = [
    "check_leave_out_data",
    "check_leave_out_params",
    "check_numeric_target",
    "check_sample_weight",
    "rows_of",
]

# numpy dtype kinds that are no numbers: str, bytes, datetime, timedelta, void.
_NON_NUMERIC_KINDS = {"U": "strings", "S": "bytes", "M": "dates", "m": "timedeltas", "V": "records"}


def _first_non_number(values: np.ndarray) -> Any:
    """The first item of ``values`` that is text and does not parse as a number, else None."""
    for item in values.ravel():
        if isinstance(item, (str, bytes)):
            try:
                float(item)
            except ValueError:
                return item
    return None


def check_numeric_target(y: Any) -> Any:
    """Refuses a regression target that is not numbers; returns the target to fit on.

    Text that spells numbers (``"1.5"``) is numbers: tabpfn accepts it in a
    pandas Series or an object array (scikit-learn's ``y_numeric`` converts
    it), so it passes unchanged there; in a list or a numpy string array,
    where tabpfn's own ``fit`` fails on it in ``np.mean``, it is returned
    converted to float64, the numbers the Series would give. Any other text,
    bytes, dates or timedeltas are refused, with the first offending value.

    Args:
        y: The target as given to ``fit`` (array-like, list, pandas Series).

    Returns:
        ``y`` itself, or ``y`` as float64 where it is a list or string array
        of numbers as text.

    Raises:
        InvalidInputError: ``y`` holds text that is not a number, dates or timedeltas.
    """
    try:
        values = np.asarray(y)
    except (TypeError, ValueError):
        return y  # ragged or exotic input: scikit-learn's validation reports it
    kind = values.dtype.kind
    if kind in "USO":
        item = _first_non_number(values)
        if item is not None:
            what = "bytes" if isinstance(item, bytes) else "strings"
            raise InvalidInputError(
                f"y must be numeric (a regression target); got {what}, e.g. {item!r}"
            )
        return values.astype(np.float64) if kind in "US" else y
    if kind in _NON_NUMERIC_KINDS:
        what = _NON_NUMERIC_KINDS[kind]
        if values.size:
            what += f", e.g. {values.ravel()[0].item()!r}"
        raise InvalidInputError(f"y must be numeric (a regression target); got {what}")
    return y


def rows_of(X: Any) -> int:
    """The rows of ``X``: an array's or a frame's first axis, a list's length."""
    shape = getattr(X, "shape", None)
    if shape:
        return int(shape[0])
    return len(X) if hasattr(X, "__len__") else int(np.asarray(X).shape[0])


def check_sample_weight(sample_weight: Any, n_rows: int, *, where: str = "sample_weight") -> Any:
    """``sample_weight`` as a new float64 ``(n_rows,)`` array, checked as scikit-learn checks it.

    scikit-learn's ``_check_sample_weight`` semantics, with this library's
    errors: None stays None (every row counts once); a number is that weight
    for every row; anything else must be a one-dimensional array-like (a
    list, a numpy array, a pandas Series) of ``n_rows`` finite numbers
    ``>= 0``, not all 0. The caller's object is never modified: the array
    returned is a copy.

    Args:
        sample_weight: The weights as given to ``fit``.
        n_rows: The rows of ``X``.
        where: The name the errors give the weights.

    Returns:
        None, or the weights as a fresh float64 array of shape ``(n_rows,)``.

    Raises:
        InvalidSampleWeightError: Not numbers, not 1-D, another length than
            ``X``'s rows, NaN or infinite, negative, or all 0 (a ``ValueError``).
    """
    if sample_weight is None:
        return None
    if isinstance(sample_weight, numbers.Number) and not isinstance(sample_weight, complex):
        w_N = np.full(n_rows, float(sample_weight), dtype=np.float64)
    else:
        if hasattr(sample_weight, "toarray") or hasattr(sample_weight, "tocsr"):
            raise InvalidSampleWeightError(f"{where} must be dense, got a sparse matrix")
        try:
            w_N = np.array(sample_weight, dtype=np.float64, copy=True)
        except (TypeError, ValueError) as err:
            raise InvalidSampleWeightError(
                f"{where} must be numbers, got {type(sample_weight).__name__} ({err})"
            ) from None
        if w_N.ndim != 1:
            raise InvalidSampleWeightError(
                f"{where} must be a 1-D array of {n_rows} weights or a number, got shape "
                f"{w_N.shape}"
            )
        if w_N.shape[0] != n_rows:
            raise InvalidSampleWeightError(
                f"{where} has {w_N.shape[0]} weights for {n_rows} rows of X; give one per row"
            )
    if not np.all(np.isfinite(w_N)):
        raise InvalidSampleWeightError(f"{where} holds NaN or infinite weights")
    if np.any(w_N < 0):
        raise InvalidSampleWeightError(
            f"{where} holds negative weights (e.g. {w_N[w_N < 0][0]!r}); weights are "
            "multiplicities, >= 0"
        )
    if not np.any(w_N != 0):
        raise InvalidSampleWeightError(
            f"{where}: every weight is zero; sample weights must contain at least one "
            "non-zero number"
        )
    return w_N


def _shape(name: str, value: Any, caller: str) -> tuple[int, ...]:
    """The shape of an array-like (a DataFrame's, a list of rows' as numpy reads it)."""
    shape = getattr(value, "shape", None)
    if shape is None:
        try:
            shape = np.asarray(value).shape
        except ValueError:  # rows of different lengths (numpy refuses an inhomogeneous shape)
            raise InvalidInputError(f"{caller}: {name} has rows of different lengths") from None
    return tuple(shape)


def _first_rows(mask_N: np.ndarray) -> str:
    """``"row 3"``, or ``"2 rows (first: row 3)"``: where ``mask_N`` is set."""
    rows = np.flatnonzero(mask_N)
    return f"row {rows[0]}" if len(rows) == 1 else f"{len(rows)} rows (first: row {rows[0]})"


def check_leave_out_data(
    X: Any,
    y: Any,
    *,
    task: Literal["regression", "classification"],
    caller: str,
    X_test: Any = None,
    groups: Any = None,
) -> Any:
    """Refuses data whose rows a leave-out entry point cannot fold; returns the target to fold.

    Args:
        X: Features, ``(N, F)``: an array, a DataFrame or a list of rows.
        y: One target or label per row, ``(N,)`` (or ``(N, 1)``).
        task: ``"regression"`` (numeric, finite targets) or
            ``"classification"`` (any labels, none missing).
        caller: The entry point named in the messages.
        X_test: Query rows ``(Q, F)`` predicted by every fold, or None.
        groups: Group labels for a group splitter, one per row, or None.

    Returns:
        ``y``, or for a regression target of numbers written as text in a
        list or string array, ``y`` as float64 (:func:`check_numeric_target`).

    Raises:
        InvalidInputError: ``X`` or ``X_test`` not 2-D, ``X_test`` of another
            width, ``y`` not one value per row, a regression target that is not
            numbers or holds NaN or inf, a missing class label, or ``groups``
            not one per row; each names the argument and the first row.
    """
    X_shape = _shape("X", X, caller)
    if len(X_shape) != 2:
        raise InvalidInputError(
            f"{caller}: X must be 2-D (rows x features), got shape {X_shape}; "
            "reshape a single feature with X.reshape(-1, 1)"
        )
    n_rows, n_features = X_shape
    y_shape = _shape("y", y, caller)
    if len(y_shape) == 2 and y_shape[1] == 1:
        y = np.asarray(y).ravel()
    elif len(y_shape) != 1:
        raise InvalidInputError(
            f"{caller}: y must be 1-D (one target per row), got shape {y_shape}"
        )
    if y_shape[0] != n_rows:
        raise InvalidInputError(
            f"{caller}: X has {n_rows} rows and y {y_shape[0]} values; give one per row"
        )
    if task == "regression":
        try:
            y = check_numeric_target(y)
            values_N = np.asarray(y, dtype=np.float64)
        except (InvalidInputError, TypeError, ValueError) as err:
            raise InvalidInputError(f"{caller}: {err}") from None
        if not np.isfinite(values_N).all():
            raise InvalidInputError(
                f"{caller}: y holds NaN or inf in {_first_rows(~np.isfinite(values_N))}; "
                "every row's target is needed (its fold's context, or its residual)"
            )
    else:
        missing_N = np.asarray(pd.isna(pd.Series(np.asarray(y, dtype=object))), dtype=bool)
        if missing_N.any():
            raise InvalidInputError(
                f"{caller}: y has no label in {_first_rows(missing_N)} (NaN or None); "
                "every row's label is needed (its fold's context, or its score)"
            )
    if X_test is not None:
        test_shape = _shape("X_test", X_test, caller)
        if len(test_shape) != 2 or test_shape[1] != n_features:
            raise InvalidInputError(
                f"{caller}: X_test has shape {test_shape} and X {X_shape}; give X_test "
                f"the same {n_features} feature columns"
            )
    if groups is not None and _shape("groups", groups, caller)[:1] != (n_rows,):
        raise InvalidInputError(
            f"{caller}: groups has shape {_shape('groups', groups, caller)}; give one group "
            f"label per row of X ({n_rows})"
        )
    return y


def check_leave_out_params(params: dict[str, Any] | None, n_rows: int, *, caller: str) -> Any:
    """The checked ``sample_weight`` of scikit-learn's ``params`` for a leave-out entry point.

    :func:`retrofit.cross_val_predict` and :func:`retrofit.prediction_intervals`
    take ``params`` as scikit-learn's ``cross_val_predict`` does; the one fit
    parameter the estimators have is ``sample_weight``.

    Args:
        params: ``{"sample_weight": w}``, ``{}`` or None.
        n_rows: The rows of ``X``.
        caller: The entry point named in the messages.

    Returns:
        None, or the weights as :func:`check_sample_weight` returns them.

    Raises:
        InvalidInputError: A parameter other than ``sample_weight``.
        InvalidSampleWeightError: Malformed weights.
    """
    params = dict(params or {})
    other = sorted(set(params) - {"sample_weight"})
    if other:
        raise InvalidInputError(
            f"{caller}: params takes sample_weight only (fit's one other parameter), got "
            + ", ".join(repr(name) for name in other)
        )
    return check_sample_weight(
        params.get("sample_weight"), n_rows, where=f"{caller}: sample_weight"
    )
