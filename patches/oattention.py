"""OAttention: attention in which the zero carrier is a true NULL state.

For a receiver ``i`` with presence ``p_i``, sources ``j`` with presence ``p_j``,
scores ``s_ij`` and a visibility mask ``m_ij``::

    OAttention_i = p_i * sum_j m_ij p_j exp(s_ij) v_j
                         / (eps_den + sum_j m_ij p_j exp(s_ij))

Shape letters (the layout of ``torch.nn.functional.scaled_dot_product_attention``):
B batch, H query heads, Hkv key/value heads (``H % Hkv == 0``), L queries,
S sources, D head dimension.

Two implementations share one signature:

* :func:`oattention_reference`, a direct float64 evaluation that drops
  zero-weight sources *before* ``exp``; it is the oracle of every test and is
  bit-identical under insertion of null sources or null receivers.
* :func:`oattention`, the fast path: ``log p_j`` is an additive per-key bias of
  shape ``(B, 1, 1, S)`` handed to a fused attention kernel, and the
  ``eps_den`` term and receiver gate are folded into one factor computed from
  the kernel's log-sum-exp: ``out * p_i * sigmoid(lse_i - log eps_den)``.
  Empty support (every source masked or null) is detected from presence and
  the mask, never from the kernel's lse (the CPU kernel returns 0, not -inf,
  for a fully masked row).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

__all__ = ["oattention", "oattention_reference", "validate_oattention_inputs"]

_FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def validate_oattention_inputs(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    p_q: torch.Tensor,
    p_k: torch.Tensor,
    mask: torch.Tensor | None,
    eps_den: float,
    *,
    check_values: bool = True,
) -> None:
    """Raises a clear error for inputs :func:`oattention` cannot evaluate.

    Args:
        q: Queries ``(B, H, L, D)``.
        k: Keys ``(B, Hkv, S, D)``.
        v: Values ``(B, Hkv, S, Dv)``.
        p_q: Receiver presence ``(B, L)``.
        p_k: Source presence ``(B, S)``.
        mask: Optional boolean mask broadcastable to ``(B, H, L, S)``.
        eps_den: Denominator floor, finite and ``>= 0``.
        check_values: Also check that presence is finite and in ``[0, 1]``
            (one reduction over ``B * (L + S)`` values).

    Raises:
        ValueError: On mismatched shapes, a wrong presence shape, negative or
            non-finite presence, a non-boolean mask or a bad ``eps_den``.
        TypeError: On non-floating inputs.
    """
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dim() != 4:
            raise ValueError(f"{name} must have 4 dims (B, heads, seq, D), got {tuple(t.shape)}")
        if t.dtype not in _FLOAT_DTYPES:
            raise TypeError(f"{name} must be a floating tensor, got {t.dtype}")
    if not (q.dtype == k.dtype == v.dtype):
        raise ValueError(f"q, k, v dtypes differ: {q.dtype}, {k.dtype}, {v.dtype}")
    B, H, L, D = q.shape
    if k.shape[0] != B or v.shape[0] != B:
        raise ValueError(f"batch sizes differ: q {B}, k {k.shape[0]}, v {v.shape[0]}")
    if k.shape[1] != v.shape[1] or k.shape[2] != v.shape[2]:
        raise ValueError(f"k {tuple(k.shape)} and v {tuple(v.shape)} disagree on heads or length")
    if k.shape[3] != D:
        raise ValueError(f"q and k head dims differ: {D} vs {k.shape[3]}")
    if k.shape[1] == 0 or H % k.shape[1] != 0:
        raise ValueError(f"query heads ({H}) must be a multiple of key/value heads ({k.shape[1]})")
    S = k.shape[2]
    if tuple(p_q.shape) != (B, L):
        raise ValueError(f"p_q must have shape (B, L) = {(B, L)}, got {tuple(p_q.shape)}")
    if tuple(p_k.shape) != (B, S):
        raise ValueError(f"p_k must have shape (B, S) = {(B, S)}, got {tuple(p_k.shape)}")
    if mask is not None:
        if mask.dtype != torch.bool:
            raise ValueError(f"mask must be boolean (True = visible), got {mask.dtype}")
        try:
            torch.broadcast_shapes(mask.shape, (B, H, L, S))
        except RuntimeError as err:
            raise ValueError(
                f"mask of shape {tuple(mask.shape)} does not broadcast to {(B, H, L, S)}"
            ) from err
        if mask.dim() > 4:
            raise ValueError(f"mask has more than 4 dims: {tuple(mask.shape)}")
    if not isinstance(eps_den, (int, float)) or not math.isfinite(eps_den) or eps_den < 0:
        raise ValueError(f"eps_den must be a finite number >= 0, got {eps_den!r}")
    if check_values:
        for name, p in (("p_q", p_q), ("p_k", p_k)):
            if not torch.is_floating_point(p):
                raise TypeError(f"{name} must be floating, got {p.dtype}")
            if p.numel() and not bool(((p >= 0) & (p <= 1)).all()):
                raise ValueError(
                    f"{name} must be finite and in [0, 1] (got NaN, inf or out of range)"
                )


def _mask_4d(mask: torch.Tensor | None) -> torch.Tensor | None:
    return None if mask is None else mask.reshape((1,) * (4 - mask.dim()) + tuple(mask.shape))


def _empty_support_BHL(
    p_k: torch.Tensor, mask: torch.Tensor | None, shape_BHL: tuple[int, int, int]
) -> torch.Tensor:
    """True where a receiver sees no live source (masked out or null).

    With no mask or a key-only mask this reduces ``(B, 1, 1, S)`` values, so
    no ``L x S`` tensor is built.
    """
    live_B11S = (p_k > 0)[:, None, None, :]
    live = live_B11S if mask is None else live_B11S & _mask_4d(mask)
    return ~live.any(dim=-1).expand(shape_BHL)


def _sdpa_with_lse(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    bias: torch.Tensor,
    scale: float | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Fused softmax attention with an additive bias, returning ``(out, lse)``.

    On CPU this is the flash kernel, which takes grouped-query K/V and strided
    views as they are. Elsewhere the bias is materialised as an extra score by
    the sink route in :func:`oattention`, so this path is CPU-only.
    """
    out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
        q, k, v, attn_mask=bias, scale=scale
    )
    return out, lse


