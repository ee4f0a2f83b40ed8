"""Contracts of OAttention, fast path and float64 reference, in every dtype.

Contracts: null receiver exactly 0; null-source
insertion (append and mid-sequence) and self-insertion leave every other
output unchanged; empty support gives 0, never NaN; identity (presence 1,
eps_den 0) is softmax attention.

Tolerances (tests/helpers/exactness.py states what holds on every CPU and BLAS):
* float64 reference: insertion and self-insertion are bit-identical
  (``torch.equal``), in every input dtype: each receiver row is computed on its
  own over its live sources, so a null source never enters its arithmetic.
* fast path under insertion: the fused kernel sees one more key and regroups
  its key blocks; checked within ``KERNEL_INSERTION_ULPS`` ulps of
  ``max(1, max|v|)`` (measured bit-identical when appending and <= 0.75 ulps
  mid-sequence, tests/helpers/oattention_inputs.py).
* fast vs float64 reference: within ``KERNEL_VS_REFERENCE_ULPS`` ulps of
  ``max(1, max|v|)`` (measured fp32 5.3e-7, bf16 3.9e-3, fp16 7.8e-4,
  fp64 1.1e-15).
* identity: presence 1 and eps_den 0 is bit-identical to torch SDPA on CPU:
  the same kernel on the same shapes, adding a bias of exactly 0 and a gate of
  exactly 1 (measured 0 difference in all dtypes, masks and GQA).
* fp32 accuracy target: fast error against float64 <= 2x SDPA's own error
  (presence 1, eps 0); measured ratio 1.0 (same kernel). With real presence
  and eps 1e-6 the measured ratio is <= 1.0 at L = 128..2048
  (results/exactness); checked <= 2.

README's room runs every case (dtype x mask x heads x layout) of the insertion
and non-finite-token tests once, each insertion point, path, route and poison
meeting every dtype, mask, head count and layout; the slow tier runs the rest
of those products (``tests/helpers/tiers.py``).
"""

from __future__ import annotations

import importlib
import itertools
import math

import pytest
import torch
import torch.nn.functional as F

from eval.operators.sequence_edits import drop_at, insert_at
from patches import oattention, oattention_reference
from tests.helpers.exactness import (
    KERNEL_INSERTION_ULPS,
    KERNEL_VS_REFERENCE_ULPS,
    assert_exactly_zero,
    assert_within_ulps,
)
from tests.helpers.oattention_inputs import (
    DTYPES,
    insert_source,
    make_mask,
    make_presence,
    make_qkv,
    reference64,
    value_scale,
)
from tests.helpers.tiers import cross_section

# ``patches.oattention`` the attribute is the function; the module is this:
oa_mod = importlib.import_module("patches.oattention")

PATHS = {"fast": oattention, "reference": oattention_reference}
MASKS = ["none", "key", "full"]
LAYOUTS = ["contig", "noncontig"]
HEADS = [(4, 4), (4, 2)]  # (H, Hkv): MHA and GQA


def _case(dtype_name, mask_kind, heads, layout, *, L=9, S=13, seed=0):
    dtype = DTYPES[dtype_name]
    H, Hkv = heads
    gen = torch.Generator().manual_seed(seed)
    q, k, v = make_qkv(dtype, 2, H, Hkv, L, S, 8, noncontig=layout == "noncontig", gen=gen)
    p_q = make_presence(2, L, gen=gen)
    p_k = make_presence(2, S, gen=gen, null_every=5)
    mask = make_mask(mask_kind, 2, H, L, S, gen=gen)
    return q, k, v, p_q, p_k, mask, gen


def _cases():
    return list(itertools.product(DTYPES, MASKS, HEADS, LAYOUTS))


def _ids(c):
    return "-".join([c[0], c[1], f"H{c[2][0]}kv{c[2][1]}", c[3]])


CASES = _cases()


