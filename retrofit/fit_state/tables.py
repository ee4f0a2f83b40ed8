"""The training inputs of a fit, stored as data only: what a fit state replays.

A fit state keeps the ``X`` and ``y`` a fit was given, in a form that loads
without running code: numeric, text and date numpy arrays as ``.npy``
(written and read with ``allow_pickle=False``), pandas frames and series as
Parquet, and lists and object arrays of plain values (``str``, ``int``,
``float`` with NaN and infinities, ``bool``, ``None``; numpy scalars count as
their Python values) as JSON. Every encoding is decoded again before it is
accepted and must give back an equal value of the same type, dtypes and
column names included; anything else (polars
frames, tensors, object cells of other types) is refused with a one-line
:class:`~retrofit.errors.FitStateError` naming the way out.
"""

from __future__ import annotations

import copy
import io
import json
import math
from typing import Any

import numpy as np
import pandas as pd

from retrofit.errors import FitStateError
from retrofit.fit_state.bounds import check_parquet

__all__ = ["copy_input", "decode_table", "encode_table"]

#: numpy dtype kinds that ``.npy`` stores without pickling (bool, ints, floats,
#: complex, text, bytes, datetimes, timedeltas).
_NPY_KINDS = frozenset("biufcUSMm")
_PLAIN_CELL_TYPES = (str, bool, int, float, type(None))


def copy_input(value: Any) -> Any:
    """A copy of a fit input, so that later changes to the caller's object do not leak in."""
    if isinstance(value, np.ndarray | pd.DataFrame | pd.Series):
        return value.copy()
    if isinstance(value, list):
        return copy.deepcopy(value)
    return value


def _same_cell(a: Any, b: Any) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    return a == b


def _same_nested(a: Any, b: Any) -> bool:
    if isinstance(a, list):
        return (
            isinstance(b, list)
            and len(a) == len(b)
            and all(_same_nested(x, y) for x, y in zip(a, b, strict=True))
        )
    return _same_cell(a, b)


def _same(original: Any, decoded: Any) -> bool:
    """Whether ``decoded`` is ``original`` again: type, dtypes, names and every value."""
    if type(original) is not type(decoded):
        return False
    if isinstance(original, pd.DataFrame | pd.Series):
        try:
            check = (
                pd.testing.assert_frame_equal
                if isinstance(original, pd.DataFrame)
                else pd.testing.assert_series_equal
            )
            check(original, decoded, check_exact=True, check_index_type=True)
        except AssertionError:
            return False
        return True
    if isinstance(original, np.ndarray):
        if original.dtype != decoded.dtype or original.shape != decoded.shape:
            return False
        if original.dtype == object:
            pairs = zip(original.flat, decoded.flat, strict=True)
            return all(_same_cell(_plain(a), b) for a, b in pairs)
        return bool(np.array_equal(original, decoded, equal_nan=original.dtype.kind in "fc"))
    return _same_nested(original, decoded)


