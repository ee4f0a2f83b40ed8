"""The regressor's held-out curve: both priors' suites, the host's relative RMSE, baselines."""

from __future__ import annotations

import numpy as np
import torch

from hosttraining.common.loop import TINY_MODEL_CONFIG, build_model
from hosttraining.priors.tabicl import TabICLPriorConfig
from hosttraining.regression.heldout import (
    BASELINE_NAMES,
    MEDIAN,
    METRIC,
    RegressionHeldoutCurve,
)

SHAPE = TabICLPriorConfig(min_rows=150, max_rows=200, test_rows=50, max_features=6)


def test_both_suites_score_the_host_in_eval_mode_and_the_baselines_learn() -> None:
    torch.set_num_threads(1)
    curve = RegressionHeldoutCurve.for_shape(SHAPE, 2)
    assert set(curve.suites) == {"project", "tabicl"}
    assert all(len(tasks) == 2 for tasks in curve.suites.values())
    assert curve.suites["tabicl"][0].num_train == curve.suites["tabicl"][0].x_ND.shape[0] - 50

    model = build_model(TINY_MODEL_CONFIG, seed=0)
    scores = curve(model)
    assert model.training  # scored in eval mode, handed back as it came
    assert all(np.isfinite(scores[s][METRIC]) for s in curve.suites)
    assert all(set(scores[s]) == {METRIC, MEDIAN} for s in curve.suites)
    # The score follows the weights: a perturbed output projection changes it.
    with torch.no_grad():
        for p in model.output_projection.parameters():
            p.add_(torch.randn_like(p))
    assert curve(model)["project"][METRIC] != scores["project"][METRIC]

    baselines = curve.baselines()
    assert all(set(baselines[s]) == set(BASELINE_NAMES) for s in curve.suites)
    # The project's held-out tasks are low-noise: random forest explains most of their variance.
    assert baselines["project"]["rf"][METRIC] < 0.8
    assert all(np.isfinite(v[METRIC]) for s in baselines.values() for v in s.values())
    assert all(set(v) == {METRIC, MEDIAN} for s in baselines.values() for v in s.values())
