"""Contract of presence: rho_tau(h) = ||h||^2 / (tau + ||h||^2)."""

from __future__ import annotations

import importlib
import math
from fractions import Fraction

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


# --- the law for every accepted tau and every finite carrier ------

DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.float64]
EXTREME_TAUS = [1e39, 1e300, 1e-300, 5e-324, 1.7976931348623157e308, 2.0**-126, 3.4e38]


@pytest.mark.parametrize("tau", EXTREME_TAUS, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_presence_is_zero_exactly_at_the_zero_vector_for_every_tau(dtype, tau):
    """Tau beyond float32's range or below its subnormals."""
    h = (torch.randn(4, 9, 16) * 3).to(dtype)
    h[1, 4] = 0
    p = presence(h, tau)
    assert torch.isfinite(p).all()
    assert bool((p >= 0).all()) and bool((p <= 1).all())
    assert p[1, 4] == 0
    live = torch.ones(4, 9, dtype=torch.bool)
    live[1, 4] = False
    assert bool((p[live] > 0).all())
    assert bool((p[live] >= torch.finfo(p.dtype).tiny).all())


@pytest.mark.parametrize(
    ("dtype", "value"),
    [
        (torch.float32, 1e20),
        (torch.float32, 3e38),
        (torch.bfloat16, 1e30),
        (torch.bfloat16, 3e38),
        (torch.float16, 6e4),
        (torch.float64, 1e200),
        (torch.float64, 1e308),
    ],
    ids=str,
)
@pytest.mark.parametrize("tau", [1.0, 1e-30, 1e38], ids=str)
def test_a_carrier_whose_squared_norm_overflows_gets_finite_presence(dtype, value, tau):
    """||h||^2 beyond the dtype's range gives about 1, never NaN."""
    h = torch.full((2, 64), value, dtype=torch.float64).to(dtype)
    h[1, ::2] = -h[1, ::2]
    p = presence(h, tau)
    assert torch.isfinite(p).all()
    exact = float(1 / (1 + Fraction(tau) / (64 * Fraction(h[0, 0].item()) ** 2)))  # exact
    assert p.tolist() == pytest.approx([exact, exact], rel=4 * torch.finfo(p.dtype).eps)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64], ids=str)
def test_a_faint_carrier_whose_squares_underflow_is_not_null(dtype):
    """Entries whose squares underflow still give presence > 0."""
    tiny_entry = 1e-30 if dtype != torch.float64 else 1e-300
    h = torch.full((1, 8), tiny_entry, dtype=torch.float64).to(dtype)
    p = presence(h, 1.0)
    assert p.item() > 0 and math.isfinite(p.item())


@pytest.mark.parametrize(
    ("tau", "value"),
    [
        (1e39, 1e20),  # tau above float32's max
        (1e-300, 1e-20),  # tau below float32's smallest subnormal
        (1e-40, 1e-22),  # tau a float32 subnormal
        (1e300, 1e140),  # both far beyond float32
    ],
    ids=["tau1e39", "tau1e-300", "tau1e-40", "tau1e300"],
)
def test_extreme_tau_presence_matches_exact_arithmetic(tau, value):
    """Not only in range, also the right value.

    Float32 carriers, float64 for the last (1e140 is beyond float32); the
    reference is exact rational arithmetic on the carrier as stored, and the
    bound 4 eps of the presence dtype.
    """
    dtype = torch.float32 if value < 1e38 else torch.float64
    h = torch.full((1, 16), value, dtype=dtype)
    exact = float(1 / (1 + Fraction(tau) / (16 * Fraction(h[0, 0].item()) ** 2)))
    assert presence(h, tau).item() == pytest.approx(exact, rel=4 * torch.finfo(dtype).eps)


def test_non_finite_carriers_get_nan_presence_not_zero():
    """A NaN or inf carrier is not null: its presence is NaN, so OAttention refuses it."""
    h = torch.zeros(3, 4)
    h[0, 1] = float("nan")
    h[1, 2] = float("inf")
    p = presence(h, 1.0)
    assert math.isnan(p[0].item()) and math.isnan(p[1].item()) and p[2] == 0


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("tau", [1.0, 0.3, 7.0, 1e-30], ids=str)
def test_the_scaled_form_off_cpu_agrees_bit_for_bit_with_the_direct_formula(dtype, tau):
    """The form every non-CPU device uses equals the CPU result in the ordinary range."""
    scaled_presence = importlib.import_module("patches.presence")._scaled_presence
    h = (torch.randn(6, 11, 24) * 2).to(dtype)
    h[2, 3] = 0
    direct = presence(h, tau)
    assert torch.equal(scaled_presence(h.to(presence_dtype(dtype)), tau), direct)


def test_the_scaled_form_has_the_formula_s_gradient():
    scaled_presence = importlib.import_module("patches.presence")._scaled_presence
    h = torch.randn(3, 5, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x: scaled_presence(x, 0.7), (h,))
    assert torch.autograd.gradcheck(lambda x: presence(x, 0.7), (h,))
