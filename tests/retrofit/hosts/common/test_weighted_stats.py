"""The weighted statistics are the host's statistics of the rows repeated.

Each function of ``retrofit/hosts/common/weighted_stats.py`` against tabpfn 9.2's
own on the train rows given ``w_j`` times (random integer weights, float64 data
with ties and NaN): the ECDF context bit for bit (its counts are integers and its
edges data values), the means and the scaler within a few ulps (a weighted sum
and a repeated sum are summed in different orders).

Shape letters: K train rows, B batch elements, C columns.
"""

from __future__ import annotations

import pytest
import torch
from tabpfn.architectures import tabpfn_v3_5
from tabpfn.preprocessing.torch.ops import torch_nanmean
from tabpfn.preprocessing.torch.torch_standard_scaler import TorchStandardScaler

from retrofit import tabpfn_surface
from retrofit.hosts.common.weighted_stats import (
    weighted_ecdf_context,
    weighted_finite_mean,
    weighted_scaler_fit,
    weighted_target_mean,
)

K, B, C = 11, 3, 4


def _data(seed: int):
    g = torch.Generator().manual_seed(seed)
    x_KBC = torch.randn(K, B, C, generator=g, dtype=torch.float64)
    x_KBC[:, :, 1] = torch.randint(0, 3, (K, B), generator=g).double()  # ties
    w_BK = torch.randint(1, 5, (B, K), generator=g).double()
    return x_KBC, w_BK


def _repeated(x_KBC, w_BK, b):
    rows = [j for j in range(K) for _ in range(int(w_BK[b, j]))]
    return x_KBC[rows, b]


@pytest.mark.parametrize("seed", range(4))
def test_the_means_and_the_scaler_are_the_host_s_on_repeated_rows(seed):
    x_KBC, w_BK = _data(seed)
    x_KBC[2, 0, 0] = float("nan")
    x_KBC[5, 1, 3] = float("inf")
    w_KB1 = w_BK.t().unsqueeze(-1)
    means_BC = weighted_finite_mean(x_KBC, w_KB1)
    imputed = torch.where(torch.isfinite(x_KBC), x_KBC, means_BC)
    scaler = weighted_scaler_fit(imputed, w_KB1)
    for b in range(B):
        rep_KC = _repeated(x_KBC, w_BK, b)
        host_mean_C = torch_nanmean(rep_KC, axis=0, include_inf=True)
        torch.testing.assert_close(means_BC[b], host_mean_C, rtol=0, atol=8 * 2.0**-52 * 4)
        host = TorchStandardScaler().fit(_repeated(imputed, w_BK, b))
        torch.testing.assert_close(scaler["mean"][b], host["mean"], rtol=0, atol=1e-14)
        torch.testing.assert_close(scaler["std"][b], host["std"], rtol=1e-14, atol=0)
    # A constant column keeps its scale, as the host's does.
    assert torch.equal(weighted_scaler_fit(torch.ones(K, B, 1), w_KB1)["std"], torch.ones(B, 1))


def test_the_target_mean_reads_finite_targets_only():
    y_KB = torch.tensor([[1.0, float("nan")], [3.0, 5.0], [float("inf"), 7.0]])
    w_BK = torch.tensor([[1.0, 3.0, 9.0], [2.0, 1.0, 3.0]])
    assert torch.equal(weighted_target_mean(y_KB, w_BK), torch.tensor([2.5, 6.5]))
    assert torch.equal(weighted_target_mean(torch.full((3, 2), float("nan")), w_BK), torch.zeros(2))


@pytest.mark.parametrize("num_buckets", [2, 5, 8, 64])
@pytest.mark.parametrize("seed", range(4))
def test_the_ecdf_context_is_the_host_s_on_repeated_rows_bit_for_bit(seed, num_buckets):
    # Few buckets take the row-position ruler (more distinct values than edges), many the
    # distinct-value one; ties in column 1.
    x_KBC, w_BK = _data(seed)
    dtype = tabpfn_v3_5.ECDF_CONTEXT_DTYPE
    context = weighted_ecdf_context(x_KBC.transpose(0, 1), w_BK, num_buckets, dtype)
    for b in range(B):
        rep_1KC = _repeated(x_KBC, w_BK, b).unsqueeze(0)
        host = tabpfn_v3_5._build_ecdf_context(rep_1KC, rep_1KC.shape[1], num_buckets)[:, 0]
        ours = context[:, b, :, : host.shape[-1]]
        assert torch.equal(ours, host)
        # A shorter context repeats its last edge, which ranks as its own edges do.
        assert torch.equal(
            context[:, b, :, host.shape[-1] :],
            host[..., -1:].expand_as(context[:, b, :, host.shape[-1] :]),
        )
        values = torch.linspace(-3, 3, 41, dtype=dtype).expand(1, C, 41)
        ranks = tabpfn_v3_5._ecdf_midrank_counts(values, context[:, b : b + 1])
        host_ranks = tabpfn_v3_5._ecdf_midrank_counts(values, host[:, None])
        assert torch.equal(ranks, host_ranks)
    assert tabpfn_surface.ecdf_context_key == "ecdf_buckets"
