"""Contracts of the O-closed modules: OFFN, ONorm, OInject, OStandardize,
OAttention, OTransformerBlock, support_size.

Every host module here has non-zero biases and perturbed weights (LayerNorm
bias, FFN biases, attention in/out projection biases), so that a test that
expects the null state to survive could fail if a gate were missing: each
test first checks the unpatched map does revive the null token.

Tolerances (tests/helpers/exactness.py states what holds on every CPU and BLAS): a
null token's own output is exactly 0 (the receiver gate), asserted with
``torch.equal``. The other tokens are unchanged by the mathematics, but each
module runs its projections, norms and FFN as one BLAS call over the whole
sequence, and a sequence one row longer may be blocked differently (it is, on
AVX2), so even with the float64 reference attention inside they are checked
within ``MODULE_ULPS[dtype]`` ulps of ``max(1, max|out|)``, never with
``torch.equal``. The reference attention's own rows are bit-identical under
insertion; tests/patches/test_oattention.py checks that on the kernel itself.
OStandardize under insertion: a null token adds exact zeros to the weighted
sums, but inserting it regroups the vectorised reduction over the token axis
(measured <= 4 ulps mid-sequence, float32 and float64, 30 seeds, |z| <= 4;
bit-identical when appending on the code paths tried, which the reduction's
grouping does not promise); checked within ``MODULE_ULPS[dtype]`` ulps.
"""

from __future__ import annotations

import contextlib

import pytest
import torch
from torch import nn

from patches import (
    OFFN,
    OAttention,
    OInject,
    ONorm,
    OStandardize,
    OTransformerBlock,
    presence,
    support_size,
)
from tests.helpers.exactness import MODEL_ULPS, MODULE_ULPS, assert_exactly_zero, assert_within_ulps

DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.float64]
E = 16


def _perturb(module: nn.Module, sigma: float = 0.3, seed: int = 0) -> nn.Module:
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.add_(torch.randn(p.shape, generator=gen, dtype=torch.float64).to(p.dtype) * sigma)
    return module


def _tokens(B, S, dtype, seed=0, null=()):
    h = torch.randn(B, S, E, generator=torch.Generator().manual_seed(seed)).to(dtype)
    for i in null:
        h[:, i] = 0
    return h


def _ins(x, pos, new, dim=1):
    return torch.cat([x.narrow(dim, 0, pos), new, x.narrow(dim, pos, x.shape[dim] - pos)], dim)


def _drop(x, pos, dim=1):
    n = x.shape[dim]
    return torch.cat([x.narrow(dim, 0, pos), x.narrow(dim, pos + 1, n - pos - 1)], dim)


@contextlib.contextmanager
def reference_attention(*modules):
    """OAttention inside ``modules`` evaluates the float64 reference oracle."""
    attns = [m for mod in modules for m in mod.modules() if isinstance(m, OAttention)]
    assert attns, "no OAttention to switch"
    before = [attn.kernel for attn in attns]
    for attn in attns:
        attn.kernel = "reference"
    try:
        yield
    finally:
        for attn, kernel in zip(attns, before, strict=True):
            attn.kernel = kernel


def _shares(new: nn.Module, old: nn.Module):
    """Every parameter of ``new`` is one of ``old``'s (same storage), none is new."""
    old_ptrs = {p.data_ptr() for p in old.parameters()}
    old_ids = {id(p) for p in old.parameters()}
    new_params = list(new.parameters())
    assert new_params, "no parameters at all"
    assert all(p.data_ptr() in old_ptrs for p in new_params)
    assert all(id(p) in old_ids for p in new_params)
    assert sum(p.numel() for p in new.parameters()) == sum(p.numel() for p in old.parameters())


# --- ONorm ----------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_onorm_null_stays_zero_and_gates_present_tokens(dtype):
    norm = _perturb(nn.LayerNorm(E, dtype=dtype))
    h = _tokens(2, 5, dtype, null=(1, 4))
    assert norm(h)[:, 1].abs().max() > 0  # LayerNorm(0) = bias != 0: the test can fail
    onorm = ONorm.from_module(norm, tau=0.7)
    _shares(onorm, norm)
    out = onorm(h)
    assert torch.equal(out[:, 1], torch.zeros_like(out[:, 1]))
    assert torch.equal(out[:, 4], torch.zeros_like(out[:, 4]))
    p = presence(h, 0.7)
    assert torch.equal(out, norm(h) * p.unsqueeze(-1).to(dtype))
    assert torch.equal(onorm(h, p), out)


