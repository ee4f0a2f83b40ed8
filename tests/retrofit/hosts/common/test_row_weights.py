"""The mechanism of ``retrofit.row_weights``: patterns, nested weights, source weights, cursors.

What every host shares (retrofit/hosts/common/row_weights.py); the law on every
host class is tests/retrofit/hosts/test_weighted_rows.py's.
"""

from __future__ import annotations

import pytest
import torch

import retrofit
from retrofit.hosts.common.row_weights import (
    ROW_WEIGHTS_ATTR,
    SOURCE_WEIGHTS_ATTR,
    BatchCursor,
    ReadsSourceWeights,
    active_row_weights,
    nested_row_weights,
    source_weights,
    support_groups,
)
from tests.helpers.tiny_models import build_tiny_v3


def _patched():
    model = build_tiny_v3()
    retrofit.patch(model, "full-o")
    return model


def test_batch_elements_are_grouped_by_their_pattern_of_nonzero_weights():
    w_BN = torch.tensor([[1.0, 0.0, 2.0], [3.0, 0.0, 1.0], [1.0, 1.0, 0.0]])
    groups = {tuple(b.tolist()): r.tolist() for b, r in support_groups(w_BN)}
    assert groups == {(0, 1): [0, 2], (2,): [0, 1]}


def test_weights_all_one_are_no_weights_and_presence_is_the_case_of_0_and_1():
    model = _patched()
    with retrofit.row_weights(model, torch.ones(5)):
        assert active_row_weights(model, 2, 5) is None
    with retrofit.row_presence(model, torch.tensor([True, False, True, True, True])):
        w_BN = active_row_weights(model, 2, 5)
        assert w_BN.dtype == torch.float64 and w_BN.tolist() == [[1.0, 0.0, 1.0, 1.0, 1.0]] * 2
    assert ROW_WEIGHTS_ATTR not in model.__dict__


def test_a_nested_run_sees_its_group_s_weights_and_the_outer_ones_after():
    model = _patched()
    with retrofit.row_weights(model, torch.tensor([2.0, 0.0, 1.0])):
        outer = model.__dict__[ROW_WEIGHTS_ATTR]
        with nested_row_weights(model, torch.tensor([[2.0, 1.0]])):
            assert active_row_weights(model, 1, 2).tolist() == [[2.0, 1.0]]
        with nested_row_weights(model, torch.ones(1, 2)):
            assert ROW_WEIGHTS_ATTR not in model.__dict__  # all 1: the host's own path
        assert model.__dict__[ROW_WEIGHTS_ATTR] is outer


def test_source_weights_reach_every_block_and_decoder_and_leave_after():
    model = _patched()
    readers = [m for m in model.modules() if isinstance(m, ReadsSourceWeights)]
    assert len(readers) == len(model.icl_blocks)
    w_BN = torch.tensor([[2.0, 1.0, 0.5]])
    with source_weights(model, w_BN):
        assert all(m.source_weights_or_none() is w_BN for m in readers)
    with source_weights(model, torch.tensor([[1.0, 0.0, 1.0]])):  # presence: null carriers
        assert all(SOURCE_WEIGHTS_ATTR not in m.__dict__ for m in readers)
    assert all(m.source_weights_or_none() is None for m in readers)


def test_a_cursor_hands_out_consecutive_slices_and_refuses_to_run_past_its_end():
    cursor = BatchCursor(torch.arange(10.0).reshape(5, 2))
    assert cursor.take(2).tolist() == [[0.0, 1.0], [2.0, 3.0]]
    assert cursor.take(3).tolist() == [[4.0, 5.0], [6.0, 7.0], [8.0, 9.0]]
    with pytest.raises(retrofit.InvalidRowWeightsError, match="do not fit"):
        cursor.take(1)
