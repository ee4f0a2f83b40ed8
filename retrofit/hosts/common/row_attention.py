"""OAttention over carriers laid out by row, as the patched host blocks hold them.

Both block families project queries, keys and values to ``(B, rows, heads, D)``
and read the output in that layout; :func:`oattend_rows` runs
:func:`patches.oattention` on them (heads first) and returns the same layout.
:func:`oattend_train_then_test` is the split both hosts make when test queries
read fewer key/value heads than train queries (v2's multi-query test
attention, v3's ``num_kv_heads_test``); :func:`scale_queries` is the learned
log-n query scaling with a per-batch ``n_eff`` (v3's ICL blocks and many-class
decoder).

Shape letters: B attention batch (ensemble members; v2: members x columns),
R rows (train then test), N train rows (the keys), L query rows, H query
heads, J key/value heads, D head dimension.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import pairwise

import torch
from torch import nn

from patches import oattention

__all__ = [
    "Attend",
    "keeps_zero_rows",
    "oattend_rows",
    "oattend_train_then_test",
    "scale_queries",
    "source_mass",
    "weights_as",
]

#: Maps that send a zero row to an exact zero row when they have no bias: the
#: projections and norms of the patched blocks (tabpfn's own norms subclass
#: torch's to change the compute dtype only).
_ZERO_KEEPING = (nn.Linear, nn.LayerNorm, nn.RMSNorm)

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
    nulls_are_zero: bool = False,
) -> torch.Tensor:
    """OAttention of ``L`` receivers over ``N`` sources; ``(B, L, H, D)``.

    Presence and shapes are built by the calling block, so they are not
    validated again; ``nulls_are_zero`` is the block's guarantee that null
    rows' queries, keys and values are exactly zero (:func:`keeps_zero_rows`),
    which skips OAttention's null-token checks.
    """
    o_BHLD = oattention(
        q_BLHD.transpose(1, 2),
        k_BNJD.transpose(1, 2),
        v_BNJD.transpose(1, 2),
        p_BL,
        p_BN,
        eps_den=eps_den,
        validate=False,
        nulls_are_zero=nulls_are_zero,
    )
    return o_BHLD.transpose(1, 2)  # memory already laid out as (B, L, H, D)


def oattend_train_then_test(
    attend: Attend,
    q_BRHD: torch.Tensor,
    k_BNJD: torch.Tensor,
    v_BNJD: torch.Tensor,
    p_BR: torch.Tensor,
    test_heads: int,
    sources_BN: torch.Tensor | None = None,
) -> torch.Tensor:
    """Train queries read every key/value head, test queries the first ``test_heads``.

    ``N`` (the train rows) is the keys' length; the train rows' presence
    ``p_BR[:, :N]`` gates them as receivers, and ``sources_BN`` (their mass as
    sources: presence times row weight) weights them as keys, by default their
    presence. Returns ``(B, R, H, D)``.
    """
    N = k_BNJD.shape[1]
    p_BN = p_BR[:, :N]
    s_BN = p_BN if sources_BN is None else sources_BN
    o_train = attend(q_BRHD[:, :N], k_BNJD, v_BNJD, p_BN, s_BN)
    o_test = attend(
        q_BRHD[:, N:], k_BNJD[:, :, :test_heads], v_BNJD[:, :, :test_heads], p_BR[:, N:], s_BN
    )
    return torch.cat([o_train, o_test], dim=1)


def weights_as(w_BN: torch.Tensor | None, p_BN: torch.Tensor) -> torch.Tensor | None:
    """Row weights (:mod:`retrofit.hosts.common.row_weights`) in presence's dtype and device."""
    return None if w_BN is None else w_BN.to(device=p_BN.device, dtype=p_BN.dtype)


def source_mass(p_BN: torch.Tensor, w_BN: torch.Tensor | None) -> torch.Tensor:
    """The sources' mass in OAttention: their presence, times their row weight if any.

    None: the presence itself (the same tensor), so an unweighted forward is
    the same arithmetic as without weights.
    """
    return p_BN if w_BN is None else p_BN * w_BN


def scale_queries(scaling: nn.Module, q_BLHD: torch.Tensor, n_eff_B: torch.Tensor) -> torch.Tensor:
    """The host's learned log-n query scaling with a per-batch ``n_eff``.

    ``SoftmaxScalingMLP`` reshapes ``log n`` to ``(1, 1)``, so it is called once
    per run of consecutive batch elements that share an ``n_eff`` (once in total
    when every element agrees, as in an unpatched-equivalent run), on a view of
    that run. A padded ragged batch keeps each dataset's members together and
    its datasets ordered by length, so a run is at least a dataset's members:
    calling it once per element cost a third of a fused forward's overhead on a
    CPU.
    """
    B = q_BLHD.shape[0]
    if B == 0:
        return scaling(q_BLHD, n_eff_B.new_ones(()))
    starts = _run_starts(n_eff_B)
    if len(starts) == 1:
        return scaling(q_BLHD, n_eff_B[0])
    bounds = [*starts, B]
    return torch.cat([scaling(q_BLHD[a:b], n_eff_B[a]) for a, b in pairwise(bounds)], dim=0)


def _run_starts(values_B: torch.Tensor) -> list[int]:
    """Indices where a run of equal consecutive values starts (always 0 first)."""
    changed_B = values_B[1:] != values_B[:-1]
    return [0, *(changed_B.nonzero().flatten() + 1).tolist()]


def keeps_zero_rows(*maps: nn.Module) -> bool:
    """Whether every map sends a zero row to an exact zero row, read off its class and bias.

    A ``Linear``, ``LayerNorm`` or ``RMSNorm`` without a bias does (``W 0 = 0``,
    ``Norm(0) = 0``); any other module, or one with a bias, is not trusted, so
    a host that gains a bias falls back to OAttention's checked path. Read at
    every call: a bias added after patching counts too.
    """
    return all(isinstance(m, _ZERO_KEEPING) and getattr(m, "bias", None) is None for m in maps)