# --- OFFN -----------------------------------------------------------------------


def _ffn(dtype):
    return _perturb(
        nn.Sequential(nn.Linear(E, 32, dtype=dtype), nn.GELU(), nn.Linear(32, E, dtype=dtype))
    )


@pytest.mark.parametrize("dtype", DTYPES)
def test_offn_null_stays_zero_present_tokens_updated(dtype):
    ffn, norm = _ffn(dtype), _perturb(nn.LayerNorm(E, dtype=dtype), seed=1)
    h = _tokens(3, 6, dtype, null=(0, 3))
    assert (h + ffn(norm(h)))[:, 0].abs().max() > 0  # the host revives a null
    offn = OFFN.from_module(ffn, norm, tau=1.0)
    _shares(offn, nn.ModuleList([ffn, norm]))
    out = offn(h)
    assert torch.equal(out[:, [0, 3]], torch.zeros_like(out[:, [0, 3]]))
    p = presence(h, 1.0).unsqueeze(-1).to(dtype)
    assert torch.equal(out, h + ffn(norm(h)) * p)
    # without a norm
    out = OFFN(ffn)(h)
    assert torch.equal(out[:, 0], torch.zeros_like(out[:, 0]))


@pytest.mark.parametrize("dtype", DTYPES)
def test_offn_insertion_changes_nothing(dtype):
    offn = OFFN(_ffn(dtype), _perturb(nn.LayerNorm(E, dtype=dtype), seed=1))
    h = _tokens(2, 6, dtype)
    base = offn(h)
    out = offn(_ins(h, 2, torch.zeros(2, 1, E, dtype=dtype)))
    assert_exactly_zero(out[:, 2])
    # token-local: other rows see a different matmul M only
    assert_within_ulps(_drop(out, 2), base, ulps=MODULE_ULPS[dtype])


# --- OInject --------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_oinject_null_stays_zero(dtype):
    embed = _perturb(nn.Linear(3, E, dtype=dtype))
    h = _tokens(2, 5, dtype, null=(2,))
    ctx = torch.randn(2, 5, 3).to(dtype)
    assert (h + embed(ctx))[:, 2].abs().max() > 0
    inj = OInject.from_module(embed, tau=2.0)
    _shares(inj, embed)
    out = inj(h, ctx)
    assert torch.equal(out[:, 2], torch.zeros_like(out[:, 2]))
    p = presence(h, 2.0).unsqueeze(-1).to(dtype)
    assert torch.equal(out, h + embed(ctx) * p)
    assert torch.equal(inj(h, ctx, presence(h, 2.0)), out)


# --- OStandardize ---------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_ostandardize_weighted_stats_and_null(dtype):
    h = _tokens(2, 9, dtype, null=(4,)) * 3 + 1
    h[:, 4] = 0
    p = presence(h, 1.0)
    p[:, 7] = 0.0  # a present-looking token given zero mass is treated as null
    out = OStandardize()(h, p)
    assert torch.equal(out[:, [4, 7]], torch.zeros_like(out[:, [4, 7]]))
    w = p.double().unsqueeze(-1)
    hd = h.double()
    mu = (w * hd).sum(1, keepdim=True) / w.sum(1, keepdim=True)
    var = (w * (hd - mu) ** 2).sum(1, keepdim=True) / w.sum(1, keepdim=True)
    z = ((hd - mu) / torch.sqrt(var + 1e-8)) * (w > 0)
    tol = 1e-12 if dtype == torch.float64 else (1e-5 if dtype == torch.float32 else 0.05)
    assert (out.double() - z).abs().max().item() <= tol * max(1.0, z.abs().max().item())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("pos", [0, 5, 12])
