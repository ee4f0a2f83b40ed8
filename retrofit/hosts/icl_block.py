"""``OICLBlock``: the ICL transformer block of TabPFN v3 and v3.5 with OAttention.

The block is the unit of replacement: ``ICLAttention`` sees only the normed
input, while presence must come from the residual carrier entering the block
(after RMSNorm every non-null row has nearly the same norm). Presence is
computed once per block call (per chunk under ``memory_saving_mode``) and
shared by all heads: every row is gated as a receiver, the train rows (the
keys) are weighted as sources, and the learned log-n query scaling gets a
per-batch ``n_eff`` instead of ``n = k.shape[1]``.

The host's modules (``icl_attention`` with its q/k/v/out projections, GQA
heads and ``SoftmaxScalingMLP``, ``layernorm``, ``layernorm_mlp``, ``mlp``) are
reused by reference under their original names, so ``state_dict`` keys and
parameters are the host's.

One block serves both hosts; what differs is looked up by the exact class of
the block it replaces (:data:`SUPPORTED_ICL_BLOCKS`). v3.5's ``ICLAttention``
applies per-head q/k RMSNorms after the projections (and stores the normed
keys in its cache); the block applies them at the same points, so an
identity-configured patch reproduces the host instead of silently skipping them.

Shape letters: B batch (ensemble members), R rows (train then test),
N train rows (the keys), L query rows, E embedding, H query heads,
J key/value heads, D head dimension.
"""

from __future__ import annotations

from itertools import pairwise
from typing import Literal

import torch
from tabpfn.architectures import tabpfn_v3, tabpfn_v3_5
from tabpfn.architectures.kv_cache import KVCacheEntry, QuantizedKVCacheEntry
from tabpfn.architectures.shared.chunked_evaluate import chunked_evaluate_maybe_inplace
from torch import nn

from patches import OFFN, ONorm, presence, support_size
from retrofit.errors import (
    InvalidPatchConfigError,
    MissingPresenceError,
    UnsupportedArchitectureError,
)
from retrofit.hosts.presence_cache import PresenceKVCacheEntry
from retrofit.hosts.row_attention import oattend_rows, oattend_train_then_test

__all__ = ["SUPPORTED_ICL_BLOCKS", "OICLBlock"]

#: The ICL block classes :class:`OICLBlock` replaces, and whether each one's
#: attention normalises queries and keys per head after the projections.
SUPPORTED_ICL_BLOCKS: dict[type[nn.Module], bool] = {
    tabpfn_v3.ICLTransformerBlock: False,
    tabpfn_v3_5.ICLTransformerBlock: True,
}


def _check_icl_block(original: nn.Module, path: str) -> bool:
    """Whether ``original`` (a supported ICL block) has q/k norms; raises otherwise."""
    qk_norm = SUPPORTED_ICL_BLOCKS.get(type(original))
    if qk_norm is None:
        names = ", ".join(f"{c.__module__}.{c.__name__}" for c in SUPPORTED_ICL_BLOCKS)
        raise UnsupportedArchitectureError(
            f"{path}: expected one of {names}, got {type(original).__name__}"
        )
    att = original.icl_attention
    has_norms = hasattr(att, "q_norm") and hasattr(att, "k_norm")
    if has_norms != qk_norm:
        # A changed host: the block would skip (or invent) a normalisation.
        raise UnsupportedArchitectureError(
            f"{path}.icl_attention: expected {'' if qk_norm else 'no '}per-head q/k norms "
            f"in {type(original).__module__}.{type(original).__name__}"
        )
    return qk_norm


