"""Regression batches in the speedrun's shape: TabICL's tables, the project's, or a mix.

The speedrun trains on 1-2 tables a step of about 1,000 rows with 128 query
rows. :class:`TablePriorConfig` draws every regression batch in that shape
(:class:`hosttraining.priors.tabicl.TabICLPriorConfig`: tables, rows, query
rows, features) from one of two sources, chosen per step by the step's own
generator: TabICL's graph-SCM regression prior
(:func:`hosttraining.priors.tabicl.sample_tabicl_regression_batch`) with
probability ``tabicl_share``, else the project's regression prior
(:func:`hosttraining.priors.regression.sample_task` of ``project_version``).
``tabicl_share`` 1 is TabICL's prior alone, 0 the project's prior in the
speedrun's shape; which mix wins is for the development suites to say.

A batch is a function of the step's generator alone, as every prior's is
(:func:`hosttraining.priors.batch_stream.batch_rng`).

Shape suffixes as in :mod:`hosttraining.priors.regression`.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from hosttraining.priors.regression import TaskBatch, sample_task, stack_features
from hosttraining.priors.tabicl import (
    TabICLPriorConfig,
    sample_tabicl_regression_batch,
    table_shape,
)

__all__ = ["TablePriorConfig", "sample_project_table_batch", "sample_table_batch"]


@dataclasses.dataclass(frozen=True)
class TablePriorConfig:
    """Where the speedrun-shaped regression batches come from.

    Attributes:
        shape: Tables per batch, rows, query rows and features.
        tabicl_share: Probability that a step's batch is TabICL's (else the project's).
        project_version: Version of the project's prior (see
            :class:`hosttraining.priors.regression.PriorConfig`).
    """

    shape: TabICLPriorConfig = dataclasses.field(default_factory=TabICLPriorConfig)
    tabicl_share: float = 1.0
    project_version: int = 2

    def __post_init__(self) -> None:
        """Refuse a share outside ``[0, 1]``."""
        if not 0.0 <= self.tabicl_share <= 1.0:
            raise ValueError(f"tabicl_share must be in [0, 1], got {self.tabicl_share}")


def sample_project_table_batch(rng: np.random.Generator, cfg: TablePriorConfig) -> TaskBatch:
    """Draw ``cfg.shape.tables`` tasks of the project's prior in the speedrun's shape.

    Rows and context as :func:`hosttraining.priors.tabicl.table_shape`; features
    uniform in ``[min_features, max_features]``; the tasks share that shape.
    """
    shape = cfg.shape
    rows, num_train = table_shape(rng, shape)
    d = int(rng.integers(shape.min_features, shape.max_features + 1))
    xs, ys = [], []
    for _ in range(shape.tables):
        x_ND, y_N = sample_task(rng, rows, d, num_train, version=cfg.project_version)
        xs.append(x_ND)
        ys.append(y_N)
    y_RB = torch.from_numpy(np.stack(ys, axis=1).astype(np.float32))
    return TaskBatch(
        x_RBC=stack_features(xs), y_train_NB=y_RB[:num_train], y_test_TB=y_RB[num_train:]
    )


def sample_table_batch(rng: np.random.Generator, cfg: TablePriorConfig) -> TaskBatch:
    """One step's regression batch: TabICL's with probability ``tabicl_share``, else the project's.

    Args:
        rng: The step's generator (:func:`hosttraining.priors.batch_stream.batch_rng`).
        cfg: The sources and the batch shape.

    Returns:
        A :class:`hosttraining.priors.regression.TaskBatch` of ``cfg.shape.tables`` tasks.
    """
    if rng.random() < cfg.tabicl_share:
        return sample_tabicl_regression_batch(rng, cfg.shape)
    return sample_project_table_batch(rng, cfg)
