"""The TabICL prior adapter: well-formed, step-seeded batches (classes, regression) with signal."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch
from sklearn.ensemble import RandomForestClassifier, RandomForestRegressor

from hosttraining.common.in_prior import HELDOUT_KEY, relative_rmse
from hosttraining.priors.classes import IGNORE
from hosttraining.priors.tabicl import (
    TabICLPriorConfig,
    heldout_tabicl_regression_tasks,
    sample_tabicl_batch,
    sample_tabicl_regression_batch,
)

ROOT = Path(__file__).resolve().parents[3]
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


def test_tabicl_regression_batches_are_seeded_and_normalised_on_the_context() -> None:
    for i in range(2):
        batch = sample_tabicl_regression_batch(np.random.default_rng([9, i]), SMALL)
        rows, tables, features = batch.x_RBC.shape
        assert tables == SMALL.tables and 1 <= features <= SMALL.max_features
        assert SMALL.min_rows <= rows <= SMALL.max_rows and batch.y_test_TB.shape == (20, 2)
        assert batch.num_train == rows - SMALL.test_rows
        assert batch.x_RBC.dtype == torch.float32 and torch.isfinite(batch.x_RBC).all()
        # z-normalised on the context rows alone (tabicl standardises the whole table).
        context = batch.y_train_NB.double()
        assert torch.allclose(context.mean(0), torch.zeros(2, dtype=torch.float64), atol=1e-5)
        assert torch.allclose(context.std(0, correction=0), torch.ones(2, dtype=torch.float64))
        np.random.seed(i + 20)  # the global generators do not change the step's batch
        again = sample_tabicl_regression_batch(np.random.default_rng([9, i]), SMALL)
        assert torch.equal(again.x_RBC, batch.x_RBC)
        assert torch.equal(again.y_test_TB, batch.y_test_TB)


def test_held_out_tabicl_regression_tables_carry_signal_a_random_forest_finds() -> None:
    """DESIGN section 7's tooling check for the regressor's held-out tables."""
    cfg = TabICLPriorConfig(min_rows=200, max_rows=300, test_rows=80, max_features=8)
    tasks = heldout_tabicl_regression_tasks(4, cfg, key=HELDOUT_KEY)
    assert tasks[0].x_ND.shape[0] == tasks[0].y_N.shape[0] and tasks[0].num_train >= 120
    again = heldout_tabicl_regression_tasks(1, cfg, key=HELDOUT_KEY)[0]
    assert np.array_equal(again.x_ND, tasks[0].x_ND) and np.array_equal(again.y_N, tasks[0].y_N)
    rel = []
    for task in tasks:
        n = task.num_train
        rf = RandomForestRegressor(n_estimators=50, random_state=0, n_jobs=1)
        rel.append(relative_rmse(rf.fit(task.x_ND[:n], task.y_N[:n]).predict(task.x_ND[n:]), task))
    assert np.mean(rel) < 0.8, rel


def test_a_steps_tables_do_not_depend_on_the_processes_string_hash_seed() -> None:
    """tabicl walks its feature groups in set order; the adapter makes that order sorted."""
    code = (
        "import hashlib, numpy as np\n"
        "from hosttraining.priors.tabicl import TabICLPriorConfig, sample_tabicl_batch, "
        "sample_tabicl_regression_batch\n"
        "cfg = TabICLPriorConfig(min_rows=60, max_rows=100, test_rows=20, max_features=6)\n"
        "h = hashlib.sha256()\n"
        "for i in range(3):\n"
        "    for draw in (sample_tabicl_batch, sample_tabicl_regression_batch):\n"
        "        b = draw(np.random.default_rng([9, i]), cfg)\n"
        "        h.update(b.x_RBC.numpy().tobytes()); h.update(b.y_test_TB.numpy().tobytes())\n"
        "print(h.hexdigest())\n"
    )
    digests = set()
    for hash_seed in ("0", "1"):  # two seeds whose orders of {"x", "y"} differ
        env = {**os.environ, "PYTHONHASHSEED": hash_seed, "OMP_NUM_THREADS": "1"}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
        done = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        )
        digests.add(done.stdout.strip())
    assert len(digests) == 1, digests
