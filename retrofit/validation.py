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
    for item in values.ravel():
        if isinstance(item, (str, bytes)):
            return item
    return None


def check_numeric_target(y: Any) -> None:
    """Refuses a regression target that is not numbers.

    scikit-learn's ``y_numeric`` converts strings that look like numbers
    (``"1.5"``) and reports other strings as a float conversion failure; a
    regression target of strings is refused here instead, whatever they hold.

    Args:
        y: The target as given to ``fit`` (array-like, list, pandas Series).

    Raises:
        InvalidInputError: ``y`` holds strings, bytes, dates or timedeltas.
    """
    try:
        values = np.asarray(y)
    except (TypeError, ValueError):
        return  # ragged or exotic input: scikit-learn's validation reports it
    kind = values.dtype.kind
    if kind in _NON_NUMERIC_KINDS:
        what = _NON_NUMERIC_KINDS[kind]
        if values.size:
            what += f", e.g. {values.ravel()[0].item()!r}"
        raise InvalidInputError(f"y must be numeric (a regression target); got {what}")
    if kind == "O":
        item = _first_non_number(values)
        if item is not None:
            raise InvalidInputError(
                f"y must be numeric (a regression target); got strings, e.g. {item!r}"
            )
