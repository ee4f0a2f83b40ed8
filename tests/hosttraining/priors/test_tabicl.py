"""The TabICL prior adapter: well-formed, step-seeded batches that carry signal."""

from __future__ import annotations

import random

import numpy as np
import torch
from sklearn.ensemble import RandomForestClassifier

from hosttraining.priors.classes import IGNORE
from hosttraining.priors.tabicl import TabICLPriorConfig, sample_tabicl_batch

SMALL = TabICLPriorConfig(min_rows=60, max_rows=100, test_rows=20, max_features=6)


def test_tabicl_batches_are_well_formed_seeded_by_the_step_alone_and_leave_global_rngs() -> None:
    np.random.seed(5)
    random.seed(5)
    torch.manual_seed(5)
    before = (np.random.get_state()[1].copy(), random.getstate(), torch.get_rng_state())
    for i in range(3):
        batch = sample_tabicl_batch(np.random.default_rng([9, i]), SMALL)
        rows, tables, features = batch.x_RBC.shape
        assert tables == SMALL.tables and 1 <= features <= SMALL.max_features
        assert SMALL.min_rows <= rows <= SMALL.max_rows
        assert batch.num_train == rows - SMALL.test_rows and batch.y_test_TB.shape == (20, 2)
        assert batch.x_RBC.dtype == torch.float32 and torch.isfinite(batch.x_RBC).all()
        assert batch.y_test_TB.dtype == torch.int64
        for b, k in enumerate(batch.n_classes_B):
            assert 2 <= k <= SMALL.max_classes
            context = batch.y_train_NB[:, b].long()
            assert sorted(context.unique().tolist()) == list(range(k))
            query = batch.y_test_TB[:, b]
            assert ((query == IGNORE) | ((query >= 0) & (query < k))).all()
    after = (np.random.get_state()[1], random.getstate(), torch.get_rng_state())
    assert np.array_equal(before[0], after[0]) and before[1] == after[1]
    assert torch.equal(before[2], after[2])
    for other in (6, 7):  # whatever the global generators hold, the step's batch is the same
        np.random.seed(other)
        random.seed(other)
        torch.manual_seed(other)
        again = sample_tabicl_batch(np.random.default_rng([9, 2]), SMALL)
        assert torch.equal(again.x_RBC, batch.x_RBC)
        assert torch.equal(again.y_test_TB, batch.y_test_TB)


def test_tabicl_tables_carry_signal_a_random_forest_finds() -> None:
    """The tooling check of DESIGN section 7: the tables must teach something."""
    cfg = TabICLPriorConfig(min_rows=200, max_rows=300, test_rows=80, max_features=8)
    forest, majority = [], []
    for i in range(4):
        batch = sample_tabicl_batch(np.random.default_rng([11, i]), cfg)
        n = batch.num_train
        for b in range(batch.x_RBC.shape[1]):
            x_ND = batch.x_RBC[:, b].numpy()
            y_tr, y_te = batch.y_train_NB[:, b].long().numpy(), batch.y_test_TB[:, b].numpy()
            keep = y_te != IGNORE
            rf = RandomForestClassifier(n_estimators=50, random_state=0, n_jobs=1)
            forest.append(rf.fit(x_ND[:n], y_tr).score(x_ND[n:][keep], y_te[keep]))
            majority.append(np.mean(y_te[keep] == np.bincount(y_tr).argmax()))
    assert np.mean(forest) > np.mean(majority) + 0.15, (np.mean(forest), np.mean(majority))
