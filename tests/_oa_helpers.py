"""Shared builders for the OAttention contract tests.

Shape letters: B batch, H query heads, Hkv key/value heads, L queries,
S sources, D head dimension.
"""

from __future__ import annotations

import torch

DTYPES = {
    "fp32": torch.float32,
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
    "fp64": torch.float64,
}

# Fast path vs float64 reference: tol = K * eps(dtype) * max(1, max|v|), K = 4.
# Measured on this CPU (torch 2.13, flash kernel, 5 random draws B=2 H=4 Hkv=2
# L=33 S=70 D=16, nulls, masks none/key/full), as L-inf abs error:
#   fp32 <= 5.3e-7 (~1.1 eps * max|v|), bf16 <= 3.9e-3 (~0.12), fp16 <= 7.8e-4
#   (~0.2), fp64 <= 1.1e-15 (~1.25). K = 4 leaves >= 3x margin.
K_VS_REFERENCE = 4.0
# Fast path under insertion of a null source / self-insertion (the kernel sees a
# different S, so its matmul blocking and reduction grouping change): measured
# append 0 (bit-identical) for S up to 1100 in fp32/bf16/fp16; mid-sequence
# <= 8.9e-8 fp32, <= 9.8e-4 bf16, <= 1.2e-4 fp16, <= 1.7e-16 fp64 (all <= 0.75
# eps at |out| <= 1). Bound stated and checked: 2 * eps * max(1, max|v|).
K_INSERTION = 2.0


def tol(dtype: torch.dtype, v: torch.Tensor, k: float) -> float:
    """``k * eps(dtype) * max(1, max|v|)``."""
    return k * torch.finfo(dtype).eps * max(1.0, v.abs().max().item())


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


def insert(x: torch.Tensor, pos: int, new: torch.Tensor, dim: int) -> torch.Tensor:
    n = x.shape[dim]
    return torch.cat([x.narrow(dim, 0, pos), new, x.narrow(dim, pos, n - pos)], dim)


def drop(x: torch.Tensor, pos: int, dim: int) -> torch.Tensor:
    n = x.shape[dim]
    return torch.cat([x.narrow(dim, 0, pos), x.narrow(dim, pos + 1, n - pos - 1)], dim)


def insert_source(q, k, v, p_k, mask, pos, *, gen):
    """Insert a null source (random non-zero key and value, presence 0) at ``pos``."""
    B, Hkv, _, D = k.shape
    k2 = insert(k, pos, torch.randn(B, Hkv, 1, D, generator=gen).to(k.dtype), 2)
    v2 = insert(v, pos, torch.randn(B, Hkv, 1, v.shape[-1], generator=gen).to(v.dtype), 2)
    p2 = insert(p_k, pos, torch.zeros(B, 1, dtype=p_k.dtype), 1)
    m2 = None
    if mask is not None:
        col = torch.rand(*mask.shape[:-1], 1, generator=gen) > 0.5
        m2 = insert(mask, pos, col, 3)
    return k2, v2, p2, m2


def reference64(q, k, v, p_q, p_k, **kw) -> torch.Tensor:
    """The float64 oracle on float64 copies of the inputs, so its output is float64."""
    from patches import oattention_reference

    return oattention_reference(
        q.double(), k.double(), v.double(), p_q.double(), p_k.double(), **kw
    )
