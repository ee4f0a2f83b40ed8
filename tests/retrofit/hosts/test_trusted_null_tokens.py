"""Patched blocks skip OAttention's null-token checks only where their maps keep a null row zero.

Every patched block (v2, v2.5, v2.6, v3, v3.5; both modes) is run on tiny
perturbed hosts with a zero carrier among the train rows, with a spy on the
OAttention call: the block passes ``nulls_are_zero=True``, the null tokens'
queries, keys and values it hands over are exactly zero (what the flag
promises), and its output is bit-identical to the checked path (CPU, float32,
same shapes: the check copies nothing when null keys and values are finite,
and a null receiver's row is zero either way, at most with the sign of zero
differing, which the comparison treats as equal). A host whose query, key or
value projection gains a bias gets the checked path back.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import retrofit.hosts.common.row_attention as row_attention
import retrofit.hosts.v2.block as v2_block
import retrofit.hosts.v3.icl_block as icl_block
from retrofit import patch
from retrofit.hosts.v2.block import OTabPFNBlockV2
from retrofit.hosts.v3.icl_block import OICLBlock
from tests.helpers.tiny_hosts import build_host, build_tiny_v2
from tests.helpers.tiny_models import build_tiny_v3

HOSTS = ("tabpfn_v2", "tabpfn_v2_5", "tabpfn_v2_6", "tabpfn_v3", "tabpfn_v3_5")
# Row 4 is past the 3 learned thinking rows of the tiny v2.5 and v2.6 (never null).
N_TRAIN, N_ROWS, NULL_AT = 6, 9, 4


def _patched_block(name: str, mode: str) -> nn.Module:
    if name == "tabpfn_v2":
        model = build_tiny_v2(seed=1)
    elif name == "tabpfn_v3":
        model = build_tiny_v3(seed=1)
    else:
        model = build_host(name, seed=1)
    patch(model, mode, tau=1.0)
    return next(m for m in model.modules() if isinstance(m, (OICLBlock, OTabPFNBlockV2)))


def _run(block: nn.Module) -> torch.Tensor:
    """The block on random carriers whose train row ``NULL_AT`` is a zero carrier."""
    g = torch.Generator().manual_seed(0)
    if isinstance(block, OICLBlock):
        E = block.icl_attention.q_projection.in_features
        x = torch.randn(2, N_ROWS, E, generator=g)
        x[:, NULL_AT] = 0.0
        with torch.no_grad():
            return block(x, N_TRAIN)[0]
    E = block.per_column_attention_between_cells.q_projection.in_features
    x = torch.randn(2, N_ROWS, 3, E, generator=g)
    x[:, NULL_AT] = 0.0
    with torch.no_grad():
        return block(x, N_TRAIN, None)[0]


class _Spy:
    """Records each OAttention call's flag and its null tokens' queries, keys and values."""

    def __init__(self, monkeypatch) -> None:
        self.flags: list[bool] = []
        self.null_kv: list[torch.Tensor] = []
        self.null_q: list[torch.Tensor] = []
        real = row_attention.oattention

        def spy(q, k, v, p_q, p_k, **kwargs):
            self.flags.append(kwargs.get("nulls_are_zero", False))
            b, s = (p_k == 0).nonzero(as_tuple=True)
            self.null_kv += [k[b, :, s], v[b, :, s]]
            b, i = (p_q == 0).nonzero(as_tuple=True)
            self.null_q.append(q[b, :, i])
            return real(q, k, v, p_q, p_k, **kwargs)

        monkeypatch.setattr(row_attention, "oattention", spy)


@pytest.mark.parametrize("mode", ["oattention", "full-o"])
@pytest.mark.parametrize("name", HOSTS)
def test_blocks_take_the_trusted_path_with_exact_zero_null_sources(name, mode, monkeypatch):
    block = _patched_block(name, mode)
    spy = _Spy(monkeypatch)
    trusted = _run(block)
    assert spy.flags and all(spy.flags)
    assert any(t.numel() for t in spy.null_kv) and any(t.numel() for t in spy.null_q)
    assert all(bool((t == 0).all()) for t in spy.null_kv + spy.null_q)
    # The checked path, as the blocks called OAttention before: bit-identical.
    module = icl_block if isinstance(block, OICLBlock) else v2_block
    monkeypatch.setattr(module, "keeps_zero_rows", lambda *maps: False)
    spy.flags.clear()
    checked = _run(block)
    assert not any(spy.flags)
    torch.testing.assert_close(trusted, checked, rtol=0.0, atol=0.0)


@pytest.mark.parametrize("projection", ["q_projection", "k_projection", "v_projection"])
@pytest.mark.parametrize("name", ["tabpfn_v2_5", "tabpfn_v3", "tabpfn_v3_5"])
def test_a_projection_that_gains_a_bias_gets_the_checked_path_back(name, projection, monkeypatch):
    block = _patched_block(name, "oattention")
    if isinstance(block, OICLBlock):
        att = block.icl_attention
    else:
        att = block.per_column_attention_between_cells
    linear = getattr(att, projection)
    linear.bias = nn.Parameter(torch.full((linear.out_features,), 0.5))
    spy = _Spy(monkeypatch)
    out = _run(block)
    assert spy.flags and not any(spy.flags)  # the block no longer promises zeros
    assert any(bool((t != 0).any()) for t in spy.null_kv + spy.null_q)  # and they are not
    assert torch.isfinite(out).all()


def test_the_oattention_mode_trusts_the_host_norm_only_without_a_bias():
    assert row_attention.keeps_zero_rows(nn.RMSNorm(4), nn.LayerNorm(4, bias=False))
    assert row_attention.keeps_zero_rows(nn.LayerNorm(4, elementwise_affine=False))
    assert not row_attention.keeps_zero_rows(nn.LayerNorm(4))  # affine bias: Norm(0) != 0
    assert not row_attention.keeps_zero_rows(nn.Linear(4, 4))
    assert not row_attention.keeps_zero_rows(nn.Identity())  # an unknown map is not trusted
    assert row_attention.keeps_zero_rows(nn.Linear(4, 4, bias=False))