def test_ostandardize_insertion_changes_nothing(dtype, pos):
    h = _tokens(3, 12, dtype) * 2 - 0.5
    p = presence(h, 1.0)
    std = OStandardize()
    base = std(h, p)
    h2 = _ins(h, pos, torch.zeros(3, 1, E, dtype=dtype))
    out = std(h2, presence(h2, 1.0))
    assert_exactly_zero(out[:, pos])
    assert_within_ulps(_drop(out, pos), base, ulps=MODULE_ULPS[dtype])


def test_ostandardize_all_null_is_zero_not_nan():
    h = torch.zeros(2, 4, E)
    out = OStandardize()(h, torch.zeros(2, 4))
    assert torch.equal(out, torch.zeros_like(out))


def test_support_size():
    p = torch.tensor([[0.0, 0.5, 0.25, 0.0], [1.0, 1.0, 1.0, 1.0]])
    assert torch.equal(support_size(p), torch.tensor([2.0, 4.0]))
    assert torch.equal(support_size(p, "count"), torch.tensor([2.0, 4.0]))
    assert torch.equal(support_size(p, "mass"), torch.tensor([0.75, 4.0]))
    with pytest.raises(ValueError, match="support"):
        support_size(p, "bogus")


def test_support_size_counts_a_source_as_often_as_its_weight():
    # Weight 2 on a source is that source twice; a weight on a null source counts nothing.
    p = torch.tensor([[0.0, 0.5, 0.25, 0.0], [1.0, 1.0, 1.0, 1.0]])
    w = torch.tensor([[3.0, 2.0, 1.0, 0.5], [0.0, 1.0, 2.0, 0.5]])
    assert torch.equal(support_size(p, "count", weights=w), torch.tensor([3.0, 3.5]))
    assert torch.equal(support_size(p, "mass", weights=w), torch.tensor([1.25, 3.5]))
    twice = torch.cat([p, p[:, 1:2]], dim=1)  # source 1 repeated: weight 2
    ones = torch.ones(2, 5)
    ones_but = torch.tensor([[1.0, 2.0, 1.0, 1.0], [1.0, 2.0, 1.0, 1.0]])
    for kind in ("count", "mass"):
        assert torch.equal(support_size(twice, kind, weights=ones), support_size(twice, kind))
        assert torch.equal(support_size(p, kind, weights=ones_but), support_size(twice, kind))


# --- OAttention -----------------------------------------------------------------


def _mha(dtype=torch.float32, heads=4):
    return _perturb(nn.MultiheadAttention(E, heads, batch_first=True, dtype=dtype)).eval()


def test_oattention_from_module_shares_parameters():
    mha = _mha()
    oa = OAttention.from_module(mha)
    _shares(oa, mha)
    assert oa.in_proj.weight.data_ptr() == mha.in_proj_weight.data_ptr()
    assert oa.in_proj.bias.data_ptr() == mha.in_proj_bias.data_ptr()
    assert oa.out_proj.weight.data_ptr() == mha.out_proj.weight.data_ptr()
    with torch.no_grad():  # an update to the host is seen by the patch
        mha.in_proj_weight.mul_(2)
    assert torch.equal(oa.in_proj.weight, mha.in_proj_weight)


@pytest.mark.parametrize("dtype", DTYPES)
def test_oattention_null_receiver_zero_with_out_proj_bias(dtype):
    mha = _mha(dtype)
    oa = OAttention.from_module(mha)
    h = _tokens(2, 7, dtype, null=(3,))
    with torch.no_grad():
        assert mha(h, h, h, need_weights=False)[0][:, 3].abs().max() > 0
        out = oa(h)
    assert torch.equal(out[:, 3], torch.zeros_like(out[:, 3]))
    assert not torch.isnan(out).any()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("pos", [0, 4, 7])
def test_oattention_module_null_token_insertion(dtype, pos):
    oa = OAttention.from_module(_mha(dtype))
    h = _tokens(2, 7, dtype)
    h2 = _ins(h, pos, torch.zeros(2, 1, E, dtype=dtype))
    with torch.no_grad():
        base, out = oa(h), oa(h2)
        assert_exactly_zero(out[:, pos])
        assert_within_ulps(_drop(out, pos), base, ulps=MODULE_ULPS[dtype])
        if dtype == torch.float64:
            # the reference attention, but the in/out projections still see
            # one more row: a bound, not torch.equal
            with reference_attention(oa):
                base, out = oa(h), oa(h2)
            assert_within_ulps(_drop(out, pos), base, ulps=MODULE_ULPS[dtype])
            assert_exactly_zero(out[:, pos])