def _each_case_once(options: list[tuple]) -> list[tuple]:
    """Every case of ``CASES`` once, with one of ``options`` (a path, a route, ...) in turn.

    The option turns with the head count and layout and shifts with the dtype and
    mask, so each option meets every dtype, mask, head count and layout: the
    cross-section README's room runs of a test over ``options x CASES``.
    """
    fast = []
    for i, case in enumerate(CASES):
        dtype_and_mask, heads_and_layout = divmod(i, len(HEADS) * len(LAYOUTS))
        fast.append((*options[(dtype_and_mask + heads_and_layout) % len(options)], case))
    return fast


def _case_id(value) -> str | None:
    return _ids(value) if isinstance(value, tuple) else None


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("case", CASES, ids=[_ids(c) for c in CASES])
def test_null_receiver_exactly_zero(path, case):
    q, k, v, p_q, p_k, mask, _ = _case(*case)
    p_q[:, 3] = 0.0
    p_q[1, 0] = 0.0
    out = PATHS[path](q, k, v, p_q, p_k, mask=mask)
    assert out.dtype == q.dtype and out.shape == (2, q.shape[1], q.shape[2], v.shape[-1])
    assert torch.equal(out[:, :, 3], torch.zeros_like(out[:, :, 3]))
    assert torch.equal(out[1, :, 0], torch.zeros_like(out[1, :, 0]))
    assert not torch.isnan(out).any()


INSERTIONS = list(itertools.product(["append", "mid", "front"], PATHS))


