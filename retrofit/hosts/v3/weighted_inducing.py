"""The inducing points of v3's and v3.5's distribution embedder, reading weighted train rows.

Each ``InducedSelfAttentionBlock`` of the ``FeatureDistributionEmbedder`` runs, per
column, a ``CrossAttention`` from its learned inducing vectors to the train
rows (``cross_attn_block1.attn``), with the learned log-n query scaling
(``SoftmaxScalingMLP``, ``n`` = the train rows); every row then reads the
inducing states (per row, no cross-row sum). Under row weights
(:mod:`retrofit.hosts.common.row_weights`) that attention counts train row
``j`` ``w_j`` times: ``log w_j`` is added to its key's score (the partition and
numerator take ``w_j exp(s_ij)``) and the scaling gets ``n_eff = sum_j w_j``.
The inducing vectors are learned rows: they are the queries, never sources.

The weighting is switched on for one call of the host's stages only
(:func:`weighted_inducing_points`), by swapping each of those attentions' class
for a subclass whose ``forward`` reads the weights, and swapping it back after:
the patched model's module tree and patch report are the same as without
weights, and outside the call the host's own ``forward`` runs. The subclass
computes what the host's ``forward`` computes (projections; v3.5's per-head
q/k norms; the scaling; scaled dot-product attention, here OAttention with
receiver presence 1, source mass ``w`` and ``eps_den = 0``, which is softmax
attention with a per-key bias ``log w``; the output projection), so with every
weight 1 it is the host's to rounding; ``tests/retrofit/hosts/test_host_overrides.py``
pins the two ``CrossAttention.forward`` it re-implements.

An attention call sees the columns folded into its batch, ``(B * C, ...)``
batch-major, on the full path (one call) and on the column-chunked path
(``B * C_j`` per column chunk), so a batch element's weights are repeated
``C`` times; the host's peak-memory chunking, which would hand it slices of
that axis, is off for a weighted call (:func:`unchunked`): the full path it
applies to runs only when every row fits one row chunk.

Shape letters: G batch elements, K train rows, Q inducing points, E embedding,
H heads, D head dimension; ``Bc = G * C`` the attention batch.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from typing import Any

import torch
from tabpfn.architectures import tabpfn_v3, tabpfn_v3_5
from torch import nn

from retrofit.hosts.common.row_attention import oattend_rows, scale_queries
from retrofit.hosts.common.row_weights import SOURCE_WEIGHTS_ATTR, refuse

__all__ = ["unchunked", "weighted_inducing_points"]


class _WeightedCrossAttention:
    """``forward`` of a host ``CrossAttention`` whose key rows carry weights ``(G, K)``."""

    #: Whether the host's attention normalises queries and keys per head (v3.5).
    qk_norm: bool

    def forward(self, x_for_query_BcQE: torch.Tensor, x_for_key_and_value_BcKE: torch.Tensor):
        """The host's cross-attention with key ``j`` counted ``w_j`` times."""
        w_GK = self.__dict__[SOURCE_WEIGHTS_ATTR]
        Bc, Q, _ = x_for_query_BcQE.shape
        K = x_for_key_and_value_BcKE.shape[1]
        G = w_GK.shape[0]
        if Bc % G or w_GK.shape[1] != K:
            refuse(
                f"the inducing points read {Bc} column batches of {K} rows; the weights "
                f"{tuple(w_GK.shape)} do not fold into them"
            )
        D = self.head_dim
        q_BcQHD = self.q_projection(x_for_query_BcQE).view(Bc, Q, -1, D)
        k_BcKHD = self.k_projection(x_for_key_and_value_BcKE).view(Bc, K, -1, D)
        v_BcKHD = self.v_projection(x_for_key_and_value_BcKE).view(Bc, K, -1, D)
        if self.qk_norm:
            q_BcQHD = self.q_norm(q_BcQHD)
            k_BcKHD = self.k_norm(k_BcKHD)
        wide = torch.float64 if q_BcQHD.dtype == torch.float64 else torch.float32
        w_BcK = w_GK.to(device=q_BcQHD.device, dtype=wide).repeat_interleave(Bc // G, dim=0)
        if self.softmax_scaling_layer is not None:
            q_BcQHD = scale_queries(self.softmax_scaling_layer, q_BcQHD, w_BcK.sum(dim=-1))
        o_BcQHD = oattend_rows(q_BcQHD, k_BcKHD, v_BcKHD, w_BcK.new_ones(Bc, Q), w_BcK, eps_den=0.0)
        return self.out_projection(o_BcQHD.reshape(Bc, Q, self.num_heads * D))


class _WeightedCrossAttentionV3(_WeightedCrossAttention, tabpfn_v3.CrossAttention):
    qk_norm = False


class _WeightedCrossAttentionV3p5(_WeightedCrossAttention, tabpfn_v3_5.CrossAttention):
    qk_norm = True


_WEIGHTED: dict[type[nn.Module], type[nn.Module]] = {
    tabpfn_v3.CrossAttention: _WeightedCrossAttentionV3,
    tabpfn_v3_5.CrossAttention: _WeightedCrossAttentionV3p5,
}
_HOST: dict[type[nn.Module], type[nn.Module]] = {v: k for k, v in _WEIGHTED.items()}


@contextlib.contextmanager
def weighted_inducing_points(model: nn.Module, w_GK: torch.Tensor) -> Iterator[None]:
    """The inducing points of ``model``'s distribution embedder read rows weighted ``w_GK``.

    Args:
        model: A patched v3 or v3.5 host.
        w_GK: The weights of the train rows of the call, all positive.
    """
    attentions = [
        layer.cross_attn_block1.attn for layer in model.feature_distribution_embedder.layers
    ]
    for attn in attentions:
        if type(attn) not in _WEIGHTED:
            refuse(
                f"the distribution embedder's attention is a {type(attn).__name__}, which "
                "row weights do not know"
            )
    try:
        for attn in attentions:
            attn.__dict__[SOURCE_WEIGHTS_ATTR] = w_GK
            attn.__class__ = _WEIGHTED[type(attn)]
        yield
    finally:
        for attn in attentions:
            attn.__class__ = _HOST.get(type(attn), type(attn))
            attn.__dict__.pop(SOURCE_WEIGHTS_ATTR, None)


def unchunked(kwargs: dict[str, Any]) -> dict[str, Any]:
    """``_stages_0_to_2``'s keyword arguments with the peak-memory chunking off (see above)."""
    options = kwargs.get("performance_options")
    if options is None or options.save_peak_memory_factor is None:
        return kwargs
    return {
        **kwargs,
        "performance_options": dataclasses.replace(options, save_peak_memory_factor=None),
    }
