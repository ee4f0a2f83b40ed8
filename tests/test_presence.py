"""Contract of presence: rho_tau(h) = ||h||^2 / (tau + ||h||^2)."""

from __future__ import annotations

import math

import pytest
import torch

from patches import presence
from patches.presence import check_tau, presence_dtype


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
def test_zero_iff_null_and_range(dtype):
    h = torch.randn(3, 7, 16).to(dtype)
    h[0, 2] = 0
    h[2, 6] = 0
    p = presence(h, 1.0)
    assert p.shape == (3, 7)
    assert p.dtype == presence_dtype(dtype)
    assert p.dtype == (torch.float64 if dtype == torch.float64 else torch.float32)
    assert p[0, 2] == 0 and p[2, 6] == 0
    mask = torch.ones(3, 7, dtype=torch.bool)
    mask[0, 2] = mask[2, 6] = False
    assert bool((p[mask] > 0).all())
    assert bool((p >= 0).all()) and bool((p < 1).all())


def test_formula_and_half_point():
    h = torch.randn(5, 8, dtype=torch.float64)
    tau = 2.5
    sq = (h * h).sum(-1)
    assert torch.equal(presence(h, tau), sq / (sq + tau))
    h1 = torch.zeros(1, 4, dtype=torch.float64)
    h1[0, 0] = math.sqrt(tau)
    assert presence(h1, tau).item() == pytest.approx(0.5, abs=1e-15)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_carriers_accumulate_in_float32(dtype):
    # Large: ||h||^2 = 64 * 300^2 overflows fp16 (max 65504) if squared in fp16.
    big = torch.full((1, 64), 300.0).to(dtype)
    # Small: (1e-4)^2 = 1e-8 underflows in fp16 (min subnormal 6e-8).
    small = torch.full((1, 4), 1e-4).to(dtype)
    pb, ps = presence(big, 1.0), presence(small, 1.0)
    assert torch.isfinite(pb).all() and pb.item() == pytest.approx(1.0, abs=1e-6)
    assert ps.item() > 0.0
    expected = (small.float() ** 2).sum() / ((small.float() ** 2).sum() + 1.0)
    assert ps.item() == pytest.approx(expected.item(), rel=1e-6)


def test_non_contiguous_view():
    h = torch.randn(4, 6, 3, 8)  # (B, S, H, D)
    view = h.transpose(1, 2)  # (B, H, S, D), non-contiguous
    assert not view.is_contiguous()
    assert torch.equal(presence(view, 0.7), presence(view.contiguous(), 0.7))


def test_tensor_tau_scalar_accepted():
    h = torch.randn(2, 3, 4)
    assert torch.equal(presence(h, torch.tensor(1.5)), presence(h, 1.5))


@pytest.mark.parametrize(
    "tau",
    [
        0,
        0.0,
        -1.0,
        float("nan"),
        float("inf"),
        -float("inf"),
        "1",
        None,
        True,
        [1.0],
        torch.tensor([1.0, 2.0]),
    ],
)
def test_bad_tau_raises(tau):
    with pytest.raises(ValueError, match="tau"):
        presence(torch.randn(2, 3), tau)
    with pytest.raises(ValueError, match="tau"):
        check_tau(tau)
