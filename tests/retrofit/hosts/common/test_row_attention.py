"""The learned length scaling of ``OICLBlock`` runs once per run of equal ``n_eff``.

A padded ragged batch holds several datasets' members, each with its own
``n_eff``; ``SoftmaxScalingMLP`` takes one ``n`` per call, so the block calls it
once per run of consecutive batch elements that agree, not once per
element. Reference: the same scaling called on each element alone (the former
code). The grouped call runs the query MLP over a taller matrix, so the result
is checked within ``MODULE_ULPS`` (tests/helpers/exactness.py), float32,
``q`` of shape ``(B=7, L=5, H=2, D=8)``.

Shape letters: B batch, L query rows, H heads, D head dimension.
"""

from __future__ import annotations

import torch

from retrofit.hosts.common.row_attention import scale_queries
from tests.helpers.exactness import MODULE_ULPS, assert_within_ulps
from tests.helpers.tiny_models import build_tiny_v3


def _scaling_and_queries():
    model = build_tiny_v3()
    scaling = model.icl_blocks[0].icl_attention.softmax_scaling_layer
    g = torch.Generator().manual_seed(0)
    q_BLHD = torch.randn(7, 5, scaling.num_heads, scaling.head_dim, generator=g)
    return scaling, q_BLHD


def _calls(scaling: torch.nn.Module) -> tuple[list[int], torch.utils.hooks.RemovableHandle]:
    seen: list[int] = []
    handle = scaling.register_forward_hook(lambda _m, args, _o: seen.append(args[0].shape[0]))
    return seen, handle


def test_the_scaling_runs_once_per_run_of_equal_n_eff_and_matches_each_element_alone():
    scaling, q_BLHD = _scaling_and_queries()
    n_eff_B = torch.tensor([30.0, 30.0, 30.0, 12.0, 12.0, 30.0, 7.0])
    with torch.inference_mode():
        expected = torch.cat([scaling(q_BLHD[b : b + 1], n_eff_B[b]) for b in range(7)])
        seen, handle = _calls(scaling)
        try:
            grouped = scale_queries(scaling, q_BLHD, n_eff_B)
        finally:
            handle.remove()
    assert seen == [3, 2, 1, 1]  # four runs, not seven elements
    assert_within_ulps(grouped, expected, ulps=MODULE_ULPS[torch.float32])
    # n_eff reaches every run: another n_eff for the last element moves only it.
    moved = scale_queries(scaling, q_BLHD, torch.cat([n_eff_B[:-1], n_eff_B.new_tensor([90.0])]))
    assert torch.equal(moved[:-1], grouped[:-1])
    assert not torch.allclose(moved[-1], grouped[-1])


def test_one_n_eff_for_the_whole_batch_is_one_call():
    scaling, q_BLHD = _scaling_and_queries()
    seen, handle = _calls(scaling)
    try:
        with torch.inference_mode():
            out = scale_queries(scaling, q_BLHD, torch.full((7,), 30.0))
    finally:
        handle.remove()
    assert seen == [7]
    assert torch.equal(out, scaling(q_BLHD, torch.tensor(30.0)))
