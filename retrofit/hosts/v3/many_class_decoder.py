"""``OManyClassDecoder``: the classifier readout of TabPFN v3 and v3.5 with OAttention.

A v3 or v3.5 classifier reads its logits with ``ManyClassDecoder``: a retrieval
attention from the test rows (queries ``q_projection(test_emb)``) over the
train rows (keys ``k_projection(train_emb)``) whose values are the train
rows' one-hot targets, averaged over heads, then ``log(clamp(., 1e-5) + 3e-5)``;
optionally the queries get the learned log-n scaling (``SoftmaxScalingMLP``
with ``n = N`` train rows). Both projections have a bias, so a null train row
(a zero embedding) is a live key there: it takes softmax mass and shifts ``n``.

The replacement runs OAttention instead, with the train rows as sources
weighted by their presence, the test rows as receivers gated by theirs, and
``n_eff`` (``support``) in the length scaling. Presence comes from the
embeddings the decoder projects (``output_norm``'s output; for v3.5 after the
classification pre-head ``x + MLP(RMSNorm(x))``): both maps keep a zero row
zero (RMSNorm without bias, a bias-free MLP), so a null row has presence 0 and
a live row's is about ``||gamma||^2 / (tau + ||gamma||^2)``.

The host computes the keys in ``project_keys`` and consumes them in
``forward``, possibly much later: with ``fit_with_cache`` the keys are stored
in the model's KV cache (``decoder_keys``) and read at predict. So
``project_keys`` keeps the train rows' presence on the decoder (outside its
module tree) for the ``forward`` of the same model call, and the patched
model (:class:`~retrofit.hosts.v3.icl_host.OICLModelMixin`) stores it in the
presence cache (``decoder_presence``) and restores it from there.

Under row weights (:mod:`retrofit.hosts.common.row_weights`) a train row's
mass as a source is ``w_j p_j`` and ``n_eff`` counts it ``w_j`` times (its
source weights, set by the patched model for the call; a KV cache keeps them
beside its decoder keys as ``decoder_weights``).

The host's ``q_projection``, ``k_projection`` and ``softmax_scaling_layer`` are
reused by reference under their names, so ``state_dict`` keys are the host's.
A replacement is an :class:`OManyClassDecoderForV3` or
:class:`OManyClassDecoderForV3p5`: a subclass of the ``ManyClassDecoder`` it
replaces, named ``ManyClassDecoder`` (:mod:`retrofit.hosts.common.replacement`), so
code that finds the decoder by type or by class name finds it.

Readout. :meth:`OManyClassDecoder.attention_weights` are OAttention's weights,
``p_i p_j exp(s_ij) / (eps_den + sum_j p_j exp(s_ij))`` averaged over heads: a
test row's weights sum to its own presence ``p_i`` (less ``eps_den``'s share),
about 0.99 for a live row, not to 1 as the host's do. ``forward`` collapses
exactly these weights by label, and tabpfn's softmax over the class logits
then divides by their sum, so the vote that matches the patched
``predict_proba`` is :meth:`OManyClassDecoder.vote_weights`, the weights
normalised over the train rows.
The one-hot targets are built as each host builds them (v3: up to the largest
target; v3.5: ``num_present_classes`` wide, non-finite targets as zero rows).

Shape letters: B batch (ensemble members), N train rows, M test rows,
E embedding, H decoder heads, D head dimension, T classes, C head-wide chunks
of the class axis.
"""

from __future__ import annotations

from typing import ClassVar

import torch
import torch.nn.functional as F
from tabpfn.architectures import tabpfn_v3, tabpfn_v3_5
from torch import nn

from patches import oattention_direct, support_size
from patches.presence import presence_unchecked
from retrofit.errors import MissingPresenceError
from retrofit.hosts.common.replacement import (
    adopt_host_modules,
    replacement_class_for,
    replaces_host_class,
)
from retrofit.hosts.common.row_attention import (
    oattend_rows,
    scale_queries,
    source_mass,
    weights_as,
)
from retrofit.hosts.common.row_weights import ReadsSourceWeights

__all__ = [
    "SUPPORTED_DECODERS",
    "TRAIN_PRESENCE_ATTR",
    "OManyClassDecoder",
    "OManyClassDecoderForV3",
    "OManyClassDecoderForV3p5",
]

