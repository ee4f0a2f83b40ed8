"""OAttention over carriers laid out by row, as the patched host blocks hold them.

Both block families project queries, keys and values to ``(B, rows, heads, D)``
and read the output in that layout; :func:`oattend_rows` runs
:func:`patches.oattention` on them (heads first) and returns the same layout.
:func:`oattend_train_then_test` is the split both hosts make when test queries
read fewer key/value heads than train queries (v2's multi-query test
attention, v3's ``num_kv_heads_test``).

Shape letters: B attention batch (ensemble members; v2: members x columns),
R rows (train then test), N train rows (the keys), L query rows, H query
heads, J key/value heads, D head dimension.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from patches import oattention

__all__ = ["Attend", "oattend_rows", "oattend_train_then_test"]

#: ``attend(q_BLHD, k_BNJD, v_BNJD, p_BL, p_BN) -> o_BLHD``: a block's OAttention.
Attend = Callable[
    [torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor
]


def oattend_rows(
    q_BLHD: torch.Tensor,
    k_BNJD: torch.Tensor,
    v_BNJD: torch.Tensor,
    p_BL: torch.Tensor,
    p_BN: torch.Tensor,
    *,
    eps_den: float,
) -> torch.Tensor:
    """OAttention of ``L`` receivers over ``N`` sources; ``(B, L, H, D)``.

    Presence and shapes are built by the calling block, so they are not
    validated again.
    """
    o_BHLD = oattention(
        q_BLHD.transpose(1, 2),
        k_BNJD.transpose(1, 2),
        v_BNJD.transpose(1, 2),
        p_BL,
        p_BN,
        eps_den=eps_den,
        validate=False,
    )
    return o_BHLD.transpose(1, 2)  # memory already laid out as (B, L, H, D)


def oattend_train_then_test(
    attend: Attend,
    q_BRHD: torch.Tensor,
    k_BNJD: torch.Tensor,
    v_BNJD: torch.Tensor,
    p_BR: torch.Tensor,
    test_heads: int,
) -> torch.Tensor:
    """Train queries read every key/value head, test queries the first ``test_heads``.

    ``N`` (the train rows) is the keys' length; returns ``(B, R, H, D)``.
    """
    N = k_BNJD.shape[1]
    p_BN = p_BR[:, :N]
    o_train = attend(q_BRHD[:, :N], k_BNJD, v_BNJD, p_BN, p_BN)
    o_test = attend(
        q_BRHD[:, N:], k_BNJD[:, :, :test_heads], v_BNJD[:, :, :test_heads], p_BR[:, N:], p_BN
    )
    return torch.cat([o_train, o_test], dim=1)
