"""Checks of the data handed to the estimator, made once at its boundary.

Each check raises :class:`retrofit.errors.InvalidInputError` (or its
subclass :class:`~retrofit.errors.InvalidSampleWeightError`) with a message
that says what is wrong; what passes is left to scikit-learn's own
validation (shapes, NaN and inf).
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np

from retrofit.errors import InvalidInputError, InvalidSampleWeightError

__all__ = ["check_numeric_target", "check_sample_weight", "rows_of"]

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
