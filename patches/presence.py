"""The presence coefficient: how much of a token is there.

``rho_tau(h) = ||h||^2 / (tau + ||h||^2)`` lies in ``[0, 1]`` and is exactly 0
if and only if the carrier ``h`` is the zero vector. It is the single number
that gates what a token emits and how much mass it adds to shared statistics.

The law holds for every finite ``tau > 0`` and every finite carrier, in every
dtype: neither ``||h||^2`` nor ``tau`` is ever formed on its own where it could
overflow or underflow. Both are scaled by the same power of two, the one that
brings the carrier's largest entry near 1; scaling by a power of two is exact,
so in the ordinary range the result is bit-identical to evaluating the formula
directly. A non-zero carrier whose presence would round below the smallest
normal number of the presence dtype gets that number, never 0.
"""

from __future__ import annotations

import math

import torch

__all__ = ["check_tau", "presence", "presence_dtype", "presence_unchecked"]

# Per presence dtype: the integer type of its bits, its mantissa bits and its
# exponent bias; a float's exponent is read from and a power of two written
# into these bits, so both are exact on every device.
_BITS = {torch.float32: (torch.int32, 23, 127), torch.float64: (torch.int64, 52, 1023)}


def check_tau(tau: float) -> float:
    """Validates the presence temperature and returns it as a float.

    Args:
        tau: The temperature; must be a finite constant strictly greater than 0.

    Returns:
        ``tau`` as a Python float.

    Raises:
        ValueError: If ``tau`` is not a finite number greater than 0.
    """
    if isinstance(tau, torch.Tensor):
        if tau.numel() != 1:
            raise ValueError(f"tau must be a scalar, got a tensor of shape {tuple(tau.shape)}")
        tau = tau.item()
    if isinstance(tau, bool) or not isinstance(tau, (int, float)):
        raise ValueError(f"tau must be a finite number > 0, got {tau!r}")
    tau = float(tau)
    if not math.isfinite(tau) or tau <= 0.0:
        raise ValueError(f"tau must be a finite number > 0, got {tau!r}")
    return tau


def presence_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype presence is computed and returned in: at least float32."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def _exponent(m: torch.Tensor) -> torch.Tensor:
    """``floor(log2 m)`` for normal ``m >= 0`` (``-bias`` for 0 and subnormals)."""
    int_dtype, mantissa_bits, bias = _BITS[m.dtype]
    return (m.view(int_dtype) >> mantissa_bits) - bias


def _pow2(k: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``2 ** k`` exactly, for integer ``k`` in ``dtype``'s normal exponent range."""
    int_dtype, mantissa_bits, bias = _BITS[dtype]
    return ((k.to(int_dtype) + bias) << mantissa_bits).view(dtype)


def _scaled_presence(h_wide: torch.Tensor, tau: float) -> torch.Tensor:
    """Presence with ``||h||^2`` and ``tau`` both scaled by ``2**-2e`` (see :func:`presence`)."""
    wide = h_wide.dtype
    _, _, bias = _BITS[wide]
    m = torch.maximum(h_wide.amax(dim=-1), -h_wide.amin(dim=-1))  # max |h_e|; NaN stays NaN
    # Clamped so that 2**-e and 2**(k - 1) below stay normal numbers.
    e = _exponent(m).clamp(2 - bias, bias - 2)
    s = (h_wide * _pow2(-e, wide).unsqueeze(-1)).square_().sum(dim=-1)
    # t = tau * 2**(-2e) = (2 * tau_mantissa) * 2**(k - 1), k = tau_exponent - 2e.
    tau_mantissa, tau_exponent = math.frexp(tau)
    k1 = tau_exponent - 2 * e - 1
    t = (2.0 * tau_mantissa) * _pow2(k1.clamp(1 - bias, bias), wide)
    # Beyond the normal range t is inf (presence underflows to the floor) or
    # negligible against s >= 2**-48 (presence rounds to 1); the clamp only
    # kept 2**(k - 1) a normal number.
    t = t.masked_fill(k1 > bias, math.inf)
    p = (s / (s + t)).clamp_min_(torch.finfo(wide).tiny)
    return p.masked_fill_(m == 0, 0.0)


def _direct_range(dtype: torch.dtype) -> tuple[float, float]:
    """Where ``||h||^2`` (and ``tau``) may be used unscaled in ``dtype``.

    Above ``2**24`` times the smallest normal number the largest square of a
    carrier is a normal number, so ``||h||^2`` is accurate; below half the
    largest number ``||h||^2 + tau`` cannot overflow.
    """
    info = torch.finfo(dtype)
    return info.tiny * 2.0**24, info.max / 2.0


def presence(h: torch.Tensor, tau: float = 1.0) -> torch.Tensor:
    """Presence coefficient of each token's carrier, over the last dimension.

    Computed in at least float32 even for bf16 and fp16 carriers. Where
    ``||h||^2`` and ``tau`` both lie well inside the range of that dtype this
    is the formula itself. Elsewhere (the zero vector, a norm near or beyond
    the range, an extreme ``tau``, and on every non-CPU device, where a branch
    on the data would cost a device sync) it is ``s / (s + t)`` with
    ``c = 2**-e`` the power of two that brings the carrier's largest
    ``|h_e|`` into ``[1, 2)`` (clamped to the normal range), ``s = ||c h||^2``
    (between ``2**-48`` and ``64 E`` in float32) and ``t = c**2 * tau``
    (formed from ``tau``'s own mantissa and exponent, so a ``tau`` beyond the
    float32 range is not rounded to 0 or inf first). Nothing overflows for a
    finite carrier and ``0 / 0`` cannot occur; where both forms apply they
    agree bit for bit (scaling by a power of two is exact).

    Args:
        h: Carriers of shape ``(..., E)``.
        tau: Temperature ``tau > 0``; presence is 1/2 where ``||h||^2 = tau``.

    Returns:
        Presence of shape ``h.shape[:-1]`` in float32 (float64 for a float64
        input), finite and in ``[0, 1]`` for a finite carrier, exactly 0 where
        ``h`` is the zero vector and at least ``finfo(dtype).tiny`` elsewhere
        (a presence that would round below it gets it, never 0). A carrier
        holding NaN or inf gets NaN.

    Raises:
        ValueError: If ``tau`` is not finite and positive.
    """
    return presence_unchecked(h, check_tau(tau))


def presence_unchecked(h: torch.Tensor, tau: float) -> torch.Tensor:
    """:func:`presence` for a ``tau`` already validated by :func:`check_tau`.

    The hot path: an O-module validates its ``tau`` once, when it is built, and
    a retrofit's blocks take theirs from settings validated once when resolved,
    so no forward checks it again. A ``tau`` that is not a finite float > 0
    gives wrong numbers here, not an error: call :func:`presence` otherwise.
    """
    wide = presence_dtype(h.dtype)
    h_wide = h.to(wide)
    if h_wide.shape[-1] == 0:
        return h_wide.new_zeros(h_wide.shape[:-1])
    lo, hi = _direct_range(wide)
    if h_wide.device.type != "cpu" or not lo <= tau <= hi:
        return _scaled_presence(h_wide, tau)
    sq = h_wide.square().sum(dim=-1)
    p = (sq / (sq + tau)).clamp_min_(torch.finfo(wide).tiny)
    # NaN fails both comparisons, so it is rescaled too (and stays NaN).
    outside = ~((sq >= lo) & (sq <= hi))
    if outside.any():  # on CPU the branch costs no sync
        where = outside.nonzero(as_tuple=True)
        p[where] = _scaled_presence(h_wide[where], tau)
    return p