@pytest.mark.parametrize(
    ("where", "path", "case"),
    cross_section(
        [(*insertion, case) for insertion in INSERTIONS for case in CASES],
        fast=_each_case_once(INSERTIONS),
        value_id=_case_id,
    ),
)
def test_null_source_insertion(where, path, case):
    q, k, v, p_q, p_k, mask, gen = _case(*case)
    fn = PATHS[path]
    S = k.shape[2]
    pos = {"append": S, "mid": S // 2, "front": 0}[where]
    base = fn(q, k, v, p_q, p_k, mask=mask)
    k2, v2, p2, m2 = insert_source(q, k, v, p_k, mask, pos, gen=gen)
    out = fn(q, k2, v2, p_q, p2, mask=m2)
    if path == "reference":
        assert torch.equal(out, base)  # bit-identical: null sources dropped before exp
    else:
        assert_within_ulps(out, base, ulps=KERNEL_INSERTION_ULPS, scale=value_scale(v))


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("case", CASES, ids=[_ids(c) for c in CASES])
def test_self_insertion(path, case):
    """A null token inserted as both query and source (self-attention, L == S)."""
    _, _, (H, Hkv), _ = case
    q, k, v, p_q, p_k, mask, gen = _case(*case, L=11, S=11)
    p_k = p_q.clone()  # self-attention: one presence per token
    fn = PATHS[path]
    base = fn(q, k, v, p_q, p_k, mask=mask)
    pos = 4
    B, _, _, D = q.shape
    q3 = insert_at(q, pos, torch.randn(B, H, 1, D, generator=gen).to(q.dtype), 2)
    k3 = insert_at(k, pos, torch.randn(B, Hkv, 1, D, generator=gen).to(q.dtype), 2)
    v3 = insert_at(v, pos, torch.randn(B, Hkv, 1, D, generator=gen).to(q.dtype), 2)
    p3 = insert_at(p_q, pos, torch.zeros(B, 1), 1)
    m3 = None
    if mask is not None:
        m3 = mask
        if mask.shape[2] > 1:  # a full mask gets a query row for the new token
            row = torch.rand(*mask.shape[:2], 1, mask.shape[3], generator=gen) > 0.5
            m3 = insert_at(m3, pos, row, 2)
        m3 = insert_at(m3, pos, torch.rand(*m3.shape[:3], 1, generator=gen) > 0.5, 3)
    out = fn(q3, k3, v3, p3, p3, mask=m3)
    assert_exactly_zero(out[:, :, pos])
    others = drop_at(out, pos, 2)
    if path == "reference":
        assert torch.equal(others, base)
    else:
        assert_within_ulps(others, base, ulps=KERNEL_INSERTION_ULPS, scale=value_scale(v))


@pytest.mark.parametrize("eps_den", [0.0, 1e-6, 0.5])
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("dtype_name", DTYPES)
def test_empty_support_is_zero_never_nan(eps_den, path, dtype_name):
    dtype = DTYPES[dtype_name]
    fn = PATHS[path]
    B, H, Hkv, L, S = 2, 4, 2, 5, 6
    q, k, v = make_qkv(dtype, B, H, Hkv, L, S, 8)
    p_q = make_presence(B, L)
    p_k = make_presence(B, S)
    zeros = torch.zeros(B, H, L, 8, dtype=dtype)
    # all masked (full and key-only masks)
    for mask in (
        torch.zeros(B, H, L, S, dtype=torch.bool),
        torch.zeros(B, 1, 1, S, dtype=torch.bool),
    ):
        assert torch.equal(fn(q, k, v, p_q, p_k, mask=mask, eps_den=eps_den), zeros)
    # all null
    assert torch.equal(fn(q, k, v, p_q, torch.zeros_like(p_k), eps_den=eps_den), zeros)
    # every live source masked: null where visible, masked where present
    mask = torch.ones(B, 1, 1, S, dtype=torch.bool)
    pk = p_k.clone()
    pk[:, :3] = 0.0
    mask[..., 3:] = False
    assert torch.equal(fn(q, k, v, p_q, pk, mask=mask, eps_den=eps_den), zeros)
    # one batch element empty, the other not: only the empty one is zero
    pk = p_k.clone()
    pk[0] = 0.0
    out = fn(q, k, v, p_q, pk, eps_den=eps_den)
    assert torch.equal(out[0], zeros[0]) and not torch.isnan(out).any()
    assert out[1].abs().max() > 0
    # single rows fully masked in a full mask
    mask = torch.ones(B, H, L, S, dtype=torch.bool)
    mask[1, 2, 3] = False
    out = fn(q, k, v, p_q, p_k, mask=mask, eps_den=eps_den)
    assert torch.equal(out[1, 2, 3], zeros[1, 2, 3]) and not torch.isnan(out).any()


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("dtype_name", DTYPES)
def test_zero_length_sources_or_queries(path, dtype_name):
    """S = 0 (no source) and L = 0 (no receiver): empty shapes, not a CPU kernel's SIGFPE."""
    dtype = DTYPES[dtype_name]
    fn = PATHS[path]
    q, k, v = make_qkv(dtype, 2, 4, 2, 5, 6, 8)
    out = fn(q, k[:, :, :0], v[:, :, :0], make_presence(2, 5), torch.zeros(2, 0))
    assert torch.equal(out, torch.zeros(2, 4, 5, 8, dtype=dtype))
    out = fn(q[:, :, :0], k, v, torch.zeros(2, 0), make_presence(2, 6))
    assert out.shape == (2, 4, 0, 8)


@pytest.mark.parametrize("case", CASES, ids=[_ids(c) for c in CASES])
def test_fast_matches_float64_reference(case):
    q, k, v, p_q, p_k, mask, _ = _case(*case, L=17, S=40)
    p_q[:, 2] = 0.0
    for eps_den in (0.0, 1e-6, 0.3):
        fast = oattention(q, k, v, p_q, p_k, mask=mask, eps_den=eps_den)
        ref = reference64(q, k, v, p_q, p_k, mask=mask, eps_den=eps_den)
        assert_within_ulps(
            fast, ref, ulps=KERNEL_VS_REFERENCE_ULPS, scale=value_scale(v), dtype=q.dtype
        )


def test_explicit_scale_matches_reference():
    q, k, v, p_q, p_k, _, _ = _case("fp64", "none", (4, 2), "contig")
    for scale in (0.05, 1.0, 3.0):
        fast = oattention(q, k, v, p_q, p_k, scale=scale)
        ref = oattention_reference(q, k, v, p_q, p_k, scale=scale)
        assert (fast - ref).abs().max().item() <= 1e-13


def test_reference_no_nan_for_very_negative_scores_and_eps_zero():
    """0 * exp(-M) was NaN in the reference when the max live score M < -709."""
    q = torch.full((1, 1, 1, 4), 20.0, dtype=torch.float64)
    k = -q.clone()  # score = -400 * 4 / 2 = -800
    one = torch.ones(1, 1, dtype=torch.float64)
    ref = oattention_reference(q, k, k, one, one, eps_den=0.0)
    assert torch.equal(ref, k)  # a single live source: its value
    assert torch.equal(oattention(q, k, k, one, one, eps_den=0.0), k)


@pytest.mark.parametrize("mask_kind", MASKS)
@pytest.mark.parametrize("heads", HEADS)
@pytest.mark.parametrize("dtype_name", ["fp32", "bf16", "fp16", "fp64"])
def test_identity_presence_one_eps_zero_is_sdpa(mask_kind, heads, dtype_name):
    """Measured: bit-identical to torch SDPA on CPU (the same flash kernel)."""
    H, Hkv = heads
    dtype = DTYPES[dtype_name]
    q, k, v = make_qkv(dtype, 2, H, Hkv, 10, 23, 8, noncontig=True)
    mask = make_mask(mask_kind, 2, H, 10, 23)
    ones_q, ones_k = torch.ones(2, 10), torch.ones(2, 23)
    out = oattention(q, k, v, ones_q, ones_k, mask=mask, eps_den=0.0)
    sdpa = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=Hkv != H)
    assert torch.equal(out, sdpa)
    ref = oattention_reference(q, k, v, ones_q, ones_k, mask=mask, eps_den=0.0)
    assert_within_ulps(ref, sdpa, ulps=KERNEL_VS_REFERENCE_ULPS, scale=value_scale(v))


