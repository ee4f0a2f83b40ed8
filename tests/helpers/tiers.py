"""A cross-section of an exhaustive test matrix in README's room, the rest of it in the slow tier.

A test parametrised over every host x mode x dtype x ... runs, in README's test
command, the cases named as its cross-section: together they hold every value of
every axis at least once (every host class, every mode, every dtype). The other
cases are marked ``slow`` (pyproject's ``addopts`` leaves them out of a bare
``pytest``); ``.ci/run`` runs the slow tier after README's command, and the
whole suite again on the AVX2 code paths with it, so CI runs every case.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import pytest
import torch

__all__ = ["cross_section"]


def _value_id(value: Any) -> str:
    if isinstance(value, torch.dtype):
        return str(value).removeprefix("torch.")
    if value is None or isinstance(value, str | int | float | bool):
        return str(value)
    return getattr(value, "__name__", None) or repr(value)


def cross_section(
    cases: Iterable[Sequence[Any]],
    fast: Iterable[Sequence[Any]],
    value_id: Callable[[Any], str | None] = lambda value: None,
) -> list[Any]:
    """The ``cases`` of a matrix as ``pytest.param``s, those not in ``fast`` marked ``slow``.

    Args:
        cases: Every case of the matrix, each a tuple of one value per axis (the
            test's argument names, in order).
        fast: The cross-section README's room runs: cases of the matrix that
            together hold every value of every axis.
        value_id: The id of a value, or None for the default one.

    Returns:
        One ``pytest.param`` per case, in the order of ``cases``, its id the
        values' ids joined by ``-`` (by default a dtype as ``float32``, a
        string, number or None as itself).

    Raises:
        ValueError: A fast case that is not a case of the matrix, or a value of
            an axis that no fast case holds (the cross-section would leave a
            host, a mode or a dtype to the slow tier alone).
    """
    cases = [tuple(case) for case in cases]
    fast = [tuple(case) for case in fast]
    if unknown := [case for case in fast if case not in cases]:
        raise ValueError(f"fast cases not in the matrix: {unknown}")
    for axis in range(len(cases[0])):
        if missed := {c[axis] for c in cases} - {c[axis] for c in fast}:
            raise ValueError(f"no fast case holds {sorted(map(str, missed))} (axis {axis})")
    return [
        pytest.param(
            *case,
            id="-".join(value_id(value) or _value_id(value) for value in case),
            marks=() if case in fast else pytest.mark.slow,
        )
        for case in cases
    ]
