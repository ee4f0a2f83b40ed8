"""The batch stream: each step's batch in order, inline or drawn by worker processes."""

from __future__ import annotations

import functools
import os

import pytest
import torch

from hosttraining.priors.batch_stream import batch_rng, batch_stream
from hosttraining.priors.regression import PriorConfig, sample_batch


def _drawn_where(rng):
    """A batch of a small prior and the process that drew it (module level: picklable)."""
    return os.getpid(), sample_batch(rng, PriorConfig(max_rows=40))


def test_worker_processes_draw_each_steps_batch_in_order():
    inline = list(batch_stream(_drawn_where, 6, 1, 6))
    helped = list(batch_stream(_drawn_where, 6, 1, 6, workers=2))
    assert {pid for pid, _ in inline} == {os.getpid()}
    assert os.getpid() not in {pid for pid, _ in helped}  # drawn by the helpers, not here
    for (_, a), (_, b) in zip(inline, helped, strict=True):
        assert torch.equal(a.x_RBC, b.x_RBC) and torch.equal(a.y_test_TB, b.y_test_TB)


def test_batch_stream_yields_each_steps_batch_in_order_and_refuses_negative_workers():
    prior = PriorConfig(max_rows=40)
    inline = list(batch_stream(functools.partial(sample_batch, cfg=prior), 5, 2, 5))
    assert len(inline) == 3
    for step, batch in zip(range(2, 5), inline, strict=True):
        assert torch.equal(batch.x_RBC, sample_batch(batch_rng(5, step), prior).x_RBC)
    with pytest.raises(ValueError, match="workers"):
        next(batch_stream(functools.partial(sample_batch, cfg=prior), 5, 0, 1, workers=-1))
