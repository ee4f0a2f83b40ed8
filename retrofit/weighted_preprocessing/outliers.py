"""tabpfn's outlier clipping (its device-side step) fitted on weighted train rows.

tabpfn clips each numerical column of a member softly at ``mean +- n_sigma
std`` of its train rows, twice (the second pass without the first pass's
outliers), at every forward. Weighted, the mean is ``sum w x / sum w`` and
the variance ``sum w (x - mean)^2 / (sum w - 1)`` over each column's non-NaN
rows (tabpfn's sample variance of the repeated rows), and a context of at
most one row (``sum w <= 1``) is not clipped, as tabpfn leaves a single row.

Shape letters: T train rows, B members in the batch, C columns.
"""

from __future__ import annotations

import numpy as np
import torch
from tabpfn.preprocessing.torch.pipeline_interface import TorchPreprocessingPipeline
from tabpfn.preprocessing.torch.steps import TorchSoftClipOutliersStep

from retrofit.errors import UnsupportedWeightingError

__all__ = ["WeightedSoftClipOutliersStep", "weighted_device_pipeline"]


def _weighted_mean_and_std(
    x_TBC: torch.Tensor, w_T11: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per column over its non-NaN rows: the weighted mean and sample standard deviation."""
    missing_TBC = torch.isnan(x_TBC)
    w_TBC = torch.where(missing_TBC, torch.zeros_like(x_TBC), w_T11.expand_as(x_TBC))
    total_BC = w_TBC.sum(dim=0)
    values_TBC = torch.where(missing_TBC, torch.zeros_like(x_TBC), x_TBC)
    mean_BC = (values_TBC * w_TBC).sum(dim=0) / total_BC.clamp(min=1.0)
    squares_TBC = torch.where(
        missing_TBC, torch.zeros_like(x_TBC), torch.square(x_TBC - mean_BC) * w_TBC
    )
    variance_BC = squares_TBC.sum(dim=0) / (total_BC - 1).clamp(min=1.0)
    return mean_BC, torch.sqrt(variance_BC)


class WeightedSoftClipOutliersStep(TorchSoftClipOutliersStep):
    """tabpfn's outlier clipping whose bounds count train row ``j`` ``row_weights[j]`` times.

    Args:
        n_sigma: Standard deviations from the mean where clipping starts.
        row_weights: ``(T,)`` positive weights of the member's train rows.
    """

    def __init__(self, n_sigma: float, row_weights: np.ndarray) -> None:
        super().__init__(n_sigma=n_sigma)
        self.n_sigma = n_sigma
        self.row_weights = np.asarray(row_weights, dtype=np.float64)

    def _fit(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        x_TBC = x
        if x_TBC.shape[0] != len(self.row_weights):
            raise UnsupportedWeightingError(
                f"row weights: the outlier clipping was fitted on {x_TBC.shape[0]} train rows "
                f"but the weights cover {len(self.row_weights)}"
            )
        w_T11 = torch.as_tensor(self.row_weights, dtype=x_TBC.dtype, device=x_TBC.device)
        w_T11 = w_T11.reshape(-1, *([1] * (x_TBC.ndim - 1)))
        if float(self.row_weights.sum()) <= 1:
            infinite = torch.full(
                x_TBC.shape[1:], torch.inf, dtype=x_TBC.dtype, device=x_TBC.device
            )
            return {"lower": -infinite, "upper": infinite}
        mean, std = _weighted_mean_and_std(x_TBC, w_T11)
        outlier_TBC = (x_TBC > mean + std * self.n_sigma) | (x_TBC < mean - std * self.n_sigma)
        clean_TBC = torch.where(outlier_TBC, torch.full_like(x_TBC, torch.nan), x_TBC)
        mean, std = _weighted_mean_and_std(clean_TBC, w_T11)
        cut_off = std * self.n_sigma
        return {"lower": mean - cut_off, "upper": mean + cut_off}


def weighted_device_pipeline(
    pipeline: TorchPreprocessingPipeline | None, n_sigma: float | None, row_weights: np.ndarray
) -> TorchPreprocessingPipeline | None:
    """A member's device pipeline with its outlier clipping weighted (changed in place).

    tabpfn builds it with only the outlier clipping unless its GPU
    preprocessing is on, which the weighted fit refuses before this.

    Raises:
        UnsupportedWeightingError: A device step other than the outlier clipping.
    """
    if pipeline is None:
        return None
    steps = []
    for step, modalities in pipeline.steps:
        if type(step) is TorchSoftClipOutliersStep and n_sigma is not None:
            step = WeightedSoftClipOutliersStep(n_sigma, row_weights)
        elif not isinstance(step, WeightedSoftClipOutliersStep):
            raise UnsupportedWeightingError(
                f"row weights: the device preprocessing step {type(step).__name__} has no "
                "weighted fit; set ENABLE_GPU_PREPROCESSING=False"
            )
        steps.append((step, modalities))
    pipeline.steps = steps
    return pipeline
