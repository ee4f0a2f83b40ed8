"""Shared builders for the OAttention contract tests.

Shape letters: B batch, H query heads, Hkv key/value heads, L queries,
S sources, D head dimension.
"""

from __future__ import annotations

import torch

from eval.operators.sequence_edits import insert_at

DTYPES = {
    "fp32": torch.float32,
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
    "fp64": torch.float64,
}

# The bounds on the fast path (against the float64 reference, and under
# insertion, where the kernel sees one more key) are stated in tests/helpers/exactness.py
# in ulps of ``value_scale(v)``. Measured on the AVX-512 code path (torch 2.13,
# flash kernel, 5 random draws B=2 H=4 Hkv=2 L=33 S=70 D=16, nulls, masks
# none/key/full), L-inf abs: fast vs float64 fp32 <= 5.3e-7 (~1.1 ulps), bf16
# <= 3.9e-3 (~0.12), fp16 <= 7.8e-4 (~0.2), fp64 <= 1.1e-15 (~1.25); under
# insertion appending is bit-identical for S up to 1100 in fp32/bf16/fp16 and
# mid-sequence <= 0.75 ulps in every dtype.


def value_scale(v: torch.Tensor) -> float:
    """The scale the fast path's bounds refer to: ``max(1, max|v|)``."""
    return max(1.0, v.abs().max().item())


def make_qkv(dtype, B=2, H=4, Hkv=2, L=9, S=13, D=8, *, noncontig=False, gen=None):
    """Random q, k, v; ``noncontig`` builds ``(B, S, H, D).transpose(1, 2)`` views."""
    gen = gen if gen is not None else torch.Generator().manual_seed(0)

    def draw(h, n):
        if noncontig:
            return torch.randn(B, n, h, D, generator=gen).to(dtype).transpose(1, 2)
        return torch.randn(B, h, n, D, generator=gen).to(dtype)

    return draw(H, L), draw(Hkv, S), draw(Hkv, S)


def make_presence(B, n, *, gen=None, null_every=0):
    gen = gen if gen is not None else torch.Generator().manual_seed(1)
    p = torch.rand(B, n, generator=gen) * 0.9 + 0.1
    if null_every:
        p[:, ::null_every] = 0.0
    return p


def make_mask(kind, B, H, L, S, *, gen=None):
    """``none``, ``key`` (B,1,1,S) or ``full`` (B,H,L,S); True = visible."""
    gen = gen if gen is not None else torch.Generator().manual_seed(2)
    if kind == "none":
        return None
    if kind == "key":
        return torch.rand(B, 1, 1, S, generator=gen) > 0.25
    if kind == "full":
        return torch.rand(B, H, L, S, generator=gen) > 0.25
    raise ValueError(kind)


def insert_source(q, k, v, p_k, mask, pos, *, gen):
    """Insert a null source (random non-zero key and value, presence 0) at ``pos``."""
    B, Hkv, _, D = k.shape
    k2 = insert_at(k, pos, torch.randn(B, Hkv, 1, D, generator=gen).to(k.dtype), 2)
    v2 = insert_at(v, pos, torch.randn(B, Hkv, 1, v.shape[-1], generator=gen).to(v.dtype), 2)
    p2 = insert_at(p_k, pos, torch.zeros(B, 1, dtype=p_k.dtype), 1)
    m2 = None
    if mask is not None:
        col = torch.rand(*mask.shape[:-1], 1, generator=gen) > 0.5
        m2 = insert_at(mask, pos, col, 3)
    return k2, v2, p2, m2


def reference64(q, k, v, p_q, p_k, **kw) -> torch.Tensor:
    """The float64 oracle on float64 copies of the inputs, so its output is float64."""
    from patches import oattention_reference

    return oattention_reference(
        q.double(), k.double(), v.double(), p_q.double(), p_k.double(), **kw
    )
