"""The last ICL block run for the test rows alone (``OICLBlock.forward_test_rows``).

A regression head decodes the test rows only, so the padded path runs the last
block with the train rows as sources and nothing else
(``V3ICLStage.run_blocks_to_test_rows``). Each test row goes through the same
operations as in the block's ``forward`` on a shorter matrix, so it equals
``forward``'s test rows within ``MODULE_ULPS`` of float64 (a block) and the
stage within ``MODEL_ULPS`` (tests/helpers/exactness.py). Tiny random v3 and
v3.5 hosts (v3.5's test rows read one KV head), zero-initialised projections
perturbed, float64.

Shape letters: B batch, R rows, N train rows, M test rows, E ICL width.
"""

from __future__ import annotations

import pytest
import torch

import retrofit
from retrofit.hosts.common.base import icl_stage_for, runs_blocks_to_test_rows
from retrofit.hosts.common.row_weights import source_weights
from tests.helpers.exactness import (
    MODEL_ULPS,
    MODULE_ULPS,
    assert_exactly_zero,
    assert_within_ulps,
)
from tests.helpers.tiny_hosts import build_host
from tests.helpers.tiny_models import build_tiny_v3, tiny_v3_config

HOSTS = ("tabpfn_v3", "tabpfn_v3_5")
MODES = ("oattention", "full-o")
B, N, M = 3, 9, 5


def _patched(name: str, mode: str) -> torch.nn.Module:
    if name == "tabpfn_v3":
        model = build_tiny_v3(tiny_v3_config(nlayers=3), 0).double()
    else:
        model = build_host(name, 0, nlayers=3).double()
    retrofit.patch(model, mode)
    return model


def _carriers(model: torch.nn.Module, seed: int = 0) -> torch.Tensor:
    """``(B, N + M, E)`` random carriers, a null train row and a null test row among them."""
    width = model.icl_blocks[0].icl_attention.q_projection.in_features
    g = torch.Generator().manual_seed(seed)
    x_BRE = torch.randn(B, N + M, width, generator=g, dtype=torch.float64)
    x_BRE[0, 2] = 0.0
    x_BRE[1, N + 1] = 0.0
    return x_BRE


@pytest.mark.parametrize("peak_factor", [None, 2])
@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "weighted"])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", HOSTS)
def test_the_test_rows_alone_equal_the_whole_block_s_test_rows(name, mode, weighted, peak_factor):
    model = _patched(name, mode)
    block = model.icl_blocks[-1]
    x_BRE = _carriers(model)
    w_BN = torch.tensor([[1.0, 2.0, 3.0] * 3] * B, dtype=torch.float64) if weighted else None
    with torch.inference_mode(), source_weights(model, w_BN):
        whole_BME = block(x_BRE.clone(), N, peak_factor)[0][:, N:]
        alone_BME = block.forward_test_rows(x_BRE.clone(), N, peak_factor)
    assert alone_BME.shape == (B, M, x_BRE.shape[-1])
    assert_within_ulps(alone_BME, whole_BME, ulps=MODULE_ULPS[torch.float64])
    assert_exactly_zero(alone_BME[1, 1])  # the null test row stays null
    # The train rows are the test rows' sources: another train row moves them.
    moved_BRE = x_BRE.clone()
    moved_BRE[:, 4] += 1.0
    with torch.inference_mode(), source_weights(model, w_BN):
        moved_BME = block.forward_test_rows(moved_BRE, N, peak_factor)
    assert (moved_BME - alone_BME).abs().max().item() > 1e-3


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", HOSTS)
def test_the_stage_s_test_rows_equal_every_block_run_for_every_row(name, mode):
    model = _patched(name, mode)
    stage = icl_stage_for(model)
    assert runs_blocks_to_test_rows(stage)
    x_BRE = _carriers(model, seed=1)
    with torch.inference_mode():
        whole_BME = stage.run_blocks(model, x_BRE.clone(), N)[:, N:]
        alone_BME = stage.run_blocks_to_test_rows(model, x_BRE.clone(), N)
    assert_within_ulps(alone_BME, whole_BME, ulps=MODEL_ULPS[torch.float64])
