"""Property-based contracts of OAttention over random shapes (hypothesis).

Bounded so CI stays fast: small shapes, ``max_examples`` small, no deadline.
Bounds are the ones of tests/helpers/exactness.py (fast vs float64 and fast under
insertion in ulps of ``max(1, max|v|)``; the float64 reference, which computes
each row on its own, bit-identical under insertion).
"""

from __future__ import annotations

import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from patches import oattention, oattention_reference, presence
from tests.helpers.exactness import (
    KERNEL_INSERTION_ULPS,
    KERNEL_VS_REFERENCE_ULPS,
    assert_within_ulps,
)
from tests.helpers.oattention_inputs import DTYPES, insert_source, reference64, value_scale

SETTINGS = settings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)


@st.composite
def attention_case(draw):
    B = draw(st.integers(1, 3))
    Hkv = draw(st.integers(1, 3))
    H = Hkv * draw(st.integers(1, 3))
    L = draw(st.integers(1, 12))
    S = draw(st.integers(1, 20))
    D = draw(st.sampled_from([1, 4, 8, 16]))
    dtype = draw(st.sampled_from(list(DTYPES)))
    mask_kind = draw(st.sampled_from(["none", "key", "full"]))
    noncontig = draw(st.booleans())
    eps_den = draw(st.sampled_from([0.0, 1e-6, 0.1]))
    null_q = draw(st.floats(0.0, 0.5))
    null_k = draw(st.floats(0.0, 0.5))
    seed = draw(st.integers(0, 2**31 - 1))
    gen = torch.Generator().manual_seed(seed)
    dt = DTYPES[dtype]

    def qkv(h, n):
        if noncontig:
            return torch.randn(B, n, h, D, generator=gen).to(dt).transpose(1, 2)
        return torch.randn(B, h, n, D, generator=gen).to(dt)

    q, k, v = qkv(H, L), qkv(Hkv, S), qkv(Hkv, S)
    p_q = torch.rand(B, L, generator=gen)
    p_q[torch.rand(B, L, generator=gen) < null_q] = 0.0
    p_k = torch.rand(B, S, generator=gen)
    p_k[torch.rand(B, S, generator=gen) < null_k] = 0.0
    mask = None
    if mask_kind == "key":
        mask = torch.rand(B, 1, 1, S, generator=gen) > 0.3
    elif mask_kind == "full":
        mask = torch.rand(B, H, L, S, generator=gen) > 0.3
    return q, k, v, p_q, p_k, mask, eps_den, gen


def _live(p_k, mask, H, L):
    live = (p_k > 0)[:, None, None, :]
    if mask is not None:
        live = live & mask
    return live.expand(p_k.shape[0], H, L, p_k.shape[1]).any(-1)


@SETTINGS
@given(attention_case())
def test_fast_matches_reference_and_nulls_are_zero(case):
    q, k, v, p_q, p_k, mask, eps_den, _ = case
    fast = oattention(q, k, v, p_q, p_k, mask=mask, eps_den=eps_den)
    ref = reference64(q, k, v, p_q, p_k, mask=mask, eps_den=eps_den)
    assert fast.shape == ref.shape and fast.dtype == q.dtype
    assert not torch.isnan(fast).any()
    assert_within_ulps(
        fast, ref, ulps=KERNEL_VS_REFERENCE_ULPS, scale=value_scale(v), dtype=q.dtype
    )
    B, H, L, _ = q.shape
    dead = (p_q == 0)[:, None, :].expand(B, H, L) | ~_live(p_k, mask, H, L)
    assert torch.equal(fast[dead], torch.zeros_like(fast[dead]))
    assert torch.equal(ref[dead], torch.zeros_like(ref[dead]))


@SETTINGS
@given(attention_case(), st.data())
def test_null_source_insertion_anywhere(case, data):
    q, k, v, p_q, p_k, mask, eps_den, gen = case
    pos = data.draw(st.integers(0, k.shape[2]))
    k2, v2, p2, m2 = insert_source(q, k, v, p_k, mask, pos, gen=gen)
    kw = {"eps_den": eps_den}
    ref = oattention_reference(q, k, v, p_q, p_k, mask=mask, **kw)
    assert torch.equal(oattention_reference(q, k2, v2, p_q, p2, mask=m2, **kw), ref)
    fast = oattention(q, k, v, p_q, p_k, mask=mask, **kw)
    fast2 = oattention(q, k2, v2, p_q, p2, mask=m2, **kw)
    assert_within_ulps(fast2, fast, ulps=KERNEL_INSERTION_ULPS, scale=value_scale(v))


@SETTINGS
@given(
    st.integers(1, 3),
    st.integers(1, 9),
    st.integers(1, 16),
    st.sampled_from(list(DTYPES)),
    st.floats(1e-3, 1e3),
    st.integers(0, 2**31 - 1),
)
def test_presence_properties(B, S, E, dtype, tau, seed):
    gen = torch.Generator().manual_seed(seed)
    h = torch.randn(B, S, E, generator=gen).to(DTYPES[dtype])
    h[:, 0] = 0
    p = presence(h, tau)
    assert p.shape == (B, S)
    assert torch.equal(p[:, 0], torch.zeros_like(p[:, 0]))
    assert bool((p >= 0).all() and (p < 1).all())
    nonzero = (h != 0).any(-1)
    assert bool((p[nonzero] > 0).all())
