"""The padded-share bound of ragged batches: its default per device and its refusals.

On a CPU padding costs what it pads, so the default bound is 5 %; on an
accelerator 25 % (``retrofit.settings``). A tiny v3 checkpoint, float32.
"""

from __future__ import annotations

import pytest
import torch
from tabpfn import TabPFNRegressor

from retrofit import OTabPFNRegressor
from retrofit.batching.predict import predict_batched
from retrofit.errors import BatchInputError
from retrofit.settings import DEFAULT_MAX_PADDED_FRACTION, default_max_padded_fraction
from tests.helpers.padding import ragged_tables

# (train, test, features): lengths close enough that a 50 % bound shares buckets.
SHAPES = [(40, 9, 3), (38, 8, 4), (30, 7, 2), (24, 5, 3), (20, 4, 5), (12, 3, 2)]


@pytest.fixture(scope="module")
def host(tiny_v3_path):
    est = OTabPFNRegressor(
        model_path=str(tiny_v3_path),
        device="cpu",
        inference_precision=torch.float32,
        n_estimators=2,
    )
    X_train, y_train, _ = _lists()
    return est.fit(X_train[0], y_train[0]).batched_host()


def _lists():
    sets = ragged_tables(SHAPES)
    return [s[0] for s in sets], [s[1] for s in sets], [s[2] for s in sets]


def test_the_default_bound_pads_little_on_a_cpu_and_more_on_an_accelerator(host):
    assert default_max_padded_fraction("cpu") == 0.05
    assert default_max_padded_fraction(torch.device("cuda", 1)) == DEFAULT_MAX_PADDED_FRACTION
    default = predict_batched(host, *_lists()).stats
    wide = predict_batched(host, *_lists(), max_padded_fraction=0.5).stats
    assert default.padded_cell_fraction <= 0.05
    assert wide.padded_cell_fraction > 0.05 and wide.forwards < default.forwards


@pytest.mark.parametrize("bound", [1.0, -0.1, float("nan"), "0.1", True])
def test_a_bad_bound_is_refused_before_anything_is_fitted(host, bound, monkeypatch):
    def no_fit(*args, **kwargs):
        raise AssertionError("fitted before the bound was checked")

    monkeypatch.setattr(TabPFNRegressor, "fit", no_fit)
    with pytest.raises(BatchInputError, match=r"max_padded_fraction must be in \[0, 1\)"):
        predict_batched(host, *_lists(), max_padded_fraction=bound)
