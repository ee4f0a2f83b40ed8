"""The hosts' cross-row statistics with each train row counted ``w_j`` times.

Each function here is the weighted form of a statistic tabpfn 9.2's in-model
preprocessing fits on the train rows (:mod:`retrofit.hosts.common.row_weights`
says where each is used): with integer weights it equals the host's statistic
of the rows repeated (up to the order of a sum), with real weights it is the
same formula.

* :func:`weighted_finite_mean`: the imputation means (``torch_nanmean`` with
  infinities excluded, v3's ``nanmean`` of the finite cells): ``sum w x / sum w``
  over the finite cells, 0 where a column has none.
  :func:`weighted_target_mean` is the targets' (test rows and non-finite train
  targets take it).
* :func:`weighted_scaler_fit`: ``TorchStandardScaler.fit``: the weighted mean and
  the standard deviation with ``sum w - 1`` where the host divides by ``N - 1``
  (at least 1), a zero deviation replaced by 1.
* :func:`weighted_ecdf_context`: v3.5's ECDF ranking context
  (``_build_ecdf_context``): bucket edges and the counts of train values below
  and at each, with counts as cumulative weight and row positions on the
  cumulative-weight axis.

Shape letters: K train rows (every weight positive), B batch elements, C
columns (``...``: the host's trailing dimensions), E edges of the ECDF context.
"""

from __future__ import annotations

import math

import torch

__all__ = [
    "weighted_ecdf_context",
    "weighted_finite_mean",
    "weighted_scaler_fit",
    "weighted_target_mean",
]


def weighted_finite_mean(x_K: torch.Tensor, w_K: torch.Tensor) -> torch.Tensor:
    """``sum w x / sum w`` over the finite entries of ``x`` along axis 0; 0 where none.

    Args:
        x_K: Train rows ``(K, ...)``.
        w_K: Weights broadcastable to ``x_K`` (``(K, B, 1)`` and the like), in its dtype.

    Returns:
        ``x_K.shape[1:]``.
    """
    finite = torch.isfinite(x_K)
    w = torch.where(finite, w_K, 0.0)
    total = w.sum(dim=0)
    value_sum = torch.where(finite, x_K * w_K, 0.0).sum(dim=0)
    return torch.where(total > 0, value_sum / torch.where(total > 0, total, 1.0), 0.0)


def weighted_target_mean(y_NB: torch.Tensor, w_BN: torch.Tensor) -> torch.Tensor:
    """The imputation mean ``(B,)`` of train targets ``y_NB`` weighted ``w_BN`` (finite ones)."""
    return weighted_finite_mean(y_NB, w_BN.t().to(device=y_NB.device, dtype=y_NB.dtype))


def weighted_scaler_fit(x_K: torch.Tensor, w_K: torch.Tensor) -> dict[str, torch.Tensor]:
    """``TorchStandardScaler.fit`` of finite rows ``x_K`` with row weights ``w_K``.

    Args:
        x_K: Train rows ``(K, ...)`` after imputation (finite).
        w_K: Weights broadcastable to ``x_K``, in its dtype.

    Returns:
        ``{"mean", "std"}`` of shape ``x_K.shape[1:]``, as the host's cache.
    """
    total = w_K.expand_as(x_K).sum(dim=0)
    mean = (x_K * w_K).sum(dim=0) / total
    sq_diff = (torch.square(x_K - mean.unsqueeze(0)) * w_K).sum(dim=0)
    std = torch.sqrt(sq_diff / (total - 1).clamp(min=1.0))
    # A constant column (a single row of any weight included) keeps its scale.
    return {"mean": mean, "std": torch.where(std == 0, torch.ones_like(std), std)}


