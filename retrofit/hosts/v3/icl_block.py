"""``OICLBlock``: the ICL transformer block of TabPFN v3 and v3.5 with OAttention.

The block is the unit of replacement: ``ICLAttention`` sees only the normed
input, while presence must come from the residual carrier entering the block
(after RMSNorm every non-null row has nearly the same norm). Presence is
computed once per block call (per chunk under ``memory_saving_mode``) and
shared by all heads: every row is gated as a receiver, the train rows (the
keys) are weighted as sources, and the learned log-n query scaling gets a
per-batch ``n_eff`` instead of ``n = k.shape[1]``. Under row weights
(:mod:`retrofit.hosts.common.row_weights`) a train row's mass as a source is
``w_j p_j`` and ``n_eff`` counts it ``w_j`` times; the weights of a KV cache's
rows travel in its entries.

The host's modules (``icl_attention`` with its q/k/v/out projections, GQA
heads and ``SoftmaxScalingMLP``, ``layernorm``, ``layernorm_mlp``, ``mlp``) are
reused by reference under their original names, so ``state_dict`` keys and
parameters are the host's.

One block serves both hosts: :class:`OICLBlock` is the implementation, and a
replacement is an :class:`OICLBlockForV3` or :class:`OICLBlockForV3p5`, each
also a subclass of the ``ICLTransformerBlock`` it replaces (so an instance of
it, under its name: :mod:`retrofit.hosts.common.replacement`), chosen by the exact
class of the block (:data:`SUPPORTED_ICL_BLOCKS`). v3.5's ``ICLAttention``
applies per-head q/k RMSNorms after the projections (and stores the normed
keys in its cache); the block applies them at the same points, so an
identity-configured patch reproduces the host instead of silently skipping them.

Shape letters: B batch (ensemble members), R rows (train then test),
N train rows (the keys), L query rows, E embedding, H query heads,
J key/value heads, D head dimension.
"""

from __future__ import annotations

from typing import ClassVar, Literal

import torch
from tabpfn.architectures import tabpfn_v3, tabpfn_v3_5
from tabpfn.architectures.kv_cache import KVCacheEntry, QuantizedKVCacheEntry
from tabpfn.architectures.shared.chunked_evaluate import chunked_evaluate_maybe_inplace
from torch import nn

from patches import OFFN, ONorm, support_size
from patches.presence import presence_unchecked
from retrofit.errors import (
    InvalidPatchConfigError,
    MissingPresenceError,
    UnsupportedArchitectureError,
)
from retrofit.hosts.common.presence_cache import PresenceKVCacheEntry
from retrofit.hosts.common.replacement import (
    adopt_host_modules,
    replacement_class_for,
    replaces_host_class,
)
from retrofit.hosts.common.row_attention import (
    keeps_zero_rows,
    oattend_rows,
    oattend_train_then_test,
    scale_queries,
    source_mass,
    weights_as,
)
from retrofit.hosts.common.row_weights import BatchCursor, ReadsSourceWeights

__all__ = ["SUPPORTED_ICL_BLOCKS", "OICLBlock", "OICLBlockForV3", "OICLBlockForV3p5"]


def _check_icl_block(original: nn.Module, qk_norm: bool, path: str) -> bool:
    """``qk_norm`` if ``original``'s attention has per-head q/k norms exactly when expected."""
    att = original.icl_attention
    has_norms = hasattr(att, "q_norm") and hasattr(att, "k_norm")
    if has_norms != qk_norm:
        # A changed host: the block would skip (or invent) a normalisation.
        raise UnsupportedArchitectureError(
            f"{path}.icl_attention: expected {'' if qk_norm else 'no '}per-head q/k norms "
            f"in {type(original).__module__}.{type(original).__name__}"
        )
    return qk_norm