@pytest.mark.parametrize("L", [64, 256, 1024])
def test_fp32_error_at_most_twice_sdpa_error(L):
    """Done criterion: fp32 error vs float64 <= ~2x plain SDPA's own error."""
    gen = torch.Generator().manual_seed(L)
    q, k, v = make_qkv(torch.float32, 1, 2, 2, L, L, 64, gen=gen)
    rows = torch.randperm(L, generator=gen)[:48]
    q64, k64, v64 = q.double(), k.double(), v.double()
    one = torch.ones(1, L, dtype=torch.float64)
    ref1 = oattention_reference(q64[:, :, rows], k64, v64, one[:, rows], one, eps_den=0.0)
    sdpa_err = (F.scaled_dot_product_attention(q, k, v)[:, :, rows].double() - ref1).abs().max()
    fast1 = oattention(q, k, v, one.float(), one.float(), eps_den=0.0)[:, :, rows]
    assert (fast1.double() - ref1).abs().max() <= 2 * sdpa_err
    p = make_presence(1, L, gen=gen, null_every=10)
    ref = oattention_reference(q64[:, :, rows], k64, v64, p[:, rows].double(), p.double())
    fast = oattention(q, k, v, p, p)[:, :, rows]
    assert (fast.double() - ref).abs().max() <= 2 * sdpa_err


# --- the portable sink route (used off CPU), exercised on CPU -------------------