def _npy_bytes(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return buffer.getvalue()


def _parquet_bytes(frame: pd.DataFrame) -> bytes:
    buffer = io.BytesIO()
    frame.to_parquet(buffer, engine="pyarrow")
    return buffer.getvalue()


def _encode(value: Any, member: str) -> tuple[dict[str, Any], dict[str, bytes]]:
    if isinstance(value, pd.DataFrame):
        name = f"{member}.parquet"
        return {"kind": "pandas.DataFrame", "member": name}, {name: _parquet_bytes(value)}
    if isinstance(value, pd.Series):
        if not isinstance(value.name, str | int | type(None)):
            raise TypeError(f"a series name of type {type(value.name).__name__}")
        name = f"{member}.parquet"
        frame = value.to_frame(name="values")
        return (
            {"kind": "pandas.Series", "member": name, "name": value.name},
            {name: _parquet_bytes(frame)},
        )
    if isinstance(value, np.ndarray) and value.dtype.kind in _NPY_KINDS:
        name = f"{member}.npy"
        return {"kind": "numpy", "member": name}, {name: _npy_bytes(value)}
    if isinstance(value, np.ndarray) and value.dtype == object:
        return {
            "kind": "numpy.object",
            "shape": list(value.shape),
            "cells": [_plain(cell) for cell in value.flat],
        }, {}
    if isinstance(value, list):
        return {"kind": "list", "values": value}, {}
    raise TypeError(f"an input of type {type(value).__module__}.{type(value).__qualname__}")


def _plain(cell: Any) -> Any:
    """A cell as the plain Python value JSON gives back (numpy scalars as their Python value)."""
    if isinstance(cell, np.generic) and cell.dtype.kind in "biufU":
        cell = cell.item()
    if isinstance(cell, str) and type(cell) is not str:
        cell = str(cell)
    if not isinstance(cell, _PLAIN_CELL_TYPES):
        raise TypeError(f"an object cell of type {type(cell).__name__}")
    return cell


def encode_table(value: Any, member: str, *, what: str) -> tuple[dict[str, Any], dict[str, bytes]]:
    """How ``value`` is stored: a JSON descriptor and the archive members it names.

    Args:
        value: A fit's ``X`` or ``y``.
        member: The stem of the member file names (``"X"``, ``"y"``).
        what: How to name the input in an error (``"X"``, ``"y"``).

    Raises:
        FitStateError: The input cannot be stored as data, or does not decode to itself.
    """
    way_out = "fit with a numpy array, a pandas DataFrame/Series or a list of plain values"
    try:
        descriptor, members = _encode(value, member)
        # Decoded from its JSON text, as a load will read it.
        descriptor = json.loads(json.dumps(descriptor, allow_nan=True))
        decoded = decode_table(descriptor, members, where="(check)")
    except (TypeError, ValueError, ImportError, FitStateError) as err:
        raise FitStateError(
            f"cannot save the fit state: {what} is stored as data only, and {err}; {way_out}"
        ) from err
    if not _same(value, decoded):
        raise FitStateError(
            f"cannot save the fit state: {what} ({type(value).__name__}) does not read back "
            f"identical from its stored form; {way_out}"
        )
    return descriptor, members


def decode_table(descriptor: dict[str, Any], members: dict[str, bytes], *, where: str) -> Any:
    """The input ``descriptor`` and its ``members`` stand for; no pickle is ever read.

    Raises:
        FitStateError: A malformed descriptor or member, or a Parquet member
            that would inflate past :mod:`retrofit.fit_state.bounds` (the
            message names ``where``).
    """
    kind = descriptor.get("kind")
    try:
        if kind in ("pandas.DataFrame", "pandas.Series"):
            data = members[descriptor["member"]]
            check_parquet(data, where=where, member=descriptor["member"])  # before any page
            frame = pd.read_parquet(io.BytesIO(data), engine="pyarrow")
            if kind == "pandas.DataFrame":
                return frame
            return frame["values"].rename(descriptor["name"])
        if kind == "numpy":
            return np.load(io.BytesIO(members[descriptor["member"]]), allow_pickle=False)
        if kind == "numpy.object":
            cells = descriptor["cells"]
            if not all(isinstance(cell, _PLAIN_CELL_TYPES) for cell in cells):
                raise ValueError("an object cell that is not a plain value")
            array = np.empty(len(cells), dtype=object)
            array[:] = cells
            return array.reshape(tuple(descriptor["shape"]))
        if kind == "list":
            return descriptor["values"]
    except (KeyError, TypeError, ValueError, OSError) as err:
        raise FitStateError(
            f"{where}: a stored training input ({kind}) is unreadable: "
            f"{type(err).__name__}: {str(err)[:160]}; save the fit state again"
        ) from err
    raise FitStateError(f"{where}: unknown stored input kind {kind!r}; save the fit state again")
