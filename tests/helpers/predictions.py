"""Comparing what ``predict`` returns, for every output type, up to a bound in ulps."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from tests.helpers.exactness import assert_within_ulps

__all__ = ["assert_same_prediction", "flat_prediction"]


def flat_prediction(result: Any) -> list[np.ndarray]:
    """Every array of a prediction (the ``"full"`` dict, a list of quantiles, or one array)."""
    if isinstance(result, dict):
        parts = [result[k] for k in ("mean", "median", "mode")] + list(result["quantiles"])
        return [*parts, result["logits"].numpy()]
    if isinstance(result, list):
        return list(result)
    return [result]


def assert_same_prediction(actual: Any, expected: Any, *, ulps: float) -> float:
    """Asserts every array of ``actual`` is within ``ulps`` of ``expected``'s (its own dtype).

    Returns:
        The largest deviation measured, in ulps.
    """
    assert type(actual) is type(expected)
    worst = 0.0
    for a, e in zip(flat_prediction(actual), flat_prediction(expected), strict=True):
        a, e = np.asarray(a), np.asarray(e)
        assert a.shape == e.shape and a.dtype == e.dtype
        worst = max(worst, assert_within_ulps(torch.from_numpy(a), torch.from_numpy(e), ulps=ulps))
    return worst