@pytest.mark.parametrize("case", CASES, ids=[_ids(c) for c in CASES])
def test_sink_route_contracts(monkeypatch, case):
    monkeypatch.setattr(oa_mod, "oattention_route", lambda q: "sink")
    q, k, v, p_q, p_k, mask, gen = _case(*case, L=9, S=13)
    p_q[:, 1] = 0.0
    for eps_den in (0.0, 1e-6):
        out = oattention(q, k, v, p_q, p_k, mask=mask, eps_den=eps_den)
        ref = reference64(q, k, v, p_q, p_k, mask=mask, eps_den=eps_den)
        assert torch.equal(out[:, :, 1], torch.zeros_like(out[:, :, 1]))
        # the sink route casts the bias to the input dtype: bf16 log p rounding
        k_ref = KERNEL_VS_REFERENCE_ULPS * (8 if q.dtype == torch.bfloat16 else 1)
        assert_within_ulps(out, ref, ulps=k_ref, scale=value_scale(v), dtype=q.dtype)
        empty = oattention(q, k, v, p_q, torch.zeros_like(p_k), mask=mask, eps_den=eps_den)
        assert torch.equal(empty, torch.zeros_like(empty))
    k2, v2, p2, m2 = insert_source(q, k, v, p_k, mask, 6, gen=gen)
    base = oattention(q, k, v, p_q, p_k, mask=mask)
    out = oattention(q, k2, v2, p_q, p2, mask=m2)
    assert_within_ulps(out, base, ulps=KERNEL_INSERTION_ULPS, scale=value_scale(v))


# --- bad input raises a clear error ---------------------------------------------


def _good():
    q, k, v = make_qkv(torch.float32, 2, 4, 2, 5, 6, 8)
    return q, k, v, make_presence(2, 5), make_presence(2, 6)


@pytest.mark.parametrize("fn", PATHS.values(), ids=list(PATHS))
def test_bad_shapes_raise(fn):
    q, k, v, pq, pk = _good()
    bad = [
        ((q[0], k, v, pq, pk), "4 dims"),
        ((q, k[:1], v, pq, pk), "batch"),
        ((q, k, v[:, :, :4], pq, pk), "disagree"),
        ((q, k, v[:, :1], pq, pk), "disagree"),
        ((q[..., :4], k, v, pq, pk), "head dims"),
        ((q[:, :3], k, v, pq, pk), "multiple"),
        ((q, k, v, pq[:, :4], pk), "p_q"),
        ((q, k, v, pq, pk[:, :5]), "p_k"),
        ((q, k, v, pq[None], pk), "p_q"),
        ((q, k, v, pq, pk.T), "p_k"),
        ((q, k.double(), v, pq, pk), "dtypes"),
    ]
    for args, match in bad:
        with pytest.raises(ValueError, match=match):
            fn(*args)
    with pytest.raises(TypeError, match="floating"):
        fn(q.int(), k.int(), v.int(), pq, pk)


@pytest.mark.parametrize("fn", PATHS.values(), ids=list(PATHS))
@pytest.mark.parametrize("bad", [-0.1, float("nan"), float("inf"), -float("inf"), 1.5], ids=str)
@pytest.mark.parametrize("which", ["p_q", "p_k"])
def test_bad_presence_values_raise(fn, bad, which):
    q, k, v, pq, pk = _good()
    (pq if which == "p_q" else pk)[1, 2] = bad
    with pytest.raises(ValueError, match=which):
        fn(q, k, v, pq, pk)


@pytest.mark.parametrize("fn", PATHS.values(), ids=list(PATHS))
def test_integer_presence_raises(fn):
    q, k, v, _, pk = _good()
    with pytest.raises(TypeError, match="p_q"):
        fn(q, k, v, torch.ones(2, 5, dtype=torch.int64), pk)


@pytest.mark.parametrize("fn", PATHS.values(), ids=list(PATHS))
def test_bad_mask_raises(fn):
    q, k, v, pq, pk = _good()
    for mask in (torch.ones(2, 4, 5, 6), torch.ones(2, 4, 5, 6, dtype=torch.int64)):
        with pytest.raises(ValueError, match="boolean"):
            fn(q, k, v, pq, pk, mask=mask)
    for shape in [(2, 4, 5, 7), (3, 1, 1, 6), (1, 1, 1, 2, 6), (2, 8, 5, 6), (2, 4, 9, 6)]:
        with pytest.raises(ValueError, match="mask"):
            fn(q, k, v, pq, pk, mask=torch.ones(shape, dtype=torch.bool))


