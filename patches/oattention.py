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

Null tokens never reach the result, whatever their projections hold: the
fast path agrees with the oracle on NaN or inf in a null source's key or
value (the kernel would turn its zero weight into ``0 * NaN``) and in a null
receiver's query (its row is 0). It zeroes the keys and values of null
sources before the kernel (on CPU only when one of them is non-finite, found
by a check over the null sources alone; elsewhere always, which copies K and
V but needs no device sync) and writes 0 into the rows of null receivers. A
caller that guarantees exact zeros there (``nulls_are_zero``: a patched block
whose maps send the zero carrier to zero) skips both steps on CPU and the
copy elsewhere.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import torch
import torch.nn.functional as F

__all__ = [
    "oattention",
    "oattention_reference",
    "oattention_route",
    "validate_oattention_inputs",
]

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
    scale: float | None = None,
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
        scale: Score scale, a finite number, or None.
        check_values: Also check that presence is finite and in ``[0, 1]``
            (one reduction over ``B * (L + S)`` values).

    Raises:
        ValueError: On mismatched shapes, a head dimension of 0, a wrong
            presence shape, negative or non-finite presence, a non-boolean
            mask, a bad ``eps_den`` or a non-finite ``scale``.
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
    if D == 0:
        raise ValueError(f"the head dimension of q and k must be > 0, got {tuple(q.shape)}")
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
        if mask.dim() > 4:
            raise ValueError(f"mask has more than 4 dims: {tuple(mask.shape)}")
        # broadcast_shapes((5,), (1,)) succeeds; the mask must broadcast *to* the target.
        try:
            fits = torch.broadcast_shapes(mask.shape, (B, H, L, S)) == (B, H, L, S)
        except RuntimeError:
            fits = False
        if not fits:
            raise ValueError(
                f"mask of shape {tuple(mask.shape)} does not broadcast to {(B, H, L, S)}"
            )
    if (
        isinstance(eps_den, bool)
        or not isinstance(eps_den, (int, float))
        or not math.isfinite(eps_den)
        or eps_den < 0
    ):
        raise ValueError(f"eps_den must be a finite number >= 0, got {eps_den!r}")
    if scale is not None and (
        isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(scale)
    ):
        raise ValueError(f"scale must be a finite number or None, got {scale!r}")
    if check_values:
        for name, p in (("p_q", p_q), ("p_k", p_k)):
            if not torch.is_floating_point(p):
                raise TypeError(f"{name} must be floating, got {p.dtype}")
            # One reduction; NaN propagates through aminmax and fails both tests.
            if p.numel() and not _in_unit_interval(p):
                raise ValueError(
                    f"{name} must be finite and in [0, 1] (got NaN, inf or out of range)"
                )


def _in_unit_interval(p: torch.Tensor) -> bool:
    lo, hi = torch.aminmax(p)
    return lo.item() >= 0 and hi.item() <= 1  # False for NaN


def _mask_4d(mask: torch.Tensor | None) -> torch.Tensor | None:
    return None if mask is None else mask.reshape((1,) * (4 - mask.dim()) + tuple(mask.shape))


def _log_presence(p: torch.Tensor) -> torch.Tensor:
    """``log p`` (``-inf`` where ``p = 0``), in ``p``'s dtype; ``O(B * S)`` work.

    On CPU this is ``xlogy(1, p)``: ``torch.log`` of a float tensor runs
    through MKL's vector math, which starts its own thread team even for a
    few hundred values; on a loaded machine waking that team costs a
    scheduler time slice (measured 8-16 ms per call on 2 shared cores). The
    serial ``xlogy`` kernel gives ``1 * log(p)`` within one ulp of it.
    """
    if p.device.type == "cpu":
        return torch.xlogy(1.0, p)
    return torch.log(p)


