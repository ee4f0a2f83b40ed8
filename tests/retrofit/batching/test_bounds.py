"""The bounds of ragged batches' buckets: their defaults per device and their refusals.

On a CPU padding costs what it pads, so the default padded-share bound is 5 %;
on an accelerator 25 %. A CPU also bounds a bucket's estimated working set, so
that a fused forward stays cache-sized; an accelerator does not
(``retrofit.settings``). A tiny v3 checkpoint, float32.
"""

from __future__ import annotations

import pytest
import torch
from tabpfn import TabPFNRegressor

from retrofit import OTabPFNRegressor
from retrofit.batching.bounds import (
    DEFAULT_MAX_PADDED_FRACTION,
    default_max_bucket_bytes,
    default_max_padded_fraction,
)
from retrofit.batching.padding import icl_working_set_bytes, plan_buckets
from retrofit.batching.regression import predict_batched
from retrofit.errors import BatchInputError
from tests.helpers.exactness import MODEL_ULPS, assert_within_ulps
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


def test_a_bucket_stays_within_its_byte_budget_and_a_lone_dataset_is_never_refused():
    shapes = [(100, 10)] * 10
    row_bytes = icl_working_set_bytes((16,), torch.float32)
    assert row_bytes == 16 * 4 * 9
    budget = 330 * row_bytes  # three datasets of 110 rows
    buckets = plan_buckets(shapes, max_padded_fraction=0.0, row_bytes=row_bytes, max_bytes=budget)
    assert [len(b) for b in buckets] == [3, 3, 3, 1]
    assert plan_buckets([(5000, 10)], row_bytes=row_bytes, max_bytes=budget) == [[0]]
    assert len(plan_buckets(shapes, max_padded_fraction=0.0, row_bytes=row_bytes)) == 1


def test_the_byte_budget_binds_on_a_cpu_only_and_a_bad_budget_is_refused(host, monkeypatch):
    assert default_max_bucket_bytes("cpu") is not None
    assert default_max_bucket_bytes(torch.device("cuda", 0)) is None
    loose = predict_batched(host, *_lists(), max_padded_fraction=0.5, max_bucket_bytes=None)
    tight = predict_batched(host, *_lists(), max_padded_fraction=0.5, max_bucket_bytes=1)
    assert tight.stats.forwards == len(SHAPES) > loose.stats.forwards  # one dataset a bucket
    for a, b in zip(tight.results, loose.results, strict=True):
        # Only the buckets moved: within a float32 forward's rounding (the means
        # come back as float64 arrays, so the ulps are named as float32's).
        assert_within_ulps(
            torch.from_numpy(a),
            torch.from_numpy(b),
            ulps=MODEL_ULPS[torch.float32],
            dtype=torch.float32,
        )

    def no_fit(*args, **kwargs):
        raise AssertionError("fitted before the budget was checked")

    monkeypatch.setattr(TabPFNRegressor, "fit", no_fit)
    for bad in (0, -1, 1.5, "8M", True):
        with pytest.raises(BatchInputError, match="max_bucket_bytes must be"):
            predict_batched(host, *_lists(), max_bucket_bytes=bad)
