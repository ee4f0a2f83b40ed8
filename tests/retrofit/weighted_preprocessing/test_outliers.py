"""tabpfn's outlier clipping fitted on weighted train rows, against the rows repeated.

The clipping bounds are a mean and a sample standard deviation (twice): with
integer weights they are the repeated rows' to rounding, asserted within
``SUM_ULPS`` float64 ulps of the data's scale (``tests/helpers/weighted_fits.py``),
and so are the clipped rows.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tabpfn.preprocessing.datamodel import FeatureSchema
from tabpfn.preprocessing.torch.pipeline_interface import TorchPreprocessingPipeline
from tabpfn.preprocessing.torch.steps import TorchShuffleFeaturesStep, TorchSoftClipOutliersStep

from retrofit.errors import UnsupportedWeightingError
from retrofit.weighted_preprocessing.outliers import (
    WeightedSoftClipOutliersStep,
    weighted_device_pipeline,
)
from tests.helpers.exactness import assert_within_ulps
from tests.helpers.weighted_fits import SUM_ULPS


def _rows(seed: int) -> tuple[torch.Tensor, torch.Tensor, np.ndarray]:
    rng = np.random.default_rng(seed)
    train = rng.standard_t(2, size=(50, 3)) * 3
    train[rng.random(train.shape) < 0.1] = np.nan
    test = rng.standard_t(2, size=(15, 3)) * 6
    w_N = rng.integers(1, 5, size=50).astype(np.float64)
    return torch.as_tensor(train), torch.as_tensor(test), w_N


def _clip(step, train: torch.Tensor, test: torch.Tensor) -> torch.Tensor:
    pipeline = TorchPreprocessingPipeline([(step, None)])
    schema = FeatureSchema.from_only_categorical_indices([], train.shape[1])
    return pipeline(torch.cat([train, test]), schema, num_train_rows=len(train)).x


def test_weighted_clipping_is_the_repeated_rows_clipping_to_rounding():
    for seed in range(5):
        train, test, w_N = _rows(seed)
        repeated = train[torch.as_tensor(np.repeat(np.arange(50), w_N.astype(int)))]
        expected = _clip(TorchSoftClipOutliersStep(n_sigma=1.5), repeated, test)
        got = _clip(WeightedSoftClipOutliersStep(1.5, w_N), train, test)
        got_train = got[:50][torch.as_tensor(np.repeat(np.arange(50), w_N.astype(int)))]
        scale = float(np.nanmax(np.abs(np.concatenate([train, test]))))
        got_rows = torch.cat([got_train, got[50:]]).nan_to_num(0)
        assert_within_ulps(got_rows, expected.nan_to_num(0), ulps=SUM_ULPS, scale=scale)
        clipped = (expected[len(repeated) :] != test).any()
        assert clipped  # the test rows reach the bounds, so the bounds are compared


def test_the_weights_move_the_bounds():
    train, test, w_N = _rows(7)
    plain = _clip(WeightedSoftClipOutliersStep(1.5, np.ones(50)), train, test)
    weighted = _clip(WeightedSoftClipOutliersStep(1.5, w_N), train, test)
    assert not torch.allclose(plain[50:], weighted[50:])


def test_a_context_of_weight_at_most_one_is_not_clipped_as_tabpfn_leaves_one_row():
    train = torch.tensor([[1.0], [50.0]])
    test = torch.tensor([[1e6]])
    out = _clip(WeightedSoftClipOutliersStep(1.0, np.array([0.5, 0.5])), train, test)
    assert torch.equal(out, torch.cat([train, test]))


def test_the_device_pipeline_gets_the_weighted_clipping_and_refuses_other_device_steps():
    w_N = np.full(4, 2.0)
    plain = TorchPreprocessingPipeline([(TorchSoftClipOutliersStep(n_sigma=3.0), None)])
    converted = weighted_device_pipeline(plain, 3.0, w_N)
    ((step, _),) = converted.steps
    assert isinstance(step, WeightedSoftClipOutliersStep) and step.n_sigma == 3.0
    assert weighted_device_pipeline(None, None, w_N) is None
    shuffle = TorchPreprocessingPipeline(
        [(TorchShuffleFeaturesStep(shuffle_method="shuffle", shuffle_index=0), None)]
    )
    with pytest.raises(UnsupportedWeightingError, match="ENABLE_GPU_PREPROCESSING"):
        weighted_device_pipeline(shuffle, None, w_N)


def test_a_clipping_fitted_on_other_rows_than_the_weights_is_refused():
    train, test, _ = _rows(8)
    with pytest.raises(UnsupportedWeightingError, match="50 train rows"):
        _clip(WeightedSoftClipOutliersStep(2.0, np.ones(49)), train, test)
