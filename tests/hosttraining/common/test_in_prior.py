"""The in-prior suite: fixed held-out tasks and the gap of a host to a random forest."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hosttraining.common import in_prior
from hosttraining.common.loop import build_model
from hosttraining.regression import chain
from hosttraining.regression.chain import ChainConfig


def test_heldout_tasks_are_fixed_low_noise_and_disjoint_from_training_seeds():
    a = in_prior.heldout_tasks(3)
    b = in_prior.heldout_tasks(3)
    assert all(np.array_equal(s.x_ND, t.x_ND) for s, t in zip(a, b, strict=True))
    assert all(200 <= len(t.y_N) <= 1500 for t in a)
    with pytest.raises(ValueError, match="HELDOUT_KEY"):
        chain._new_state(ChainConfig(total_steps=1, seed=in_prior.HELDOUT_KEY, model="tiny"))


def test_in_prior_gap_of_an_untrained_host_is_worse_than_rf():
    torch.set_num_threads(1)
    model = build_model(chain._MODELS["tiny"], seed=0)
    result = in_prior.evaluate(model, num_tasks=3, num_batches=1)
    # Low-noise tasks: RF explains most of the variance; a random host does not.
    assert result["rf"] < 0.8
    assert result["gap_rf"] > 0.1 and result["host"] > result["rf"]
    assert np.isfinite(result["prior_nll"])