def _empty_support(p_k: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """True where a receiver sees no live source (masked out or null).

    Shape: the mask's broadcast of ``(B, H, L)``. With a key-only mask this
    reduces ``(B, 1, 1, S)`` values, so no ``L x S`` tensor is built.
    """
    live_B11S = (p_k > 0)[:, None, None, :]
    live = live_B11S if mask is None else live_B11S & _mask_4d(mask)
    return ~live.any(dim=-1)


def _cpu_flash_with_lse(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    bias: torch.Tensor,
    scale: float | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """CPU flash kernel with an additive bias, returning ``(out, lse)``.

    It takes grouped-query K/V, strided views and a float32 bias beside
    bf16/fp16 queries as they are, so nothing is copied.
    """
    out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
        q, k, v, attn_mask=bias, scale=scale
    )
    return out, lse


_EFFICIENT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
_EFFICIENT_BIAS_ALIGN = 16  # the memory-efficient kernel wants a 16-aligned bias row stride


def _efficient_op() -> Any:
    """The memory-efficient attention op (one indirection, so CPU tests can emulate it)."""
    return torch.ops.aten._scaled_dot_product_efficient_attention


def _cuda_efficient_with_lse(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    bias: torch.Tensor,
    scale: float | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """CUDA memory-efficient kernel with an additive bias, returning ``(out, lse)``.

    Grouped-query K/V are never repeated: with a per-key bias (no mask, or a
    key-only one) the query heads that share a K/V head share their bias
    too, so they are folded into the query axis, ``(B, Hkv, g * L, D)``
    (a view of contiguous queries; at most a copy of the queries). The bias
    row is padded to the kernel's alignment (``O(B * S)``) and broadcast with
    stride 0, as ``scaled_dot_product_attention`` itself does. The kernel
    requires the bias in the query dtype, so for bf16/fp16 queries ``log p_j``
    is rounded to that dtype (the GPU check reports the resulting error).
    """
    B, H, L, D = q.shape
    Hkv, S = k.shape[1], k.shape[2]
    group = H // Hkv
    per_key = bias.shape[1] == 1 and bias.shape[2] == 1
    if group > 1 and not per_key:
        # A mask with head or query structure: the bias differs across the
        # group, so K/V are repeated (the only copy, and only in this case).
        k = k.repeat_interleave(group, dim=1)
        v = v.repeat_interleave(group, dim=1)
        group = 1
    q_in = q.reshape(B, Hkv, group * L, D) if group > 1 else q
    s_pad = -(-S // _EFFICIENT_BIAS_ALIGN) * _EFFICIENT_BIAS_ALIGN
    bias_pad = bias.new_zeros(*bias.shape[:-1], s_pad, dtype=q.dtype)[..., :S]
    bias_pad.copy_(bias)
    bias_pad = bias_pad.expand(B, q_in.shape[1], q_in.shape[2], S)
    out, lse, _, _ = _efficient_op()(q_in, k, v, bias_pad, True, 0.0, False, scale=scale)
    lse = lse[..., : q_in.shape[2]]
    if group > 1:
        out = out.reshape(B, H, L, v.shape[-1])
        lse = lse.reshape(B, H, L)
    return out, lse


_FALLBACKS_WARNED: set[tuple[str, torch.dtype, int]] = set()


def _warn_fallback(q: torch.Tensor, err: RuntimeError) -> None:
    """Warns once per (device type, dtype, head dim) that the sink route is used."""
    key = (q.device.type, q.dtype, q.shape[-1])
    if key not in _FALLBACKS_WARNED:
        _FALLBACKS_WARNED.add(key)
        first = (str(err).strip().splitlines() or [""])[0][:200]
        warnings.warn(
            f"oattention: the memory-efficient kernel rejected {q.dtype} queries of head "
            f"dim {q.shape[-1]} on {q.device.type} ({first}); using the sink route, which "
            "copies K and V",
            RuntimeWarning,
            stacklevel=3,
        )


def oattention_route(q: torch.Tensor) -> str:
    """The kernel route :func:`oattention` takes for queries like ``q``.

    Returns:
        ``"cpu-flash"`` (CPU flash kernel with lse), ``"cuda-efficient"``
        (CUDA memory-efficient kernel with lse, fp32/bf16/fp16) or ``"sink"``
        (portable: one extra zero key carrying ``log eps_den``; copies K/V).
        Should the CUDA kernel reject a configuration, :func:`oattention`
        warns once and takes the sink route.
    """
    if q.device.type == "cpu":
        return "cpu-flash"
    if q.device.type == "cuda" and q.dtype in _EFFICIENT_DTYPES:
        return "cuda-efficient"
    return "sink"


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
    validate: bool = True,
    nulls_are_zero: bool = False,
) -> torch.Tensor:
    """OAttention, fast exact path.

    The matrix work is one fused attention call with a ``(B, 1, 1, S)``
    log-presence bias; the rest is ``O(B * (L + S))`` plus one in-place pass
    over the output and, on CPU, a check over the null tokens alone: no copy
    of K or V on CPU unless a null source's key or value is non-finite (on
    other devices the null sources' rows are zeroed in a copy, see the module
    docstring), no ``L x S`` tensor unless the mask has one.

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
        validate: Check shapes and presence values first (default). Trusted
            callers that built presence themselves may pass False to skip the
            checks, whose value check is a reduction (a device sync on GPU).
        nulls_are_zero: The caller guarantees that the queries, keys and
            values of null tokens (``p = 0``) are exactly zero, as a block does
            whose null carrier reaches them through maps with ``f(0) = 0`` (a
            norm without bias, bias-free projections). The null-source check
            (CPU) or copy (elsewhere) that keeps a non-finite null key or value
            out of the kernel is then skipped (a zero key or value has weight
            0 there), and on CPU so is the pass that writes 0 into null
            receivers' rows (a zero query gives a finite row, which the gate
            ``p_i = 0`` makes zero).

    Returns:
        ``(B, H, L, Dv)`` in the input dtype. A receiver with ``p_i = 0`` gets
        exactly 0; a receiver with no live source gets 0, never NaN; null
        tokens' queries, keys and values are never read into the result, so
        NaN or inf there changes nothing (as in :func:`oattention_reference`).

    Raises:
        ValueError: With ``validate``, on the inputs
            :func:`validate_oattention_inputs` refuses (among them a head
            dimension of 0 and a non-finite ``scale``).
    """
    if validate:
        validate_oattention_inputs(q, k, v, p_q, p_k, mask, eps_den, scale=scale)
    B, H, L, _ = q.shape
    if L == 0 or k.shape[2] == 0:
        # No receiver or no source: the fused kernels crash (SIGFPE) on empty
        # lengths; the answer is all zeros (empty support).
        return q.new_zeros(B, H, L, v.shape[-1])
    # Presence is handled in float32 at least: log p of a bf16 presence would
    # shift every weight by bf16 rounding.
    wide = torch.float64 if q.dtype == torch.float64 else torch.float32
    if p_k.dtype != wide:
        p_k = p_k.to(wide)
    if p_q.dtype != wide:
        p_q = p_q.to(wide)
    S = k.shape[2]
    route = oattention_route(q)
    needs_grad = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v, p_q, p_k))
    if route == "cpu-flash" and needs_grad:
        # The CPU flash op has no gradient for its bias (log p_k) and its float64
        # backward is off by ~1e-4 (gradcheck); the sink route's SDPA passes
        # gradcheck in float64 (tabpfn's differentiable_input needs gradients).
        route = "sink"
    if not nulls_are_zero:
        k, v = _zero_null_sources(k, v, p_k, check=route == "cpu-flash")
    bias = _log_presence(p_k).view(B, 1, 1, S)
    empty = None
    if mask is not None:
        bias = bias.masked_fill(~_mask_4d(mask), float("-inf"))
        empty = _empty_support(p_k, mask)
    elif route != "cpu-flash":
        # Empty support is folded into the receiver presence, (B, L): a batch
        # element whose sources are all null (max presence 0) gets p_i = 0.
        # The CPU flash kernel needs no fold: it writes exact zeros for a row
        # whose every score is -inf (and returns lse = 0 there, which is
        # why emptiness is never read from lse); the contract tests pin it.
        p_q = p_q * (p_k.amax(dim=-1, keepdim=True) > 0)

    # In-place post-processing on the kernel's fresh outputs, unless autograd
    # needs them (the kernels' backwards read their out and lse).
    inplace = not needs_grad
    lse_BHL = None
    if route == "sink":
        out, _ = _sink_attention(q, k, v, bias, eps_den, scale)
    elif route == "cpu-flash":
        out, lse_BHL = _cpu_flash_with_lse(q, k, v, bias, scale)
    else:
        try:
            out, lse_BHL = _cuda_efficient_with_lse(q, k, v, bias, scale)
        except RuntimeError as err:  # a configuration the kernel rejects (e.g. head dim)
            _warn_fallback(q, err)
            route = "sink"
            out, _ = _sink_attention(q, k, v, bias, eps_den, scale)
    log_eps = math.log(eps_den) if (lse_BHL is not None and eps_den > 0) else None
    p_q_B1L = p_q.view(B, 1, L)
    row_empty = empty  # None without a mask: already folded into p_q
    if inplace:
        _gate_(out, lse_BHL, p_q_B1L, log_eps, row_empty, wide)
    else:
        gate_BHL = p_q_B1L
        if log_eps is not None:
            # sum_j p_j e^{s_ij} = e^{lse}; the eps_den term turns softmax's
            # 1 / Z into 1 / (eps + Z) = sigmoid(lse - log eps) / Z.
            gate_BHL = torch.sigmoid(lse_BHL.to(wide) - log_eps) * gate_BHL
        if row_empty is not None:
            gate_BHL = gate_BHL.masked_fill(row_empty, 0.0)
        out = (out.to(wide) * gate_BHL.unsqueeze(-1)).to(q.dtype)
    if route != "cpu-flash":
        # A fully masked row can come back NaN from a non-CPU kernel, and
        # NaN * 0 is NaN, so select rather than rely on the zero gate.
        null_B1L = p_q.view(B, 1, L) == 0  # null receivers (and, unmasked, empty support)
        empty = null_B1L if empty is None else empty | null_B1L
        empty_1 = empty.unsqueeze(-1)
        out = out.masked_fill_(empty_1, 0.0) if inplace else out.masked_fill(empty_1, 0.0)
    else:
        # The CPU kernel writes exact zeros for empty support; only a null
        # receiver whose query holds NaN or inf can leave a NaN row (0 * NaN).
        if not nulls_are_zero:
            out = _zero_null_receivers(out, p_q, inplace=inplace)
    return out


