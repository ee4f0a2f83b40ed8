"""The cheapest retrofit estimator, for tests that reach a refusal through ``fit``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from retrofit.regressor import OTabPFNRegressor

__all__ = ["small_regressor"]


def small_regressor(model_path: str | Path, **kwargs: Any) -> OTabPFNRegressor:
    """``OTabPFNRegressor`` on ``model_path`` with one estimator, float32, on the CPU."""
    return OTabPFNRegressor(
        model_path=str(model_path),
        n_estimators=1,
        device="cpu",
        inference_precision=torch.float32,
        **kwargs,
    )