def test_oattention_presence_from_carrier_and_identity():
    mha = _mha(torch.float64)
    oa = OAttention.from_module(mha, eps_den=0.0)
    x = _tokens(2, 6, torch.float64)
    with torch.no_grad():
        ref = mha(x, x, x, need_weights=False)[0]
        ident = oa(x, p_BS=torch.ones(2, 6, dtype=torch.float64))
        assert (ident - ref).abs().max().item() <= 1e-13
        # presence read from the carrier h (a null carrier), not from x
        h = x.clone()
        h[:, 2] = 0
        out = oa(x, h)
        assert torch.equal(out[:, 2], torch.zeros_like(out[:, 2]))
        assert out[:, 0].abs().max() > 0


def test_oattention_from_module_errors():
    with pytest.raises(TypeError, match="MultiheadAttention"):
        OAttention.from_module(nn.Linear(E, E))
    with pytest.raises(ValueError, match="batch_first"):
        OAttention.from_module(nn.MultiheadAttention(E, 4, batch_first=False))
    with pytest.raises(ValueError, match="divisible"):
        OAttention(E, 5)
    with pytest.raises(ValueError, match="tau"):
        OAttention.from_module(_mha(), tau=0.0)
    with pytest.raises(ValueError, match="tau"):
        ONorm(nn.LayerNorm(E), tau=float("nan"))


# --- OTransformerBlock ----------------------------------------------------------


def _layer(dtype=torch.float64, seed=0, sigma=0.3):
    layer = nn.TransformerEncoderLayer(
        E, 4, 32, dropout=0.0, batch_first=True, norm_first=True, dtype=dtype
    )
    return _perturb(layer, sigma=sigma, seed=seed).eval()


@pytest.mark.parametrize("mode", ["full-o", "oattention"])
def test_block_from_module_shares_parameters(mode):
    layer = _layer()
    block = OTransformerBlock.from_module(layer, mode=mode)
    _shares(block, layer)
    assert block.attn.in_proj.weight.data_ptr() == layer.self_attn.in_proj_weight.data_ptr()
    ptrs = {p.data_ptr() for p in block.parameters()}
    for p in (layer.norm1.bias, layer.norm2.weight, layer.linear1.bias, layer.linear2.weight):
        assert p.data_ptr() in ptrs


def test_oattention_mode_identity_reproduces_the_layer():
    """tau -> 0 (presence 1 in float64) and eps_den = 0: the host layer exactly."""
    layer = _layer()
    block = OTransformerBlock.from_module(layer, mode="oattention", tau=1e-300, eps_den=0.0)
    x = _tokens(2, 7, torch.float64)
    with torch.no_grad():
        assert (block(x) - layer(x)).abs().max().item() <= 1e-13


@pytest.mark.parametrize("dtype", DTYPES)
def test_full_o_block_null_token_stays_null_and_changes_nothing(dtype):
    layer = _layer(dtype)
    block = OTransformerBlock.from_module(layer, mode="full-o")
    h = _tokens(2, 8, dtype)
    pos = 3
    h2 = _ins(h, pos, torch.zeros(2, 1, E, dtype=dtype))
    with torch.no_grad():
        base, out = block(h), block(h2)
    assert_exactly_zero(out[:, pos])
    assert_within_ulps(_drop(out, pos), base, ulps=MODULE_ULPS[dtype])
    if dtype == torch.float64:
        with torch.no_grad(), reference_attention(block):
            base, out = block(h), block(h2)
        assert_within_ulps(_drop(out, pos), base, ulps=MODULE_ULPS[dtype])
        assert_exactly_zero(out[:, pos])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_oattention_mode_revives_null_full_o_does_not(seed):
    """OA-only: LayerNorm bias and FFN biases revive a null; two blocks spread it."""
    layers = [_layer(seed=seed + 10 * i) for i in range(2)]
    h = _tokens(2, 8, torch.float64, seed=seed)
    pos = 4
    h2 = _ins(h, pos, torch.zeros(2, 1, E, dtype=torch.float64))
    results = {}
    for mode in ("full-o", "oattention"):
        blocks = [OTransformerBlock.from_module(layer, mode=mode) for layer in layers]
        with torch.no_grad(), reference_attention(*blocks):
            one = blocks[0](h2)
            y, y2 = blocks[1](blocks[0](h)), blocks[1](one)
        results[mode] = (one[:, pos], y2[:, pos], _drop(y2, pos), y)
    # OA-only: after block 1 the null is FFN(Norm2(0)) != 0, then it is a source
    one, null, old, y = results["oattention"]
    assert one.norm().item() > 1e-3
    assert null.norm().item() > 1e-3
    assert (old - y).abs().max().item() > 1e-6
    # Full-O: the null token exactly 0 after each block (the gates); the old
    # tokens unchanged up to the rounding of projections one row longer
    one, null, old, y = results["full-o"]
    assert_exactly_zero(one)
    assert_exactly_zero(null)
    assert_within_ulps(old, y, ulps=MODEL_ULPS[torch.float64])


