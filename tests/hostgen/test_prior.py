"""The prior the embedded host is pretrained on: tasks and batches (``hostgen.prior``)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hostgen.batch_stream import batch_rng
from hostgen.prior import PriorConfig, sample_batch, sample_task


def test_task_is_finite_shaped_and_normalised_on_context():
    for seed in range(20):
        x_ND, y_N = sample_task(np.random.default_rng(seed), n=120, d=6, num_train=90)
        assert x_ND.shape == (120, 6) and y_N.shape == (120,)
        assert np.isfinite(x_ND).all() and np.isfinite(y_N).all()
        assert abs(y_N[:90].mean()) < 1e-9
        assert y_N[:90].std() == pytest.approx(1.0, abs=1e-9) or y_N[:90].std() == 0.0


def test_batch_shapes_dtype_and_determinism():
    cfg = PriorConfig(max_rows=300)
    for step in range(10):
        batch = sample_batch(batch_rng(3, step), cfg)
        r, b, c = batch.x_RBC.shape
        assert batch.y_train_NB.shape == (batch.num_train, b)
        assert batch.y_test_TB.shape == (r - batch.num_train, b)
        assert 1 <= c <= cfg.max_features and cfg.min_rows <= r <= cfg.max_rows
        assert batch.x_RBC.dtype == torch.float32
        assert torch.isfinite(batch.x_RBC).all() and torch.isfinite(batch.y_test_TB).all()
        mean_B = batch.y_train_NB.double().mean(0)
        assert torch.allclose(mean_B, torch.zeros_like(mean_B), atol=1e-4)
    again = sample_batch(batch_rng(3, 7), cfg)
    first = sample_batch(batch_rng(3, 7), cfg)
    other = sample_batch(batch_rng(3, 8), cfg)
    assert torch.equal(again.x_RBC, first.x_RBC)
    assert again.x_RBC.shape != other.x_RBC.shape or not torch.equal(again.x_RBC, other.x_RBC)


def test_prior_is_varied_like_real_tables():
    rng = np.random.default_rng(0)
    few_values, skewed = 0, 0
    n_cols = 0
    for _ in range(60):
        x_ND, y_N = sample_task(rng, n=200, d=5, num_train=150)
        for j in range(5):
            n_cols += 1
            few_values += len(np.unique(x_ND[:, j])) <= 10
        third = np.mean(y_N[:150] ** 3)
        skewed += abs(third) > 1.0
    assert 0.05 < few_values / n_cols < 0.6  # some categorical-like columns, not all
    assert skewed >= 3  # some skewed targets
