"""Inserting or dropping one position along a dimension: how the contracts add null tokens.

The one copy for the exactness report and the contract tests (``tests/``
imports it from here): a null token is inserted at ``pos`` along the sequence
dimension, and its output row dropped again before comparing with the
sequence without it.
"""

from __future__ import annotations

import torch

__all__ = ["drop_at", "insert_at"]


def insert_at(x: torch.Tensor, pos: int, new: torch.Tensor, dim: int) -> torch.Tensor:
    """``x`` with ``new`` (size 1 along ``dim``) inserted before position ``pos`` of ``dim``."""
    n = x.shape[dim]
    return torch.cat([x.narrow(dim, 0, pos), new, x.narrow(dim, pos, n - pos)], dim)


def drop_at(x: torch.Tensor, pos: int, dim: int) -> torch.Tensor:
    """``x`` without position ``pos`` of ``dim``."""
    n = x.shape[dim]
    return torch.cat([x.narrow(dim, 0, pos), x.narrow(dim, pos + 1, n - pos - 1)], dim)