def test_block_errors():
    with pytest.raises(ValueError, match="mode"):
        OTransformerBlock.from_module(_layer(), mode="bogus")
    post_norm = nn.TransformerEncoderLayer(E, 4, 32, batch_first=True, norm_first=False)
    with pytest.raises(ValueError, match="norm_first"):
        OTransformerBlock.from_module(post_norm)
    seq_first = nn.TransformerEncoderLayer(E, 4, 32, batch_first=False, norm_first=True)
    with pytest.raises(ValueError, match="batch_first"):
        OTransformerBlock.from_module(seq_first)
    with pytest.raises(ValueError, match="norm_first"):
        OTransformerBlock.from_module(nn.Linear(E, E))


def test_oattention_kernel_option_selects_the_reference_and_rejects_unknown():
    torch.manual_seed(0)
    layer = (
        nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, batch_first=True, norm_first=True)
        .double()
        .eval()
    )
    with torch.no_grad():
        layer.self_attn.out_proj.weight.normal_()
    h = torch.randn(2, 5, 16, dtype=torch.float64)
    fast = OTransformerBlock.from_module(layer, kernel="fast")(h)
    ref_block = OTransformerBlock.from_module(layer, kernel="reference")
    assert ref_block.attn.kernel == "reference"
    torch.testing.assert_close(ref_block(h), fast, rtol=1e-12, atol=1e-12)
    # Mid-sequence null insertion through the reference kernel: the null row
    # exactly 0; the others up to the rounding of the block's projections, which
    # see one more row (the kernel's own rows: tests/patches/test_oattention.py).
    h0 = torch.cat([h[:, :2], torch.zeros(2, 1, 16, dtype=torch.float64), h[:, 2:]], dim=1)
    out0 = ref_block(h0)
    others = torch.cat([out0[:, :2], out0[:, 3:]], dim=1)
    assert_within_ulps(others, ref_block(h), ulps=MODULE_ULPS[torch.float64])
    assert_exactly_zero(out0[:, 2])
    with pytest.raises(ValueError, match="kernel"):
        OAttention(16, 4, kernel="exact")


@pytest.mark.parametrize("tau", [1e-300, 1e39], ids=str)
@pytest.mark.parametrize("mode", ["full-o", "oattention"])
def test_block_runs_a_tau_beyond_float32_and_keeps_a_null_token_null(mode, tau):
    """Tau below float32's subnormals (was NaN presence, a raise) or above
    its max (was presence 0 for every token) in a float32 block."""
    layer = _layer(torch.float32)
    block = OTransformerBlock.from_module(layer, mode=mode, tau=tau)
    h = _tokens(2, 8, torch.float32)
    h[:, 3] = 0.0
    with torch.no_grad():
        out = block(h)
        p = presence(h, tau)
    assert torch.isfinite(out).all()
    assert bool((p[:, [0, 1, 2, 4, 5, 6, 7]] > 0).all()) and bool((p[:, 3] == 0).all())
    if mode == "full-o":
        assert torch.equal(out[:, 3], torch.zeros_like(out[:, 3]))
