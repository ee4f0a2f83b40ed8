"""The presence coefficient: how much of a token is there.

``rho_tau(h) = ||h||^2 / (tau + ||h||^2)`` lies in ``[0, 1)`` and is exactly 0
if and only if the carrier ``h`` is the zero vector. It is the single number
that gates what a token emits and how much mass it adds to shared statistics.
"""

from __future__ import annotations

import math

import torch

__all__ = ["check_tau", "presence", "presence_dtype"]


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


def presence(h: torch.Tensor, tau: float = 1.0) -> torch.Tensor:
    """Presence coefficient of each token's carrier, over the last dimension.

    The squared norm is accumulated in at least float32 even for bf16 and fp16
    carriers, since in half precision it overflows or loses the small norms
    that distinguish a faint token from a null one.

    Args:
        h: Carriers of shape ``(..., E)``.
        tau: Temperature ``tau > 0``; presence is 1/2 where ``||h||^2 = tau``.

    Returns:
        Presence of shape ``h.shape[:-1]`` in float32 (float64 for a float64
        input), in ``[0, 1)``, exactly 0 where ``h`` is the zero vector.

    Raises:
        ValueError: If ``tau`` is not finite and positive.
    """
    tau = check_tau(tau)
    h_wide = h.to(presence_dtype(h.dtype))
    sq_norm = h_wide.square().sum(dim=-1)
    return sq_norm / (sq_norm + tau)