class OICLBlock(nn.Module):
    """O-closed replacement of an ``ICLTransformerBlock`` (same forward signature).

    ``mode="oattention"``: ``x + Out(OAttention(q, k, v; p))`` with ``n_eff``
    in the query scaling; RMSNorm and MLP are the host's (RMSNorm(0) = 0 and
    the MLP is bias-free, so a null row already stays null).
    ``mode="full-o"``: also ``ONorm`` before the attention (``p * RMSNorm(h)``)
    and ``OFFN`` (``h + p(h) * MLP(RMSNorm(h))``, presence of the carrier
    entering the feed-forward step, as :class:`patches.OFFN` defines it).
    """

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
        super().__init__()
        if mode not in ("oattention", "full-o"):
            raise InvalidPatchConfigError(
                f"{path}: mode must be 'oattention' or 'full-o', got {mode!r}"
            )
        self.qk_norm = _check_icl_block(original, path)
        self.icl_attention = original.icl_attention
        self.layernorm = original.layernorm
        self.layernorm_mlp = original.layernorm_mlp
        self.mlp = original.mlp
        self.mode = mode
        self.tau = tau
        self.support = support
        self.eps_den = eps_den
        self.path = path
        # The O-wrappers hold the same norm/MLP objects; kept out of the module
        # tree (plain attributes) so state_dict keys stay the host's.
        self.__dict__["_onorm"] = ONorm.from_module(self.layernorm, tau=tau)
        self.__dict__["_offn"] = OFFN.from_module(self.mlp, self.layernorm_mlp, tau=tau)

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

        Raises:
            UnsupportedArchitectureError: If ``original`` is not exactly one of
                :data:`SUPPORTED_ICL_BLOCKS` or its q/k norms are not as expected.
        """
        return cls(original, mode=mode, tau=tau, support=support, eps_den=eps_den, path=path)

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
        if return_kv:
            attn_BRE, kv_entry = self._attention(x_BRE, single_eval_pos, return_kv=True)
            x_BRE = x_BRE + attn_BRE
        elif cached_kv is not None:
            attn_BRE, _ = self._attention(x_BRE, single_eval_pos, cached_kv=cached_kv)
            x_BRE = x_BRE + attn_BRE
        else:
            x_BRE = chunked_evaluate_maybe_inplace(
                self._attention_only,
                x_BRE,
                save_peak_memory_factor=save_peak_memory_factor,
                residual=True,
                batch_dims=1,
                single_eval_pos=single_eval_pos,
            )
        if self.mode == "full-o":
            # OFFN returns h + p * MLP(Norm(h)) itself, hence residual=False.
            x_BRE = chunked_evaluate_maybe_inplace(
                self._offn,
                x_BRE,
                save_peak_memory_factor=save_peak_memory_factor,
                residual=False,
                batch_dims=2,
            )
        else:
            x_BRE = chunked_evaluate_maybe_inplace(
                self._host_ffn,
                x_BRE,
                save_peak_memory_factor=save_peak_memory_factor,
                residual=True,
                batch_dims=2,
            )
        return x_BRE, kv_entry

    def _host_ffn(self, x_RE: torch.Tensor) -> torch.Tensor:
        return self.mlp(self.layernorm_mlp(x_RE))

    def _attention_only(
        self, x_BRE: torch.Tensor, single_eval_pos: int | None = None
    ) -> torch.Tensor:
        return self._attention(x_BRE, single_eval_pos)[0]

    def _attention(
        self,
        x_BRE: torch.Tensor,
        single_eval_pos: int | None,
        *,
        cached_kv: KVCacheEntry | QuantizedKVCacheEntry | None = None,
        return_kv: bool = False,
    ) -> tuple[torch.Tensor, PresenceKVCacheEntry | None]:
        """The attention update (without the residual add) and optional cache entry."""
        att = self.icl_attention
        B, R, _ = x_BRE.shape
        H, D = att.num_heads, att.head_dim
        p_BR = presence(x_BRE, self.tau)
        xn_BRE = self._onorm(x_BRE, p_BR) if self.mode == "full-o" else self.layernorm(x_BRE)
        q_BRHD = att.q_projection(xn_BRE).view(B, R, H, D)
        if self.qk_norm:
            q_BRHD = att.q_norm(q_BRHD)
        n_test_heads = att.num_kv_heads_test

        if cached_kv is not None:
            p_BN = getattr(cached_kv, "presence", None)
            if p_BN is None:
                raise MissingPresenceError(
                    f"{self.path}: cached K/V carry no train presence; build the cache "
                    "with the patched model"
                )
            if isinstance(cached_kv, QuantizedKVCacheEntry):
                cached_kv = cached_kv.dequantize(q_BRHD.dtype)
            k_BNJD, v_BNJD = cached_kv.key, cached_kv.value
            if k_BNJD.dtype != q_BRHD.dtype:  # fp32 cache under autocast
                k_BNJD, v_BNJD = k_BNJD.to(q_BRHD.dtype), v_BNJD.to(q_BRHD.dtype)
            if n_test_heads is not None and k_BNJD.shape[2] != n_test_heads:
                raise ValueError(
                    f"{self.path}: cached keys have {k_BNJD.shape[2]} heads, "
                    f"expected num_kv_heads_test={n_test_heads}"
                )
            o_BRHD = self._oattend(q_BRHD, k_BNJD, v_BNJD, p_BR, p_BN.to(p_BR.device))
        else:
            N = R if single_eval_pos is None else single_eval_pos
            xn_train_BNE = xn_BRE[:, :N]
            k_BNJD = att.k_projection(xn_train_BNE).view(B, N, att.num_kv_heads, D)
            v_BNJD = att.v_projection(xn_train_BNE).view(B, N, att.num_kv_heads, D)
            if self.qk_norm:
                # Normed once here, as the host does, so the cached keys are normed.
                k_BNJD = att.k_norm(k_BNJD)
            p_BN = p_BR[:, :N]
            if n_test_heads is not None and single_eval_pos is not None and N < R:
                # Test rows read fewer KV heads (GQA/MQA for the test partition).
                o_BRHD = oattend_train_then_test(
                    self._oattend, q_BRHD, k_BNJD, v_BNJD, p_BR, n_test_heads
                )
            else:
                o_BRHD = self._oattend(q_BRHD, k_BNJD, v_BNJD, p_BR, p_BN)

        out_BRE = att.out_projection(o_BRHD.reshape(B, R, H * D))
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
                key=k_cache.detach(), value=v_cache.detach(), presence=p_BN.detach().clone()
            )
        return out_BRE, entry

    def _oattend(
        self,
        q_BLHD: torch.Tensor,
        k_BNJD: torch.Tensor,
        v_BNJD: torch.Tensor,
        p_BL: torch.Tensor,
        p_BN: torch.Tensor,
    ) -> torch.Tensor:
        """OAttention of ``L`` receivers over ``N`` sources, with ``n_eff`` scaling."""
        scaling = self.icl_attention.softmax_scaling_layer
        if scaling is not None:
            q_BLHD = _scale_queries(scaling, q_BLHD, support_size(p_BN, self.support))
        if q_BLHD.dtype != v_BNJD.dtype or k_BNJD.dtype != v_BNJD.dtype:
            # float32 q/k norms under autocast; the host's attention casts the same way.
            q_BLHD, k_BNJD = q_BLHD.to(v_BNJD.dtype), k_BNJD.to(v_BNJD.dtype)
        return oattend_rows(q_BLHD, k_BNJD, v_BNJD, p_BL, p_BN, eps_den=self.eps_den)


def _scale_queries(scaling: nn.Module, q_BLHD: torch.Tensor, n_eff_B: torch.Tensor) -> torch.Tensor:
    """The host's learned log-n query scaling with a per-batch ``n_eff``.

    ``SoftmaxScalingMLP`` reshapes ``log n`` to ``(1, 1)``, so it is called once
    per run of consecutive batch elements that share an ``n_eff`` (once in total
    when every element agrees, as in an unpatched-equivalent run), on a view of
    that run. A padded ragged batch keeps each dataset's members together and
    its datasets ordered by length, so a run is at least a dataset's members:
    calling it once per element cost a third of a fused forward's overhead on a
    CPU (issue 25).
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