def oattention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    p_q: torch.Tensor,
    p_k: torch.Tensor,
    *,
    mask: torch.Tensor | None = None,
    eps_den: float = 1e-6,
    scale: float | None = None,
) -> torch.Tensor:
    """OAttention, fast exact path.

    Args:
        q: Queries ``(B, H, L, D)``; non-contiguous views are accepted.
        k: Keys ``(B, Hkv, S, D)`` with ``H % Hkv == 0`` (grouped-query).
        v: Values ``(B, Hkv, S, Dv)``.
        p_q: Receiver presence ``(B, L)`` in ``[0, 1]``.
        p_k: Source presence ``(B, S)`` in ``[0, 1]``.
        mask: Optional boolean mask broadcastable to ``(B, H, L, S)``,
            True = visible.
        eps_den: Denominator floor ``>= 0``; with 0 a fully present row is
            plain softmax attention.
        scale: Score scale; ``1 / sqrt(D)`` when None.

    Returns:
        ``(B, H, L, Dv)`` in the input dtype. A receiver with ``p_i = 0`` gets
        exactly 0; a receiver with no live source gets 0, never NaN.
    """
    validate_oattention_inputs(q, k, v, p_q, p_k, mask, eps_den)
    B, H, L, _ = q.shape
    # Presence is handled in float32 at least: log p of a bf16 presence would
    # shift every weight by bf16 rounding.
    wide = torch.float64 if q.dtype == torch.float64 else torch.float32
    p_k = p_k.to(wide)
    p_q = p_q.to(wide)
    log_pk_B11S = torch.log(p_k)[:, None, None, :]
    if mask is not None:
        log_pk_B11S = log_pk_B11S.masked_fill(~_mask_4d(mask), float("-inf"))
    empty_BHL = _empty_support_BHL(p_k, mask, (B, H, L))

    if q.device.type == "cpu":
        # The kernel takes a float32 bias beside bf16/fp16 queries, which
        # keeps log p_j at float32 precision.
        out_BHLD, lse_BHL = _sdpa_with_lse(q, k, v, log_pk_B11S, scale)
        # sum_j p_j e^{s_ij} = e^{lse}; the eps_den term turns softmax's
        # 1 / Z into 1 / (eps + Z) = sigmoid(lse - log eps) / Z.
        log_eps = math.log(eps_den) if eps_den > 0 else float("-inf")
        gate_BHL = torch.sigmoid(lse_BHL.to(wide) - log_eps) * p_q[:, None, :]
    else:
        out_BHLD, gate_BHL = _sink_attention(q, k, v, log_pk_B11S, eps_den, scale)
        gate_BHL = gate_BHL * p_q[:, None, :]
    gate_BHL = gate_BHL.masked_fill(empty_BHL, 0.0).unsqueeze(-1)
    if out_BHLD.dtype == wide:
        out = out_BHLD * gate_BHL
    else:  # one rounding to bf16/fp16, after the gate
        out = (out_BHLD.to(wide) * gate_BHL).to(q.dtype)
    if q.device.type != "cpu":
        # A fully masked row can come back NaN from a non-flash kernel, and
        # NaN * 0 is NaN, so select rather than rely on the zero gate.
        out = out.masked_fill(empty_BHL.unsqueeze(-1), 0.0)
    return out