def weighted_ecdf_context(
    x_BKC: torch.Tensor, w_BK: torch.Tensor, num_buckets: int, dtype: torch.dtype
) -> torch.Tensor:
    """v3.5's ECDF ranking context of train rows ``x_BKC`` counted ``w_BK`` times each.

    The host (``_build_ecdf_context``) sorts a column's ``n`` train values,
    takes ``k = min(num_buckets, n)`` edges (every distinct value when there are
    at most ``k``, else the values at ``k`` evenly spaced row positions) and
    stores each edge with the counts of values below it and at most it. Here
    ``n`` is the total weight ``W`` (``k = min(num_buckets, max(K, ceil W))``),
    a row position ``p`` is the row whose cumulative-weight interval holds it,
    and the counts are cumulative weights: with integer weights this is the
    host's context of the repeated rows, bit for bit. A batch element with
    fewer edges repeats its last one, which ranks every value as its own
    edges do (an edge that ties its neighbour adds no interval).

    Args:
        x_BKC: Imputed train values.
        w_BK: Their weights (positive), float64.
        num_buckets: The host's ``ecdf_num_buckets``.
        dtype: The host's context dtype (``ECDF_CONTEXT_DTYPE``, float32).

    Returns:
        ``(3, B, C, E)``: edges, counts below, counts at most.
    """
    contexts = [
        _one_context(x_KC, w_K, num_buckets, dtype) for x_KC, w_K in zip(x_BKC, w_BK, strict=True)
    ]
    widest = max(c.shape[-1] for c in contexts)
    padded = [
        torch.cat([c, c[..., -1:].expand(*c.shape[:-1], widest - c.shape[-1])], -1)
        for c in contexts
    ]
    return torch.stack(padded, dim=1)


def _one_context(
    x_KC: torch.Tensor, w_K: torch.Tensor, num_buckets: int, dtype: torch.dtype
) -> torch.Tensor:
    """The context ``(3, C, E)`` of one batch element."""
    K, C = x_KC.shape
    sorted_CK, order_CK = x_KC.transpose(0, 1).to(dtype).contiguous().sort(dim=-1, stable=True)
    w_CK = w_K.to(x_KC.device)[order_CK]
    # Cumulative weight before each sorted row (0 first) and in total, in float64.
    cum_C1K = torch.cat([w_CK.new_zeros(C, 1), w_CK.cumsum(dim=-1)], dim=-1)
    total = float(w_K.sum())
    k = min(num_buckets, max(K, math.ceil(total)))

    is_new = torch.ones_like(sorted_CK, dtype=torch.int32)
    is_new[..., 1:] = (sorted_CK[..., 1:] != sorted_CK[..., :-1]).to(torch.int32)
    distinct_CK = is_new.cumsum_(-1).sub_(1)
    num_distinct_C1 = distinct_CK[..., -1:] + 1

    steps = torch.arange(k, device=x_KC.device, dtype=dtype)
    if k > 1:
        distinct_CE = steps * ((num_distinct_C1 - 1).to(dtype) / (k - 1))
        # Row positions on the cumulative-weight axis, rounded as the host rounds its own.
        positions_E = (steps * ((total - 1) / (k - 1))).round().to(torch.float64)
        rows_CE = torch.searchsorted(
            cum_C1K[:, 1:].contiguous(), positions_E.expand(C, k).contiguous(), side="right"
        )
        rows_CE = rows_CE.clamp(max=K - 1)
        targets_CE = torch.where(
            num_distinct_C1 <= k,
            distinct_CE.round().to(torch.int32),
            distinct_CK.gather(-1, rows_CE),
        ).contiguous()
    else:
        targets_CE = steps.round().to(torch.int32).expand(C, k).contiguous()
    first_CE = torch.searchsorted(distinct_CK, targets_CE, side="left")
    past_CE = torch.searchsorted(distinct_CK, targets_CE, side="right")
    edges_CE = sorted_CK.gather(-1, first_CE)
    below_CE = cum_C1K.gather(-1, first_CE).to(dtype)
    at_most_CE = cum_C1K.gather(-1, past_CE).to(dtype)
    return torch.stack([edges_CE, below_CE, at_most_CE])
