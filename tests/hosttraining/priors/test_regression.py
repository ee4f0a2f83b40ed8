"""The regression prior the hosts learn from: tasks, batches, version 2 (``priors.regression``)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hosttraining.priors.batch_stream import batch_rng
from hosttraining.priors.regression import (
    _LOSSY_KINDS,
    PRIOR_V2,
    PriorConfig,
    _features_v2,
    _noise_ratio_v2,
    _random_function_v2,
    sample_batch,
    sample_task,
)


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


def test_v2_tasks_are_seeded_finite_and_normalised():
    for seed in range(8):
        a = sample_task(np.random.default_rng(seed), 150, 5, 110, version=2)
        b = sample_task(np.random.default_rng(seed), 150, 5, 110, version=2)
        assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
        assert np.isfinite(a[0]).all() and np.isfinite(a[1]).all()
        assert abs(a[1][:110].mean()) < 1e-9
    other = sample_task(np.random.default_rng(99), 150, 5, 110, version=2)
    assert not np.array_equal(other[1], a[1])


def test_lossy_features_before_the_target_make_it_a_function_of_the_table():
    before, lossy = 0, 0
    for seed in range(40):
        rng = np.random.default_rng(seed)
        x_ND, seen_ND, lossy_D, before_D = _features_v2(rng, 300, 4)
        lossy += lossy_D.sum()
        before += before_D.sum()
        for j in np.flatnonzero(before_D):
            # Each shown value maps to one value the target reads.
            for value in np.unique(x_ND[:, j]):
                assert np.ptp(seen_ND[x_ND[:, j] == value, j]) < 1e-12
        if before_D.all():
            # A noise-free target of such inputs is a function of the rows shown.
            y_N = _random_function_v2(rng, seen_ND)
            _, inverse = np.unique(x_ND, axis=0, return_inverse=True)
            for g in np.unique(inverse):
                assert np.ptp(y_N[inverse == g]) < 1e-9
    assert lossy > 20 and before / lossy > 0.75  # most lossy features precede the target
    assert len(_LOSSY_KINDS) == 4


def test_design_of_experiments_inputs_have_few_levels():
    few = 0
    total = 0
    for seed in range(60):
        x_ND, _ = sample_task(np.random.default_rng(seed), 800, 4, 600, version=2)
        for j in range(4):
            total += 1
            few += len(np.unique(x_ND[:, j])) <= 30
    assert 0.25 < few / total < 0.9  # many designed/coded columns, not all


def test_v2_batches_favour_200_to_4000_rows():
    rows = [sample_batch(np.random.default_rng([5, i]), PRIOR_V2).x_RBC.shape[0] for i in range(60)]
    assert min(rows) >= PRIOR_V2.min_rows and max(rows) <= PRIOR_V2.max_rows
    assert np.mean([200 <= r <= 4000 for r in rows]) > 0.6


def test_v2_draws_many_low_noise_tasks_and_low_noise_is_v2_only():
    rng = np.random.default_rng(0)
    ratios = np.array([_noise_ratio_v2(rng, low_noise=False) for _ in range(2000)])
    assert 0.4 < np.mean(ratios <= 0.05) < 0.5  # version 1: about 0.21
    assert all(_noise_ratio_v2(rng, low_noise=True) <= 0.05 for _ in range(200))
    assert PRIOR_V2.version == 2
    with pytest.raises(ValueError, match="no prior version"):
        sample_task(np.random.default_rng(0), 50, 2, 30, version=1, low_noise=True)