def _sink_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    log_pk_B11S: torch.Tensor,
    eps_den: float,
    scale: float | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Portable route: ``eps_den`` as one extra zero key/value with bias ``log eps``.

    Returns the attention output (already divided by ``eps + Z``) and a gate of
    ones, so the caller applies only the receiver presence.
    """
    B, H, L, _ = q.shape
    Hkv = k.shape[1]
    if eps_den > 0:
        k = torch.cat([k, k.new_zeros(B, Hkv, 1, k.shape[-1])], dim=2)
        v = torch.cat([v, v.new_zeros(B, Hkv, 1, v.shape[-1])], dim=2)
        sink = log_pk_B11S.new_full((B, 1, 1, 1), math.log(eps_den))
        log_pk_B11S = torch.cat([log_pk_B11S, sink], dim=-1)
    out = F.scaled_dot_product_attention(
        q, k, v, attn_mask=log_pk_B11S.to(q.dtype), scale=scale, enable_gqa=Hkv != H
    )
    return out, torch.ones(B, H, L, dtype=log_pk_B11S.dtype, device=q.device)


def oattention_reference(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    p_q: torch.Tensor,
    p_k: torch.Tensor,
    *,
    mask: torch.Tensor | None = None,
    eps_den: float = 1e-6,
    scale: float | None = None,
) -> torch.Tensor:
    """OAttention by direct float64 evaluation; the oracle of every test.

    Each receiver row is computed on its own over exactly its live sources
    (visible and ``p_j > 0``), which are selected before ``exp``, then
    ``N / (eps_den * exp(-M) + D) * p_i`` with ``M`` the maximum live score.
    A row's arithmetic therefore never depends on other rows or on null
    sources, so inserting a null token leaves every other output
    bit-identical. A row with no live source is 0.

    Args:
        q: Queries ``(B, H, L, D)``.
        k: Keys ``(B, Hkv, S, D)``.
        v: Values ``(B, Hkv, S, Dv)``.
        p_q: Receiver presence ``(B, L)``.
        p_k: Source presence ``(B, S)``.
        mask: Optional boolean mask broadcastable to ``(B, H, L, S)``.
        eps_den: Denominator floor ``>= 0``.
        scale: Score scale; ``1 / sqrt(D)`` when None.

    Returns:
        ``(B, H, L, Dv)`` in the input dtype (computed in float64).
    """
    validate_oattention_inputs(q, k, v, p_q, p_k, mask, eps_den)
    B, H, L, D = q.shape
    Hkv, S = k.shape[1], k.shape[2]
    group = H // Hkv
    scale = 1.0 / math.sqrt(D) if scale is None else float(scale)
    q64, k64, v64 = q.double(), k.double(), v.double()
    pq64, pk64 = p_q.double(), p_k.double()
    live_B11S = (pk64 > 0)[:, None, None, :]
    live_BHLS = live_B11S if mask is None else live_B11S & _mask_4d(mask)
    live_BHLS = live_BHLS.expand(B, H, L, S)
    out = torch.zeros(B, H, L, v.shape[-1], dtype=torch.float64, device=q.device)
    for b in range(B):
        for h in range(H):
            kv_h = h // group
            for i in range(L):
                idx = live_BHLS[b, h, i].nonzero().flatten()
                if idx.numel() == 0 or pq64[b, i] == 0:
                    continue
                s = torch.mv(k64[b, kv_h, idx], q64[b, h, i]) * scale
                m = s.max()
                w = torch.exp(s - m) * pk64[b, idx]
                num = torch.mv(v64[b, kv_h, idx].T, w)
                den = eps_den * torch.exp(-m) + w.sum()
                out[b, h, i] = num / den * pq64[b, i]
    return out.to(q.dtype)