class OICLBlock(ReadsSourceWeights, nn.Module):
    """O-closed replacement of an ``ICLTransformerBlock`` (same forward signature).

    The implementation; a replacement is an instance of :class:`OICLBlockForV3`
    or :class:`OICLBlockForV3p5` (built by :meth:`from_module`), each a subclass
    of the host block class too.

    ``mode="oattention"``: ``x + Out(OAttention(q, k, v; p))`` with ``n_eff``
    in the query scaling; RMSNorm and MLP are the host's (RMSNorm(0) = 0 and
    the MLP is bias-free, so a null row already stays null).
    ``mode="full-o"``: also ``ONorm`` before the attention (``p * RMSNorm(h)``)
    and ``OFFN`` (``h + p(h) * MLP(RMSNorm(h))``, presence of the carrier
    entering the feed-forward step, as :class:`patches.OFFN` defines it).
    """

    #: Whether the replaced block's attention normalises queries and keys per head.
    qk_norm: ClassVar[bool]

    def __init__(
        self,
        original: nn.Module,
        *,
        mode: Literal["oattention", "full-o"],
        tau: float,
        support: Literal["count", "mass"] = "count",
        eps_den: float = 1e-6,
        path: str = "icl_blocks",
    ) -> None:
        nn.Module.__init__(self)  # not the host's __init__: it would build new weights
        if mode not in ("oattention", "full-o"):
            raise InvalidPatchConfigError(
                f"{path}: mode must be 'oattention' or 'full-o', got {mode!r}"
            )
        adopt_host_modules(self, original, path)
        self.qk_norm = _check_icl_block(original, type(self).qk_norm, path)
        self.mode = mode
        self.tau = tau
        self.support = support
        self.eps_den = eps_den
        self.path = path
        # The O-wrappers hold the same norm/MLP objects; kept out of the module
        # tree (plain attributes) so state_dict keys stay the host's.
        self.__dict__["_onorm"] = ONorm.from_module(self.layernorm, tau=tau, tau_checked=True)
        self.__dict__["_offn"] = OFFN.from_module(
            self.mlp, self.layernorm_mlp, tau=tau, tau_checked=True
        )

    @classmethod
    def from_module(
        cls,
        original: nn.Module,
        *,
        mode: Literal["oattention", "full-o"],
        tau: float = 1.0,
        support: Literal["count", "mass"] = "count",
        eps_den: float = 1e-6,
        path: str = "icl_blocks",
    ) -> OICLBlock:
        """Builds the O-block on ``original``, sharing all of its modules.

        The block is of the subclass for ``original``'s exact class
        (:data:`SUPPORTED_ICL_BLOCKS`), so it is an instance of that class too.

        Raises:
            UnsupportedArchitectureError: If ``original`` is not exactly one of
                the classes of :data:`SUPPORTED_ICL_BLOCKS` (a replacement already
                is refused), or its q/k norms are not as expected.
        """
        replacement_class = replacement_class_for(original, SUPPORTED_ICL_BLOCKS, path)
        return replacement_class(
            original, mode=mode, tau=tau, support=support, eps_den=eps_den, path=path
        )

    def extra_repr(self) -> str:
        """Shows the patch settings."""
        return f"mode={self.mode!r}, tau={self.tau}, support={self.support!r}, eps={self.eps_den}"

    def forward(
        self,
        x_BRE: torch.Tensor,
        single_eval_pos: int,
        save_peak_memory_factor: int | None = None,
        *,
        cached_kv: KVCacheEntry | QuantizedKVCacheEntry | None = None,
        return_kv: bool = False,
    ) -> tuple[torch.Tensor, KVCacheEntry | None]:
        """Same contract as ``ICLTransformerBlock.forward``.

        Args:
            x_BRE: ``(B, R, E)`` all rows, or the test rows when ``cached_kv``.
            single_eval_pos: Number of train rows (0 with ``cached_kv``).
            save_peak_memory_factor: Chunk count for in-place evaluation.
            cached_kv: This block's cached train K/V, carrying presence.
            return_kv: Also return the train K/V (with presence) for the cache.

        Returns:
            ``(x_BRE, kv_entry)``; ``kv_entry`` is None unless ``return_kv``.

        Raises:
            MissingPresenceError: If ``cached_kv`` carries no presence (a cache built
                by an unpatched model).
        """
        kv_entry = None
        w_BN = self.source_weights_or_none()
        cursor = None if w_BN is None or cached_kv is not None else BatchCursor(w_BN)
        if return_kv:
            attn_BRE, kv_entry = self._attention(
                x_BRE, single_eval_pos, return_kv=True, cursor=cursor
            )
            x_BRE = x_BRE + attn_BRE
        elif cached_kv is not None:
            attn_BRE, _ = self._attention(x_BRE, single_eval_pos, cached_kv=cached_kv)
            x_BRE = x_BRE + attn_BRE
        else:
            # Under save_peak_memory_factor the batch runs in consecutive chunks; each
            # takes its rows of the source weights from the cursor.
            x_BRE = chunked_evaluate_maybe_inplace(
                self._attention_only,
                x_BRE,
                save_peak_memory_factor=save_peak_memory_factor,
                residual=True,
                batch_dims=1,
                single_eval_pos=single_eval_pos,
                cursor=cursor,
            )
        return self._feed_forward(x_BRE, save_peak_memory_factor), kv_entry

    def forward_test_rows(
        self,
        x_BRE: torch.Tensor,
        single_eval_pos: int,
        save_peak_memory_factor: int | None = None,
    ) -> torch.Tensor:
        """What :meth:`forward` returns for the test rows alone: ``(B, R - N, E)``.

        For a last block whose train rows' outputs nothing reads (a regression
        head decodes the test rows only): the train rows are the sources, as in
        :meth:`forward`, but no query, attention output or feed-forward is
        computed for them. Each test row goes through the same operations as in
        :meth:`forward`, on a shorter matrix (equal within the ulps bound of a
        changed shape, tests/helpers/exactness.py).

        Args:
            x_BRE: ``(B, R, E)`` train then test rows.
            single_eval_pos: Number of train rows ``N``.
            save_peak_memory_factor: Chunk count over the batch, as in :meth:`forward`.
        """
        w_BN = self.source_weights_or_none()
        cursor = None if w_BN is None else BatchCursor(w_BN)
        chunks = [x_BRE]
        if save_peak_memory_factor is not None:
            size = -(-x_BRE.shape[0] // save_peak_memory_factor)
            chunks = list(torch.split(x_BRE, size))
        # Each chunk takes its rows of the source weights from the cursor, in order.
        tested = []
        for x_bRE in chunks:
            attn_bME, _ = self._attention(
                x_bRE, single_eval_pos, cursor=cursor, test_receivers_only=True
            )
            tested.append(x_bRE[:, single_eval_pos:] + attn_bME)
        x_BME = tested[0] if len(tested) == 1 else torch.cat(tested)
        return self._feed_forward(x_BME, save_peak_memory_factor)

    def _feed_forward(
        self, x_BRE: torch.Tensor, save_peak_memory_factor: int | None
    ) -> torch.Tensor:
        if self.mode == "full-o":
            # OFFN returns h + p * MLP(Norm(h)) itself, hence residual=False.
            return chunked_evaluate_maybe_inplace(
                self._offn,
                x_BRE,
                save_peak_memory_factor=save_peak_memory_factor,
                residual=False,
                batch_dims=2,
            )
        return chunked_evaluate_maybe_inplace(
            self._host_ffn,
            x_BRE,
            save_peak_memory_factor=save_peak_memory_factor,
            residual=True,
            batch_dims=2,
        )

    def _host_ffn(self, x_RE: torch.Tensor) -> torch.Tensor:
        return self.mlp(self.layernorm_mlp(x_RE))

    def _attention_only(
        self,
        x_BRE: torch.Tensor,
        single_eval_pos: int | None = None,
        cursor: BatchCursor | None = None,
    ) -> torch.Tensor:
        return self._attention(x_BRE, single_eval_pos, cursor=cursor)[0]

    def _attention(
        self,
        x_BRE: torch.Tensor,
        single_eval_pos: int | None,
        *,
        cached_kv: KVCacheEntry | QuantizedKVCacheEntry | None = None,
        return_kv: bool = False,
        cursor: BatchCursor | None = None,
        test_receivers_only: bool = False,
    ) -> tuple[torch.Tensor, PresenceKVCacheEntry | None]:
        """The attention update (without the residual add) and optional cache entry.

        ``cursor`` hands out this call's rows of the source weights (None: every
        train row counts once, or a cache's rows carry their own).
        ``test_receivers_only``: only the test rows receive (the update covers
        rows ``single_eval_pos:``, ``L`` of them); the train rows are sources
        only. Not with ``cached_kv``.
        """
        att = self.icl_attention
        B, R, _ = x_BRE.shape
        H, D = att.num_heads, att.head_dim
        first = single_eval_pos if test_receivers_only else 0
        L = R - first
        p_BR = presence_unchecked(x_BRE, self.tau)
        xn_BRE = self._onorm(x_BRE, p_BR) if self.mode == "full-o" else self.layernorm(x_BRE)
        q_BLHD = att.q_projection(xn_BRE[:, first:]).view(B, L, H, D)
        if self.qk_norm:
            q_BLHD = att.q_norm(q_BLHD)
        n_test_heads = att.num_kv_heads_test
        p_BL = p_BR[:, first:]

        if cached_kv is not None:
            p_BN = getattr(cached_kv, "presence", None)
            if p_BN is None:
                raise MissingPresenceError(
                    f"{self.path}: cached K/V carry no train presence; build the cache "
                    "with the patched model"
                )
            if isinstance(cached_kv, QuantizedKVCacheEntry):
                cached_kv = cached_kv.dequantize(q_BLHD.dtype)
            k_BNJD, v_BNJD = cached_kv.key, cached_kv.value
            if k_BNJD.dtype != q_BLHD.dtype:  # fp32 cache under autocast
                k_BNJD, v_BNJD = k_BNJD.to(q_BLHD.dtype), v_BNJD.to(q_BLHD.dtype)
            if n_test_heads is not None and k_BNJD.shape[2] != n_test_heads:
                raise ValueError(
                    f"{self.path}: cached keys have {k_BNJD.shape[2]} heads, "
                    f"expected num_kv_heads_test={n_test_heads}"
                )
            p_BN = p_BN.to(p_BR.device)
            w_BN = weights_as(getattr(cached_kv, "weights", None), p_BN)
            attend = self._attend_with(p_BN, w_BN)
            o_BLHD = attend(q_BLHD, k_BNJD, v_BNJD, p_BL, source_mass(p_BN, w_BN))
        else:
            N = R if single_eval_pos is None else single_eval_pos
            xn_train_BNE = xn_BRE[:, :N]
            k_BNJD = att.k_projection(xn_train_BNE).view(B, N, att.num_kv_heads, D)
            v_BNJD = att.v_projection(xn_train_BNE).view(B, N, att.num_kv_heads, D)
            if self.qk_norm:
                # Normed once here, as the host does, so the cached keys are normed.
                k_BNJD = att.k_norm(k_BNJD)
            p_BN = p_BR[:, :N]
            w_BN = None if cursor is None else weights_as(cursor.take(B), p_BN)
            attend = self._attend_with(p_BN, w_BN)
            s_BN = source_mass(p_BN, w_BN)
            if n_test_heads is not None and single_eval_pos is not None and N < R:
                # Test rows read fewer KV heads (GQA/MQA for the test partition).
                if test_receivers_only:
                    heads = slice(0, n_test_heads)
                    o_BLHD = attend(q_BLHD, k_BNJD[:, :, heads], v_BNJD[:, :, heads], p_BL, s_BN)
                else:
                    o_BLHD = oattend_train_then_test(
                        attend, q_BLHD, k_BNJD, v_BNJD, p_BL, n_test_heads, s_BN
                    )
            else:
                o_BLHD = attend(q_BLHD, k_BNJD, v_BNJD, p_BL, s_BN)

        out_BLE = att.out_projection(o_BLHD.reshape(B, L, H * D))
        entry = None
        if return_kv:
            # Under autocast the q/k norms return float32 while the values are in
            # the autocast dtype; the host stores the keys at the values' dtype.
            k_cache, v_cache = k_BNJD.to(v_BNJD.dtype), v_BNJD
            if n_test_heads is not None:
                # Own storage, so the full-head projection can be freed.
                k_cache = k_cache[:, :, :n_test_heads].contiguous()
                v_cache = v_cache[:, :, :n_test_heads].contiguous()
            entry = PresenceKVCacheEntry(
                key=k_cache.detach(),
                value=v_cache.detach(),
                presence=p_BN.detach().clone(),
                weights=None if w_BN is None else w_BN.detach().clone(),
            )
        return out_BLE, entry

    def _attend_with(self, p_BN: torch.Tensor, w_BN: torch.Tensor | None):
        """The block's OAttention with the ``n_eff`` of sources ``p_BN`` weighted by ``w_BN``."""
        n_eff_B = support_size(p_BN, self.support, weights=w_BN)

        def attend(q_BLHD, k_BNJD, v_BNJD, p_BL, s_BN):
            return self._oattend(q_BLHD, k_BNJD, v_BNJD, p_BL, s_BN, n_eff_B)

        return attend

    def _oattend(
        self,
        q_BLHD: torch.Tensor,
        k_BNJD: torch.Tensor,
        v_BNJD: torch.Tensor,
        p_BL: torch.Tensor,
        s_BN: torch.Tensor,
        n_eff_B: torch.Tensor,
    ) -> torch.Tensor:
        """OAttention of ``L`` receivers over ``N`` sources of mass ``s_BN``, ``n_eff`` scaling."""
        scaling = self.icl_attention.softmax_scaling_layer
        if scaling is not None:
            q_BLHD = scale_queries(scaling, q_BLHD, n_eff_B)
        if q_BLHD.dtype != v_BNJD.dtype or k_BNJD.dtype != v_BNJD.dtype:
            # float32 q/k norms under autocast; the host's attention casts the same way.
            q_BLHD, k_BNJD = q_BLHD.to(v_BNJD.dtype), k_BNJD.to(v_BNJD.dtype)
        return oattend_rows(
            q_BLHD,
            k_BNJD,
            v_BNJD,
            p_BL,
            s_BN,
            eps_den=self.eps_den,
            nulls_are_zero=self._null_rows_are_zero(),
        )

    def _null_rows_are_zero(self) -> bool:
        """Whether a null row's query, keys and values are exactly zero (cached ones too).

        A null row is a zero carrier. Full-O's ``ONorm`` gates it to zero
        whatever the norm; the host's norm must keep it zero otherwise (RMSNorm
        has no bias); then the projections, and v3.5's q/k norms, must be
        bias-free. The learned query scaling multiplies (0 stays 0); a cached
        key or value was made by this block, and a symmetric quantization
        keeps 0 at 0.
        """
        att = self.icl_attention
        maps = [att.q_projection, att.k_projection, att.v_projection]
        if self.mode != "full-o":
            maps.append(self.layernorm)
        if self.qk_norm:
            maps += [att.q_norm, att.k_norm]
        return keeps_zero_rows(*maps)


@replaces_host_class
class OICLBlockForV3(OICLBlock, tabpfn_v3.ICLTransformerBlock):
    """An :class:`OICLBlock` replacing (and an instance of) v3's ``ICLTransformerBlock``."""

    qk_norm = False


@replaces_host_class
class OICLBlockForV3p5(OICLBlock, tabpfn_v3_5.ICLTransformerBlock):
    """An :class:`OICLBlock` replacing v3.5's ``ICLTransformerBlock`` (per-head q/k norms)."""

    qk_norm = True


#: The replacement class of each ICL block class (exact class match).
SUPPORTED_ICL_BLOCKS: dict[type[nn.Module], type[OICLBlock]] = {
    c.replaced_class: c for c in (OICLBlockForV3, OICLBlockForV3p5)
}