#: Where ``project_keys`` leaves the train rows' presence ``(B, N)`` for ``forward``.
TRAIN_PRESENCE_ATTR = "_retrofit_train_presence_BN"


class OManyClassDecoder(ReadsSourceWeights, nn.Module):
    """O-closed replacement of a v3/v3.5 ``ManyClassDecoder`` (same methods and signatures).

    The implementation; a replacement is an instance of
    :class:`OManyClassDecoderForV3` or :class:`OManyClassDecoderForV3p5` (built
    by :meth:`from_module`), each a subclass of the host decoder class too.
    """

    #: Whether the replaced decoder masks non-finite targets (v3.5).
    masks_non_finite: ClassVar[bool]

    def __init__(
        self,
        original: nn.Module,
        *,
        tau: float,
        support: str = "count",
        eps_den: float = 1e-6,
        path: str = "many_class_decoder",
    ) -> None:
        nn.Module.__init__(self)  # not the host's __init__: it would build new weights
        adopt_host_modules(self, original, path)
        self.tau = tau
        self.support = support
        self.eps_den = eps_den
        self.path = path

    @classmethod
    def from_module(
        cls,
        original: nn.Module,
        *,
        tau: float = 1.0,
        support: str = "count",
        eps_den: float = 1e-6,
        path: str = "many_class_decoder",
    ) -> OManyClassDecoder:
        """Builds the O-decoder on ``original``, sharing its projections and scaling.

        The decoder is of the subclass for ``original``'s exact class
        (:data:`SUPPORTED_DECODERS`), so it is an instance of that class too.

        Raises:
            UnsupportedArchitectureError: If ``original`` is not exactly one of the
                classes of :data:`SUPPORTED_DECODERS` (a replacement already is refused).
        """
        replacement_class = replacement_class_for(original, SUPPORTED_DECODERS, path)
        return replacement_class(original, tau=tau, support=support, eps_den=eps_den, path=path)

    def extra_repr(self) -> str:
        """Shows the patch settings."""
        return f"tau={self.tau}, support={self.support!r}, eps={self.eps_den}"

    def project_keys(self, train_embeddings_BNE: torch.Tensor) -> torch.Tensor:
        """The host's keys ``(B, N, H, D)``; keeps the train rows' presence for ``forward``."""
        self.__dict__[TRAIN_PRESENCE_ATTR] = presence_unchecked(train_embeddings_BNE, self.tau)
        k_BNE = self.k_projection(train_embeddings_BNE)
        return k_BNE.view(*k_BNE.shape[:2], self.num_heads, self.head_dim).contiguous()

    def train_presence_or_none(self) -> torch.Tensor | None:
        """The train presence :meth:`project_keys` kept, if any (for the KV cache)."""
        return self.__dict__.get(TRAIN_PRESENCE_ATTR)

    def train_presence(self, num_train: int) -> torch.Tensor:
        """The presence ``(B, N)`` of the train rows whose keys ``forward`` reads.

        Raises:
            MissingPresenceError: If no patched ``project_keys`` (or presence
                cache) supplied it, or it does not match the keys.
        """
        p_BN = self.__dict__.get(TRAIN_PRESENCE_ATTR)
        if p_BN is None or p_BN.shape[1] != num_train:
            raise MissingPresenceError(
                f"{self.path}: the decoder keys carry no train presence; build them (or "
                "the KV cache holding them) with the patched model"
            )
        return p_BN

    def _queries(
        self, train_keys_BNHD: torch.Tensor, test_embeddings_BME: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Queries (scaled by ``n_eff``), keys in their dtype, and the train rows' mass."""
        B, M, _ = test_embeddings_BME.shape
        q_BMHD = self.q_projection(test_embeddings_BME).view(B, M, self.num_heads, self.head_dim)
        if train_keys_BNHD.dtype != q_BMHD.dtype:
            train_keys_BNHD = train_keys_BNHD.to(q_BMHD.dtype)  # as the host's dtype guard
        p_BN = self.train_presence(train_keys_BNHD.shape[1]).to(q_BMHD.device)
        w_BN = weights_as(self.source_weights_or_none(), p_BN)
        if self.softmax_scaling_layer is not None:
            n_eff_B = support_size(p_BN, self.support, weights=w_BN)
            q_BMHD = scale_queries(self.softmax_scaling_layer, q_BMHD, n_eff_B)
        return q_BMHD, train_keys_BNHD, source_mass(p_BN, w_BN)

    def _one_hot(
        self,
        targets_BN: torch.Tensor,
        dtype: torch.dtype,
        highest_target: int | None,
        num_present_classes: int | None,
    ) -> torch.Tensor:
        """The one-hot values ``(B, N, T)`` exactly as the host builds them."""
        if not self.masks_non_finite:
            width = int(targets_BN.max()) + 1 if highest_target is None else highest_target + 1
            return F.one_hot(targets_BN.long(), num_classes=width).to(dtype)
        finite_BN = torch.isfinite(targets_BN)
        targets_long = torch.where(finite_BN, targets_BN.long(), 0)
        one_hot = F.one_hot(targets_long, num_classes=num_present_classes)
        return torch.where(finite_BN[..., None], one_hot, 0).to(dtype)

    def _attend_class_chunks(
        self,
        q_BMHD: torch.Tensor,
        k_BNHD: torch.Tensor,
        v_BNHT: torch.Tensor,
        p_BM: torch.Tensor,
        s_BN: torch.Tensor,
    ) -> torch.Tensor:
        """OAttention with one-hot values wider than a head: ``(B, M, H, T)``.

        ``p_BM`` gates the test rows; ``s_BN`` is the train rows' mass as sources.

        The fused kernels want values as wide as the heads, so the class axis is
        cut into head-wide chunks that are folded into the batch (as the host
        folds them) and attended in one call: every chunk has the same weights,
        so this is exact.
        """
        B, M, H, D = q_BMHD.shape
        N, T = v_BNHT.shape[1], v_BNHT.shape[-1]
        C = -(-T // D)  # chunks
        v_BCNHD = F.pad(v_BNHT, (0, C * D - T)).reshape(B, N, H, C, D).permute(0, 3, 1, 2, 4)

        def fold(t: torch.Tensor) -> torch.Tensor:  # (B, ...) -> (B * C, ...), chunk-major per b
            return t.unsqueeze(1).expand(B, C, *t.shape[1:]).reshape(B * C, *t.shape[1:])

        out_bMHD = oattend_rows(
            fold(q_BMHD),
            fold(k_BNHD),
            v_BCNHD.reshape(B * C, N, H, D),
            fold(p_BM),
            fold(s_BN),
            eps_den=self.eps_den,
        )
        return out_bMHD.view(B, C, M, H, D).permute(0, 2, 3, 1, 4).reshape(B, M, H, C * D)[..., :T]

    def forward(
        self,
        train_keys_BNHD: torch.Tensor,
        test_embeddings_BME: torch.Tensor,
        targets_BN: torch.Tensor,
        highest_target: int | None = None,
        *,
        num_present_classes: int | None = None,
    ) -> torch.Tensor:
        """Logits ``(M, B, max_num_classes)``: the host's readout with OAttention.

        Args:
            train_keys_BNHD: From :meth:`project_keys` (or the KV cache).
            test_embeddings_BME: The test rows' embeddings.
            targets_BN: The train rows' class indices.
            highest_target: v3's largest target, if known.
            num_present_classes: v3.5's one-hot width.
        """
        B, M, _ = test_embeddings_BME.shape
        q_BMHD, k_BNHD, s_BN = self._queries(train_keys_BNHD, test_embeddings_BME)
        if M == 0:
            empty = test_embeddings_BME.new_empty((0, B, self.max_num_classes))
            return empty + (q_BMHD.sum() + k_BNHD.sum()) * 0.0
        v_BNT = self._one_hot(targets_BN, q_BMHD.dtype, highest_target, num_present_classes)
        v_BNHT = v_BNT.unsqueeze(2).expand(-1, -1, self.num_heads, -1)
        p_BM = presence_unchecked(test_embeddings_BME, self.tau)
        dtype = q_BMHD.dtype
        if dtype == torch.float16 and q_BMHD.device.type == "cpu":
            # Scaled queries reach ~1e4, so float16 scores overflow on the CPU
            # kernels: computed in float32, as v3.5's attention does.
            q_BMHD, k_BNHD, v_BNHT = q_BMHD.float(), k_BNHD.float(), v_BNHT.float()
        out_BMHT = self._attend_class_chunks(q_BMHD, k_BNHD, v_BNHT, p_BM, s_BN).to(dtype)
        out_BMT = out_BMHT.mean(2)
        missing = self.max_num_classes - out_BMT.shape[-1]
        if missing:
            out_BMT = F.pad(out_BMT, (0, missing))
        return torch.log(torch.clamp(out_BMT.transpose(0, 1), min=1e-5) + 3e-5)

    def attention_weights(
        self, train_keys_BNHD: torch.Tensor, test_embeddings_BME: torch.Tensor
    ) -> torch.Tensor:
        """Per-train-row OAttention weights, averaged over heads: ``(B, M, N)``.

        ``p_i p_j exp(s_ij) / (eps_den + sum_j p_j exp(s_ij))``, with ``p_j``
        times the row's weight under row weights (a row of weight ``k`` holds
        what its ``k`` copies would together): a null train
        row gets weight 0, a null test row none at all; collapsing by label
        gives what :meth:`forward` turns into logits. Unlike the host's, a
        test row's weights sum to its presence ``p_i`` (less ``eps_den``'s
        share), not to 1: the vote that matches ``predict_proba`` is
        :meth:`vote_weights`.
        """
        q_BMHD, k_BNHD, s_BN = self._queries(train_keys_BNHD, test_embeddings_BME)
        B, N, H, _ = k_BNHD.shape
        wide = torch.float64 if q_BMHD.dtype == torch.float64 else torch.float32
        # Identity values turn OAttention's output into its weights, one column per train row.
        eye_BHNN = torch.eye(N, dtype=wide, device=q_BMHD.device).expand(B, H, N, N)
        w_BHMN = oattention_direct(
            q_BMHD.transpose(1, 2),
            k_BNHD.transpose(1, 2),
            eye_BHNN,
            presence_unchecked(test_embeddings_BME, self.tau),
            s_BN,
            eps_den=self.eps_den,
            dtype=wide,
        )
        return w_BHMN.mean(1).float()

    def vote_weights(
        self, train_keys_BNHD: torch.Tensor, test_embeddings_BME: torch.Tensor
    ) -> torch.Tensor:
        """The weights the patched prediction votes with: ``(B, M, N)``, rows summing to 1.

        :meth:`attention_weights` divided by each test row's sum over the train
        rows (a null test row's weights stay 0). :meth:`forward`'s class average
        is :meth:`attention_weights` collapsed by label, and tabpfn's softmax over
        the class logits divides it by the same sum, so collapsing these weights
        by label gives the patched ``predict_proba`` (at ``softmax_temperature=1``
        without balancing) up to the host's log clamp, as the host's own weights
        give the unpatched one. Its multiplier, the row sum, is the receiver gate:
        ``attention_weights == vote_weights * attention_weights.sum(-1, keepdim=True)``.
        """
        w_BMN = self.attention_weights(train_keys_BNHD, test_embeddings_BME)
        total_BM1 = w_BMN.sum(-1, keepdim=True)
        return w_BMN / total_BM1.clamp_min(torch.finfo(w_BMN.dtype).tiny)


@replaces_host_class
class OManyClassDecoderForV3(OManyClassDecoder, tabpfn_v3.ManyClassDecoder):
    """An :class:`OManyClassDecoder` replacing (and an instance of) v3's ``ManyClassDecoder``."""

    masks_non_finite = False


@replaces_host_class
class OManyClassDecoderForV3p5(OManyClassDecoder, tabpfn_v3_5.ManyClassDecoder):
    """An :class:`OManyClassDecoder` replacing v3.5's ``ManyClassDecoder`` (masks non-finite)."""

    masks_non_finite = True


#: The replacement class of each decoder class (exact class match).
SUPPORTED_DECODERS: dict[type[nn.Module], type[OManyClassDecoder]] = {
    c.replaced_class: c for c in (OManyClassDecoderForV3, OManyClassDecoderForV3p5)
}
