"""``oattention(nulls_are_zero=True)``: the caller's zeros make the null-token checks redundant.

With null tokens' queries, keys and values exactly zero (what a patched
block guarantees), the trusted call equals the checked call bit for bit
(CPU, same shapes: both hand the kernel the same tensors; a null receiver's
row is zero either way, the comparison treating -0.0 as 0.0) and gives null
receivers exact zeros, with and without a mask, in every float dtype.
"""

from __future__ import annotations

import pytest
import torch

from patches.oattention import oattention


def _inputs(dtype: torch.dtype, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    B, H, L, S, D = 3, 2, 7, 5, 4
    q, k, v = (torch.randn(B, H, n, D, generator=g).to(dtype) for n in (L, S, S))
    p_q = torch.rand(B, L, generator=g)
    p_k = torch.rand(B, S, generator=g)
    p_q[0, 2] = p_q[1, :] = 0.0  # a null receiver; a batch element of null receivers
    p_k[0, 1] = p_k[2, :] = 0.0  # a null source; a batch element without live sources
    q = q.masked_fill((p_q == 0)[:, None, :, None], 0.0)
    null_k = (p_k == 0)[:, None, :, None]
    return q, k.masked_fill(null_k, 0.0), v.masked_fill(null_k, 0.0), p_q, p_k


@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16, torch.float16])
def test_the_trusted_call_equals_the_checked_one_and_keeps_null_receivers_zero(dtype, masked):
    q, k, v, p_q, p_k = _inputs(dtype)
    mask = None
    if masked:
        mask = torch.ones(q.shape[0], 1, q.shape[2], k.shape[2], dtype=torch.bool)
        mask[:, :, 3, :] = False  # a receiver that sees no source
    checked = oattention(q, k, v, p_q, p_k, mask=mask)
    trusted = oattention(q, k, v, p_q, p_k, mask=mask, validate=False, nulls_are_zero=True)
    torch.testing.assert_close(trusted, checked, rtol=0.0, atol=0.0)
    assert bool((trusted[p_q[:, None, :].expand(-1, q.shape[1], -1) == 0] == 0).all())
    assert torch.isfinite(trusted).all()
