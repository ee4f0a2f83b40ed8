"""OAttention's CUDA route on a CPU: GQA fold, bias padding, lse slicing, the fallback.

An emulated float64 kernel stands in for CUDA's efficient attention and enforces
what the real kernel requires of its caller.
"""

from __future__ import annotations

import pytest
import torch

from tests.helpers.oattention_inputs import reference64


def _emulated_efficient_attention(calls):
    """A float64 stand-in for ``aten._scaled_dot_product_efficient_attention``.

    It enforces what the CUDA kernel requires of its caller (no grouped K/V, a
    bias in the query dtype, expanded to ``(B, H, L, S)`` over a 16-aligned
    row), pads its lse like the kernel and returns NaN rows where every score
    is ``-inf``, as a careless kernel may.
    """

    def op(q, k, v, bias, compute_lse, dropout_p, is_causal, *, scale=None):
        B, H, L, D = q.shape
        assert k.shape[1] == H and v.shape[1] == H, "the kernel has no grouped-query K/V"
        assert bias.dtype == q.dtype and tuple(bias.shape) == (B, H, L, k.shape[2])
        assert B == 1 or bias.stride(0) % 16 == 0, bias.stride()
        assert compute_lse and dropout_p == 0.0 and not is_causal
        s = (q.double() @ k.double().transpose(-1, -2)) / D**0.5 + bias.double()
        lse = torch.logsumexp(s, -1)
        out = torch.softmax(s, -1) @ v.double()
        lse_pad = torch.full((B, H, -(-L // 32) * 32), 1e4)
        lse_pad[..., :L] = lse
        calls.append(tuple(q.shape))
        return out.to(q.dtype), lse_pad, torch.empty(()), torch.empty(())

    return op


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("mask_kind", [None, "key", "full"])
@pytest.mark.parametrize("dims", [(2, 4, 4, 7, 5, 8), (2, 4, 2, 9, 21, 16), (1, 8, 1, 40, 17, 8)])
def test_cuda_route_logic_with_an_emulated_kernel(monkeypatch, dtype, mask_kind, dims):
    import importlib

    from patches.oattention import oattention

    oa_mod = importlib.import_module("patches.oattention")
    calls = []
    monkeypatch.setattr(oa_mod, "oattention_route", lambda q: "cuda-efficient")
    monkeypatch.setattr(oa_mod, "_efficient_op", lambda: _emulated_efficient_attention(calls))
    B, H, Hkv, L, S, D = dims
    g = torch.Generator().manual_seed(sum(dims))
    q = torch.randn(B, H, L, D, generator=g).to(dtype)
    k = torch.randn(B, Hkv, S, D, generator=g).to(dtype)
    v = torch.randn(B, Hkv, S, D, generator=g).to(dtype)
    p_q, p_k = torch.rand(B, L, generator=g), torch.rand(B, S, generator=g)
    p_q[0, 0], p_k[0, -1] = 0.0, 0.0
    if B > 1:
        p_k[1] = 0.0  # empty support: the emulated kernel returns NaN rows there
    mask = None
    if mask_kind == "key":
        mask = torch.rand(B, 1, 1, S, generator=g) > 0.3
    elif mask_kind == "full":
        mask = torch.rand(B, H, L, S, generator=g) > 0.3
        mask[0, 0, 1] = False
    for eps_den in (1e-6, 0.0):
        out = oattention(q, k, v, p_q, p_k, mask=mask, eps_den=eps_den)
        ref = reference64(q, k, v, p_q, p_k, mask=mask, eps_den=eps_den)
        assert out.dtype == dtype and torch.isfinite(out).all()
        assert torch.equal(out[0, :, 0], torch.zeros_like(out[0, :, 0]))
        if B > 1:
            assert torch.equal(out[1], torch.zeros_like(out[1]))
        tol = 1e-6 if dtype == torch.float32 else 3e-2  # bf16: bias and output rounding
        assert (out.double() - ref).abs().max() <= tol
    grouped_fold = Hkv < H and mask_kind != "full"
    assert calls and all(c[1] == (Hkv if grouped_fold else H) for c in calls)


def test_cuda_route_falls_back_to_sink_with_one_warning(monkeypatch):
    import importlib
    import warnings

    from patches.oattention import oattention

    oa_mod = importlib.import_module("patches.oattention")

    def rejecting(*args, **kwargs):
        raise RuntimeError("head dim not supported (emulated)")

    monkeypatch.setattr(oa_mod, "oattention_route", lambda q: "cuda-efficient")
    monkeypatch.setattr(oa_mod, "_efficient_op", lambda: rejecting)
    monkeypatch.setattr(oa_mod, "_FALLBACKS_WARNED", set())
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 2, n, 12, generator=g) for n in (6, 5, 5))
    p_q, p_k = torch.rand(2, 6, generator=g), torch.rand(2, 5, generator=g)
    p_k[1] = 0.0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        outs = [oattention(q, k, v, p_q, p_k) for _ in range(3)]
    assert len([w for w in caught if "sink route" in str(w.message)]) == 1
    ref = reference64(q, k, v, p_q, p_k)
    for out in outs:
        assert (out.double() - ref).abs().max() <= 1e-6
        assert torch.equal(out[1], torch.zeros_like(out[1]))
