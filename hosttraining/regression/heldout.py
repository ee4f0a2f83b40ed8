"""The regressor's held-out curve: relative RMSE on both priors' held-out tasks.

A run of ``hosttraining.regression.pretrain --eval-tasks N`` scores its raw
and averaged weights at every checkpoint on two fixed suites, whichever prior
it trains on, so that runs on different priors are compared on the same tasks:

* ``project``: the project prior's low-noise held-out tasks
  (:func:`hosttraining.common.in_prior.heldout_tasks`, 200-1,500 rows, 2-10 features);
* ``tabicl``: TabICL's graph-SCM regression tables in the run's batch shape
  (:func:`hosttraining.priors.tabicl.heldout_tabicl_regression_tasks`).

The score is the mean relative RMSE (RMSE over the context-mean predictor's
RMSE, :func:`hosttraining.common.in_prior.relative_rmse`; 1 is predicting the
mean; the median beside it, since one table can put a linear baseline far
above 1 when a query row lies far outside the context's range),
of the mean of the host's bar distribution with features as the prior gives
them (no tabpfn preprocessing), as in :mod:`hosttraining.common.in_prior`. The
baselines are ridge, random forest and HGB as the development suite fits them
(:data:`hosttraining.regression.quality.BASELINES`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from hosttraining.common import heldout
from hosttraining.common.in_prior import (
    HELDOUT_KEY,
    HeldoutTask,
    heldout_tasks,
    host_predict,
    relative_rmse,
)
from hosttraining.priors.tabicl import TabICLPriorConfig, heldout_tabicl_regression_tasks
from hosttraining.regression.quality import BASELINES

__all__ = ["BASELINE_NAMES", "MEDIAN", "METRIC", "RegressionHeldoutCurve"]

METRIC = "rel_rmse"
"""The score the regressor's curve follows (the mean over a suite's tasks)."""
MEDIAN = "rel_rmse_median"
"""The median over a suite's tasks, recorded beside the mean."""
BASELINE_NAMES = ("ridge", "rf", "hgb")
"""The baselines of the curve (keys of :data:`hosttraining.regression.quality.BASELINES`)."""


class RegressionHeldoutCurve(heldout.HeldoutCurve):
    """Mean relative RMSE on held-out tasks of the project's prior and TabICL's.

    Attributes:
        suites: ``project`` and ``tabicl`` -> fixed held-out tasks.
    """

    suites: dict[str, list[HeldoutTask]]

    @classmethod
    def for_shape(cls, shape: TabICLPriorConfig, count: int) -> RegressionHeldoutCurve:
        """``count`` tasks of each suite; TabICL's in the batch shape ``shape``."""
        return cls(
            {
                "project": heldout_tasks(count),
                "tabicl": heldout_tabicl_regression_tasks(count, shape, HELDOUT_KEY),
            }
        )

    def score(self, model: torch.nn.Module, tasks: Sequence[HeldoutTask]) -> dict[str, float]:
        """The host's mean and median relative RMSE (in eval mode; its mode is restored)."""
        was_training = model.training
        model.eval()
        try:
            rel = [relative_rmse(host_predict(model, task), task) for task in tasks]  # type: ignore[arg-type]
        finally:
            model.train(was_training)
        return _summary(rel)

    def baseline(self, tasks: Sequence[HeldoutTask], seed: int = 0) -> dict[str, dict[str, float]]:
        """Ridge's, random forest's and HGB's mean and median relative RMSE."""
        scores: dict[str, dict[str, float]] = {}
        for name in BASELINE_NAMES:
            rel = []
            for task in tasks:
                x_tr, x_te = task.x_ND[: task.num_train], task.x_ND[task.num_train :]
                fitted = BASELINES[name](seed).fit(x_tr, task.y_N[: task.num_train])
                rel.append(relative_rmse(fitted.predict(x_te), task))
            scores[name] = _summary(rel)
        return scores


def _summary(rel: Sequence[float]) -> dict[str, float]:
    return {METRIC: float(np.mean(rel)), MEDIAN: float(np.median(rel))}