def test_mask_that_only_broadcasts_the_other_way_raises():
    """L = 1 and a mask with 5 query rows: broadcast_shapes succeeds but the mask is wrong."""
    q, k, v, pq, pk = _good()
    with pytest.raises(ValueError, match="does not broadcast"):
        oattention(q[:, :, :1], k, v, pq[:, :1], pk, mask=torch.ones(1, 1, 5, 6, dtype=torch.bool))


@pytest.mark.parametrize("fn", PATHS.values(), ids=list(PATHS))
@pytest.mark.parametrize(
    "eps", [-1e-6, float("nan"), float("inf"), "1e-6", None, True, torch.tensor(1e-6)], ids=str
)
def test_bad_eps_den_raises(fn, eps):
    q, k, v, pq, pk = _good()
    with pytest.raises(ValueError, match="eps_den"):
        fn(q, k, v, pq, pk, eps_den=eps)


def test_ok_broadcast_masks():
    q, k, v, pq, pk = _good()
    ref = oattention_reference(q, k, v, pq, pk)
    for shape in [(6,), (1, 6), (5, 6), (2, 1, 1, 6), (1, 4, 5, 6), (2, 4, 5, 6)]:
        out = oattention(q, k, v, pq, pk, mask=torch.ones(shape, dtype=torch.bool))
        assert (out - ref).abs().max().item() <= 1e-6
    assert math.isfinite(out.sum().item())


def test_the_vectorised_direct_formula_matches_the_per_row_oracle_and_keeps_its_dtype():
    from patches import oattention_direct, oattention_reference

    g = torch.Generator().manual_seed(11)
    q, k, v = (torch.randn(2, 4, 9, 8, generator=g, dtype=torch.float64) for _ in range(3))
    k, v = k[:, :2, :7], v[:, :2, :7]  # grouped heads: Hkv = 2
    p_q, p_k = torch.rand(2, 9, generator=g, dtype=torch.float64), torch.rand(2, 7, generator=g)
    p_q[0, 3], p_k[1, 2] = 0.0, 0.0
    p_k = p_k.double()
    mask = torch.rand(2, 4, 9, 7, generator=g) > 0.3
    mask[1, :, 5] = False  # an empty-support row
    ref = oattention_reference(q, k, v, p_q, p_k, mask=mask)
    direct = oattention_direct(q, k, v, p_q, p_k, mask=mask, dtype=torch.float64)
    # Same float64 formula, different summation order: a few ulps of the output scale.
    assert (ref - direct).abs().max() <= 16 * torch.finfo(torch.float64).eps * ref.abs().max()
    assert (direct[0, :, 3] == 0).all() and (direct[1, :, 5] == 0).all()
    same = oattention_direct(q.float(), k.float(), v.float(), p_q, p_k, mask=mask)
    assert same.dtype == torch.float32


# --- non-finite values in null tokens never reach the output --------

ROUTES = ["native", "sink"]  # the CPU flash route, and the one used off CPU


def _poison_null_tokens(q, k, v, p_q, p_k, bad):
    """Writes ``bad`` into the q of null receivers and the k, v of null sources."""
    q, k, v = q.clone(), k.clone(), v.clone()
    for b, i in (p_q == 0).nonzero().tolist():
        q[b, :, i] = bad
    for b, j in (p_k == 0).nonzero().tolist():
        k[b, :, j, 0] = bad
        v[b, :, j, -1] = bad
    return q, k, v


POISONS = list(itertools.product(ROUTES, [float("nan"), float("inf")]))


