"""Speedrun-shaped regression batches: each step's source is TabICL's or the project's prior."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hosttraining.priors.mixed import (
    TablePriorConfig,
    sample_project_table_batch,
    sample_table_batch,
)
from hosttraining.priors.tabicl import TabICLPriorConfig, sample_tabicl_regression_batch

SHAPE = TabICLPriorConfig(min_rows=60, max_rows=100, test_rows=20, max_features=6)


def _same(a, b) -> bool:
    return torch.equal(a.x_RBC, b.x_RBC) and torch.equal(a.y_test_TB, b.y_test_TB)


def test_a_mix_draws_each_steps_batch_from_one_source_by_the_steps_generator() -> None:
    cfg = TablePriorConfig(shape=SHAPE, tabicl_share=0.5)
    sources = []
    for step in range(8):
        batch = sample_table_batch(np.random.default_rng([3, step]), cfg)
        rows, tables, _ = batch.x_RBC.shape
        assert tables == SHAPE.tables and SHAPE.min_rows <= rows <= SHAPE.max_rows
        assert batch.y_test_TB.shape == (SHAPE.test_rows, SHAPE.tables)
        # The share's draw comes first; the rest of the generator is the source's.
        rng = np.random.default_rng([3, step])
        tabicl_turn = rng.random() < 0.5
        state = rng.bit_generator.state
        tabicl = sample_tabicl_regression_batch(rng, SHAPE)
        rng.bit_generator.state = state
        project = sample_project_table_batch(rng, cfg)
        assert _same(batch, tabicl if tabicl_turn else project)
        assert not _same(tabicl, project)
        sources.append(tabicl_turn)
    assert 0 < sum(sources) < len(sources), sources  # both sources occur at share 0.5


def test_project_tables_are_normalised_on_the_context_and_the_share_is_bounded() -> None:
    cfg = TablePriorConfig(shape=SHAPE, tabicl_share=0.0)
    batch = sample_table_batch(np.random.default_rng([4, 0]), cfg)
    assert torch.isfinite(batch.x_RBC).all() and batch.x_RBC.shape[2] <= SHAPE.max_features
    assert torch.allclose(batch.y_train_NB.mean(0), torch.zeros(SHAPE.tables), atol=1e-4)
    for share in (-0.1, 1.5):
        with pytest.raises(ValueError, match="tabicl_share"):
            TablePriorConfig(shape=SHAPE, tabicl_share=share)
