"""Checks of the data handed to the estimator, made once at its boundary.

Each check raises :class:`retrofit.errors.InvalidInputError` with a message
that says what is wrong; what passes is left to scikit-learn's own
validation (shapes, NaN and inf).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from retrofit.errors import InvalidInputError

__all__ = ["check_numeric_target"]

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