@pytest.mark.parametrize(
    ("route", "bad", "case"),
    cross_section(
        [(*poison, case) for poison in POISONS for case in CASES],
        fast=_each_case_once(POISONS),
        value_id=_case_id,
    ),
)
def test_non_finite_null_tokens_change_nothing_as_in_the_oracle(monkeypatch, route, bad, case):
    """NaN/inf in a null source's k/v or a null receiver's q.

    The fast path zeroes them before the kernel (and zeroes null receivers'
    rows after it), so its output equals, bit for bit, its output with those
    entries 0; the float64 oracle drops them, and both agree within the usual
    fast-vs-reference bound.
    """
    if route == "sink":
        monkeypatch.setattr(oa_mod, "oattention_route", lambda q: "sink")
    q, k, v, p_q, p_k, mask, _ = _case(*case)
    p_q[:, 3] = 0.0
    p_q[1, 0] = 0.0
    q_bad, k_bad, v_bad = _poison_null_tokens(q, k, v, p_q, p_k, bad)
    q_zero, k_zero, v_zero = _poison_null_tokens(q, k, v, p_q, p_k, 0.0)
    ref = oattention_reference(q_bad, k_bad, v_bad, p_q, p_k, mask=mask)
    assert torch.equal(ref, oattention_reference(q, k, v, p_q, p_k, mask=mask))
    for validate in (True, False):
        out = oattention(q_bad, k_bad, v_bad, p_q, p_k, mask=mask, validate=validate)
        assert torch.isfinite(out).all()
        assert torch.equal(out, oattention(q_zero, k_zero, v_zero, p_q, p_k, mask=mask))
        assert torch.equal(out[:, :, 3], torch.zeros_like(out[:, :, 3]))
        # the sink route casts the bias to the input dtype: bf16 log p rounding
        sink_bf16 = route == "sink" and q.dtype == torch.bfloat16
        ulps = 8 * KERNEL_VS_REFERENCE_ULPS if sink_bf16 else KERNEL_VS_REFERENCE_ULPS
        assert_within_ulps(
            out,
            reference64(q, k, v, p_q, p_k, mask=mask),
            ulps=ulps,
            scale=value_scale(v),
            dtype=q.dtype,
        )


def test_non_finite_null_tokens_change_nothing_under_autograd():
    """The same, on the out-of-place path autograd takes."""
    q, k, v, p_q, p_k, _, _ = _case("fp32", "none", (4, 2), "contig")
    p_q[:, 2] = 0.0
    q_bad, k_bad, v_bad = _poison_null_tokens(q, k, v, p_q, p_k, float("nan"))
    q_bad.requires_grad_(True)
    out = oattention(q_bad, k_bad, v_bad, p_q, p_k)
    assert torch.isfinite(out).all()
    # The same route on clean null tokens: autograd takes the sink route (the CPU
    # flash op has no gradient for its presence bias), so compare under autograd too.
    q_zero, k_zero, v_zero = _poison_null_tokens(q, k, v, p_q, p_k, 0.0)
    q_zero.requires_grad_(True)
    assert torch.equal(out, oattention(q_zero, k_zero, v_zero, p_q, p_k))


def test_a_live_token_s_nan_still_shows():
    """Only null tokens are cleaned: NaN in a live source reaches the rows that see it."""
    q, k, v, p_q, p_k, _, _ = _case("fp32", "none", (4, 4), "contig")
    live = int((p_k[0] > 0).nonzero()[0])
    k = k.clone()
    k[0, :, live, 0] = float("nan")
    assert torch.isnan(oattention(q, k, v, p_q, p_k)[0]).all()
    assert torch.isfinite(oattention(q, k, v, p_q, p_k)[1]).all()


# --- scale and head dimension are checked on both paths ------------


@pytest.mark.parametrize("fn", PATHS.values(), ids=list(PATHS))
@pytest.mark.parametrize("scale", [float("nan"), float("inf"), -float("inf"), "0.5", True])
def test_a_non_finite_scale_raises_value_error(fn, scale):
    """``oattention(scale=nan)`` is a ValueError on both paths."""
    q, k, v, pq, pk = _good()
    with pytest.raises(ValueError, match="scale"):
        fn(q, k, v, pq, pk, scale=scale)


@pytest.mark.parametrize("fn", PATHS.values(), ids=list(PATHS))
def test_a_head_dimension_of_zero_raises_value_error(fn):
    """Head dim 0 is a ValueError on both paths (not a kernel error)."""
    q, k, v, pq, pk = _good()
    with pytest.raises(ValueError, match="head dimension"):
        fn(q[..., :0], k[..., :0], v, pq, pk)