def _all_finite(t: torch.Tensor) -> bool:
    """True if every value is finite (a sum that overflows says False: then a copy is made)."""
    return bool(torch.isfinite(t.sum()))


def _zero_null_sources(
    k: torch.Tensor, v: torch.Tensor, p_k: torch.Tensor, *, check: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """K and V with the rows of null sources (``p_j = 0``) set to 0 (fresh tensors).

    A null source has weight ``exp(-inf) = 0`` in the kernel, but NaN or inf
    in its key makes its score NaN and in its value makes ``0 * v`` NaN. With
    ``check`` (CPU, where a branch on data costs no device sync) only the
    rows of null sources are read, ``O(nulls * Hkv * D)``, and K or V is
    copied only if one of them is non-finite; otherwise both are always copied.
    """
    null_BS = p_k == 0
    null_B1S1 = null_BS[:, None, :, None]
    if not check:
        return k.masked_fill(null_B1S1, 0.0), v.masked_fill(null_B1S1, 0.0)
    if not bool(null_BS.any()):
        return k, v
    # Positions null in any batch element: a superset, so a live source read
    # here can only cause a needless copy, never a missed one.
    s_idx = null_BS.any(dim=0).nonzero().squeeze(1)
    k_S, v_S = k.index_select(2, s_idx), v.index_select(2, s_idx)
    if _all_finite(k_S.sum() + v_S.sum()):  # one sync for the common case
        return k, v
    if not _all_finite(k_S):
        k = k.masked_fill(null_B1S1, 0.0)
    if not _all_finite(v_S):
        v = v.masked_fill(null_B1S1, 0.0)
    return k, v


def _zero_null_receivers(out: torch.Tensor, p_q: torch.Tensor, *, inplace: bool) -> torch.Tensor:
    """``out`` with the rows of null receivers (``p_i = 0``) set to exactly 0.

    In place: ``O(B * L)`` to find them and ``O(nulls * H * Dv)`` to write
    them (a masked pass over all of ``out`` would cost as much as the gate).
    """
    null_BL = p_q == 0
    if not bool(null_BL.any()):
        return out
    if not inplace:
        return out.masked_fill(null_BL[:, None, :, None], 0.0)
    b, i = null_BL.nonzero(as_tuple=True)
    out[b, :, i] = 0.0
    return out


# Elementwise CPU ops on at least this many values start a thread team
# (at::internal::GRAIN_SIZE). On a loaded machine waking the team costs a
# scheduler time slice (measured 4-16 ms on 2 shared cores, several times the
# whole attention at small shapes), so the O(B * H * L * Dv) gate pass runs as
# serial chunks below it: about 1 ms per 2M values, against a kernel that
# does D * S times more work.
_GRAIN = 32768


def _serial_splits(t: torch.Tensor, dim: int) -> int | None:
    """Split size along ``dim`` that keeps each CPU chunk serial, or None (no split)."""
    if t.device.type != "cpu" or t.numel() < _GRAIN or torch.get_num_threads() == 1:
        return None
    per_index = t.numel() // max(t.shape[dim], 1)
    size = (_GRAIN - 1) // max(per_index, 1)
    return size if size >= 1 else None  # one index is already a thread team: don't split


def _gate_(
    out: torch.Tensor,
    lse_BHL: torch.Tensor | None,
    p_q_B1L: torch.Tensor,
    log_eps: float | None,
    row_empty: torch.Tensor | None,
    wide: torch.dtype,
) -> None:
    """Scales ``out`` in place by ``p_i * sigmoid(lse_i - log eps)``, 0 on empty rows.

    ``sum_j p_j e^{s_ij} = e^{lse}``, and the ``eps_den`` term turns softmax's
    ``1 / Z`` into ``1 / (eps + Z) = sigmoid(lse - log eps) / Z``; the receiver
    presence joins the same ``(B, H, L)`` factor, so the output is touched
    once. Works on the kernel's fresh ``lse`` in place. A bf16/fp16 ``out`` is
    multiplied in the float32 gate's precision and rounded once (type
    promotion).
    """
    if log_eps is None:
        gate_BHL = p_q_B1L
        if row_empty is not None:
            gate_BHL = gate_BHL.masked_fill(row_empty, 0.0)
    else:
        gate_BHL = lse_BHL if lse_BHL.dtype == wide else lse_BHL.to(wide)
        size = _serial_splits(gate_BHL, 2)
        if size is None:
            gate_BHL.sub_(log_eps).sigmoid_().mul_(p_q_B1L)
        else:
            parts = gate_BHL.split(size, dim=2)
            torch._foreach_sub_(parts, log_eps)
            torch._foreach_sigmoid_(parts)
            torch._foreach_mul_(parts, p_q_B1L.split(size, dim=2))
        if row_empty is not None:
            gate_BHL.masked_fill_(row_empty, 0.0)
    gate_BHL1 = gate_BHL.unsqueeze(-1)
    size = _serial_splits(out, 2)
    if size is None:
        out.mul_(gate_BHL1)
    else:
        torch._foreach_mul_(out.split(size, dim=2), gate_BHL1.split(size, dim=2))


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
    ones, so the caller applies only the receiver presence. It copies K and V
    (one extra row each), so it serves only devices without a route above.
    """
    B, H, L, _ = q.shape
    Hkv = k.shape[1]
    if eps_den > 0:
        k = torch.cat([k, k.new_zeros(B, Hkv, 1, k.shape[-1])], dim=2)
        v = torch.cat([v, v.new_zeros(B, Hkv, 1, v.shape[-1])], dim=2)
        # The bias may carry the mask's (B, H, L, S) shape: the sink matches it.
        sink = log_pk_B11S.new_full((*log_pk_B11S.shape[:-1], 1), math.log(eps_den))
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

    Raises:
        ValueError: On the inputs :func:`validate_oattention_inputs` refuses.
    """
    validate_oattention_inputs(q, k, v, p_q, p_k, mask, eps_den, scale=scale)
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
                # eps * e^{-M} only when eps > 0: 0 * e^{-M} is NaN once M < -709.
                den = w.sum() + (eps_den * torch.exp(-m) if eps_den > 0 else 0.0)
                out[b, h, i] = num / den * pq64[b, i]
    return out.to(q.dtype)


def oattention_direct(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    p_q: torch.Tensor,
    p_k: torch.Tensor,
    *,
    mask: torch.Tensor | None = None,
    eps_den: float = 1e-6,
    scale: float | None = None,
    dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """OAttention by the formula, vectorised, with every step in ``dtype``.

    ``p_i * sum_j m_ij p_j e^{s_ij - M} v_j / (eps e^{-M} + sum_j m_ij p_j e^{s_ij - M})``
    with ``M`` the maximum live score of the row; dead sources (masked or
    null) are removed before ``exp``; a row without live sources, or a null
    receiver, is 0. Unlike :func:`oattention_reference` it builds the whole
    ``(B, H, L, S)`` score matrix, so it serves large shapes (as a float64
    oracle) and same-dtype direct evaluation (``dtype=None``: the input's, no
    widening anywhere), but its rows share matmuls.

    Returns:
        ``(B, H, L, Dv)`` in ``dtype`` (the input dtype when None).
    """
    dtype = q.dtype if dtype is None else dtype
    q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
    p_q, p_k = p_q.to(dtype), p_k.to(dtype)
    H, Hkv = q.shape[1], k.shape[1]
    if Hkv != H:
        k = k.repeat_interleave(H // Hkv, dim=1)
        v = v.repeat_interleave(H // Hkv, dim=1)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    s_BHLS = (q @ k.transpose(-1, -2)) * scale
    live_BHLS = (p_k > 0)[:, None, None, :]
    if mask is not None:
        live_BHLS = live_BHLS & _mask_4d(mask)
    live_BHLS = live_BHLS.expand_as(s_BHLS)
    s_BHLS = s_BHLS.masked_fill(~live_BHLS, float("-inf"))
    empty_BHL1 = ~live_BHLS.any(dim=-1, keepdim=True)
    m_BHL1 = s_BHLS.amax(dim=-1, keepdim=True).masked_fill(empty_BHL1, 0.0)
    w_BHLS = (torch.exp(s_BHLS - m_BHL1) * p_k[:, None, None, :]).masked_fill(~live_BHLS, 0.0)
    den_BHL1 = w_BHLS.sum(dim=-1, keepdim=True)
    if eps_den > 0:  # 0 * e^{-M} would be NaN once M < -709
        den_BHL1 = den_BHL1 + eps_den * torch.exp(-m_BHL1)
    out = (w_BHLS @ v) / den_BHL1.masked_fill(empty_BHL1, 1.0) * p_q[:, None, :, None]
    return out.masked_fill(empty_BHL1 | (p_q[:, None, :, None] == 0), 0.0)
