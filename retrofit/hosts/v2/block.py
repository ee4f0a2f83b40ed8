"""The O-closed block of TabPFN v2, v2.5 and v2.6: ``TabPFNBlock`` -> :class:`OTabPFNBlockV2`.

TabPFN v2 (``tabpfn.architectures.tabpfn_v2.TabPFNV2``) keeps one carrier per
cell, ``(B, R, C, E)``: items (rows) by features (feature groups plus the target
column). Each post-norm ``TabPFNBlock`` runs attention between the features of a
row, then attention between the items of a column (keys and values are the
train rows only; test queries read the first key/value head), then a bias-free
MLP, each followed by a LayerNorm without affine (so LN(0) = 0).

The null token is a row whose every cell carrier is zero. Carrier and presence
are per cell: the between-items attention runs per column over rows, so
presence ``p = rho_tau(h)`` of each ``(row, column)`` cell weights it as a
source and gates it as a receiver in that column's attention. What each map
does to a null row, and what the patch changes:

* between features (per row): all cells of a null row are zero, so its values
  are zero and its output is zero; other rows never see it. Kept as the host's.
* between items (per column): a null key dilutes every softmax and a null query
  receives the mean of the values. Replaced by OAttention (both modes).
* LayerNorm(0) = 0, MLP(0) = 0 (no biases, GELU(0) = 0): already null-keeping;
  ``mode="full-o"`` still applies the law to them as for v3: ``ONorm``
  (``p(h) * LN(h)``) for the three norms and ``OFFN`` (``h + p(h) * MLP(h)``).

v2 has no learned length scaling, so ``support`` has nothing to act on here.
Because of the post-norm, the carrier entering the between-items attention is
LayerNorm-ed: every non-null cell has ``||h||^2`` close to ``E`` and presence
close to ``E / (tau + E)``; the null cell has presence exactly 0. Column
embeddings and the target cell are injected before the first block, in data
space (like ``OStandardize``, out of scope of the block-level retrofit).

TabPFN v2.5 and v2.6 (``TabPFNV2p5``, ``TabPFNV2p6``) run the same block under
their own class names (v2.6 with an RMSNorm that has a learned weight, so a
carrier's ``||h||^2`` is about ``||gamma||^2`` rather than ``E``: see the
per-host default tau in :mod:`retrofit.settings`), and prepend ``T`` learned
*thinking rows* (``AddThinkingRows``, 64 at the published config) before block
0: keys for every query and part of the KV cache, so train rows start at row
``T``. Presence rule for learned tokens: a thinking row is never null; its
presence is 1 in every map of the block (as a source and a receiver of the
between-items attention, and in Full-O's ONorm/OFFN), whatever its carrier. A
test-only forward from the cache has no thinking rows among its queries; their
keys are in the cache with presence 1.

Under row weights (:mod:`retrofit.hosts.common.row_weights`) a train row's
cells are sources of mass ``w_j p`` in every column's attention (the row's
weight broadcast over the feature groups and the target column); thinking rows
weigh 1. A KV cache's entries carry the weights of their key rows.

Shape letters: B batch (ensemble members), R rows (train then test), C columns
(feature groups + target), E embedding, Bc = B * C (one attention batch per
column), N train rows (the keys), L query rows, H query heads, J key/value
heads (H for train queries, 1 for test queries), D head dimension.
"""

from __future__ import annotations

from typing import Literal

import torch
from tabpfn.architectures import tabpfn_v2, tabpfn_v2_5, tabpfn_v2_6
from tabpfn.architectures.kv_cache import KVCacheEntry
from tabpfn.architectures.shared.chunked_evaluate import chunked_evaluate_maybe_inplace
from torch import nn

from patches import OFFN, ONorm
from patches.presence import presence_unchecked
from retrofit.errors import (
    InvalidPatchConfigError,
    MissingPresenceError,
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
    source_mass,
    weights_as,
)
from retrofit.hosts.common.row_weights import BatchCursor, ReadsSourceWeights

__all__ = [
    "SUPPORTED_V2_BLOCKS",
    "OTabPFNBlockForV2",
    "OTabPFNBlockForV2p5",
    "OTabPFNBlockForV2p6",
    "OTabPFNBlockV2",
]


class OTabPFNBlockV2(ReadsSourceWeights, nn.Module):
    """O-closed replacement of a v2-family ``TabPFNBlock`` (same forward signature).

    The host's submodules are reused by reference under their original names,
    so ``state_dict`` keys and parameters are the host's. ``learned_rows`` is
    the number of leading learned rows (v2.5/v2.6's thinking rows, 0 for v2),
    whose presence is 1 wherever the block computes presence, except on the
    cache path, whose rows are all test rows.

    The implementation; a replacement is an instance of the subclass for its
    host module (:class:`OTabPFNBlockForV2`, :class:`OTabPFNBlockForV2p5`,
    :class:`OTabPFNBlockForV2p6`, built by :meth:`from_module`), each a
    subclass of that module's ``TabPFNBlock`` too.
    """

    def __init__(
        self,
        original: nn.Module,
        *,
        mode: Literal["oattention", "full-o"],
        tau: float,
        support: Literal["count", "mass"] = "count",
        eps_den: float = 1e-6,
        path: str = "blocks",
        learned_rows: int = 0,
    ) -> None:
        nn.Module.__init__(self)  # not the host's __init__: it would build new weights
        if mode not in ("oattention", "full-o"):
            raise InvalidPatchConfigError(
                f"{path}: mode must be 'oattention' or 'full-o', got {mode!r}"
            )
        adopt_host_modules(self, original, path)
        self.mode, self.tau, self.support, self.eps_den, self.path = (
            mode,
            tau,
            support,
            eps_den,
            path,
        )
        if learned_rows < 0:
            raise InvalidPatchConfigError(f"{path}: learned_rows must be >= 0, got {learned_rows}")
        self.learned_rows = int(learned_rows)
        # The O-wrappers hold the same norm/MLP objects; kept out of the module
        # tree (plain attributes) so state_dict keys stay the host's.
        self.__dict__["_onorm1"] = ONorm.from_module(self.layernorm_mha1, tau=tau, tau_checked=True)
        self.__dict__["_onorm2"] = ONorm.from_module(self.layernorm_mha2, tau=tau, tau_checked=True)
        self.__dict__["_onorm3"] = ONorm.from_module(self.layernorm_mlp, tau=tau, tau_checked=True)
        self.__dict__["_offn"] = OFFN.from_module(self.mlp, None, tau=tau, tau_checked=True)

    @classmethod
    def from_module(
        cls,
        original: nn.Module,
        *,
        mode: Literal["oattention", "full-o"],
        tau: float = 1.0,
        support: Literal["count", "mass"] = "count",
        eps_den: float = 1e-6,
        path: str = "blocks",
        learned_rows: int = 0,
    ) -> OTabPFNBlockV2:
        """Builds the O-block on ``original``, sharing all of its modules.

        The block is of the subclass for ``original``'s exact class
        (:data:`SUPPORTED_V2_BLOCKS`), so it is an instance of that class too.

        Raises:
            UnsupportedArchitectureError: If ``original`` is not exactly one of the
                classes of :data:`SUPPORTED_V2_BLOCKS` (a replacement already is refused).
        """
        replacement_class = replacement_class_for(original, SUPPORTED_V2_BLOCKS, path)
        return replacement_class(
            original,
            mode=mode,
            tau=tau,
            support=support,
            eps_den=eps_den,
            path=path,
            learned_rows=learned_rows,
        )

    def extra_repr(self) -> str:
        """Shows the patch settings."""
        return (
            f"mode={self.mode!r}, tau={self.tau}, eps={self.eps_den}, "
            f"learned_rows={self.learned_rows}"
        )

    def _presence(self, x_BR_E: torch.Tensor, learned_rows: int) -> torch.Tensor:
        """``rho_tau`` of every carrier of ``x`` (rows on axis 1), 1 on the learned rows."""
        p = presence_unchecked(x_BR_E, self.tau)
        if learned_rows:
            p[:, :learned_rows] = 1.0
        return p

    def _local(self, name: str, x: torch.Tensor, factor: int | None, learned: int, row_dims: int):
        """One per-token map of the block over ``x``, chunked as the host does.

        Args:
            name: ``"norm1"``, ``"norm2"``, ``"norm3"`` or ``"mlp"``.
            x: Carriers; rows are axis 1 after flattening ``row_dims`` leading dims.
            factor: The host's ``save_peak_memory_factor``.
            learned: Leading learned rows of this call (0 on the cache path).
            row_dims: Leading dims before the rows (1 for ``(B, R, C, E)``, 2 for
                ``(B, C, R, E)``).
        """
        if self.mode != "full-o":
            host = {
                "norm1": self.layernorm_mha1,
                "norm2": self.layernorm_mha2,
                "norm3": self.layernorm_mlp,
                "mlp": self.mlp,
            }[name]
            return chunked_evaluate_maybe_inplace(
                host, x, factor, residual=name == "mlp", batch_dims=3
            )
        wrapper = {
            "norm1": self._onorm1,
            "norm2": self._onorm2,
            "norm3": self._onorm3,
            "mlp": self._offn,
        }[name]

        def gated(x_chunk: torch.Tensor) -> torch.Tensor:
            return wrapper(x_chunk, self._presence(x_chunk, learned))

        # Chunks must keep every row of a chunk's rows axis when rows carry the rule;
        # OFFN returns h + p * MLP(h) itself, hence residual=False throughout.
        batch_dims = row_dims if learned else 3
        return chunked_evaluate_maybe_inplace(
            gated, x, factor, residual=False, batch_dims=batch_dims
        )

    def forward(
        self,
        x_BRCE_container: list[torch.Tensor] | torch.Tensor,
        single_eval_pos: int,
        save_peak_memory_factor: int | None,
        *,
        cached_kv: KVCacheEntry | None = None,
        return_kv: bool = False,
    ) -> tuple[torch.Tensor, KVCacheEntry | None]:
        """Same contract as ``TabPFNBlock.forward`` (post-norm, three sublayers).

        Args:
            x_BRCE_container: ``(B, R, C, E)`` or a one-element list holding it,
                emptied with ``pop(0)`` so the caller's reference is released.
            single_eval_pos: Number of train rows (0 with ``cached_kv``).
            save_peak_memory_factor: Chunk count for in-place evaluation.
            cached_kv: This block's cached train K/V, carrying presence.
            return_kv: Also return the train K/V (first head, with presence).

        Returns:
            ``(x_BRCE, kv_entry)``; ``kv_entry`` is None unless ``return_kv``.

        Raises:
            MissingPresenceError: If ``cached_kv`` carries no presence.
        """
        if isinstance(x_BRCE_container, torch.Tensor):
            x_BRCE = x_BRCE_container
        else:
            x_BRCE = x_BRCE_container.pop(0)
        learned = 0 if cached_kv is not None else self.learned_rows
        x_BRCE = chunked_evaluate_maybe_inplace(
            self.per_sample_attention_between_features,
            x_BRCE,
            save_peak_memory_factor,
            residual=True,
            batch_dims=2,
        )
        x_BRCE = self._local("norm1", x_BRCE, save_peak_memory_factor, learned, row_dims=1)

        x_BCRE = x_BRCE.transpose(1, 2).contiguous()
        del x_BRCE
        kv_entry = None
        cursor = None if cached_kv is not None else self._weights_cursor(x_BCRE, learned)
        if return_kv or cached_kv is not None:
            B, C = x_BCRE.shape[:2]
            attn_BcRE, kv_entry = self._attention(
                x_BCRE.flatten(0, 1),
                single_eval_pos,
                cached_kv=cached_kv,
                return_kv=return_kv,
                learned_rows=learned,
                cursor=cursor,
            )
            x_BCRE = x_BCRE + attn_BcRE.unflatten(0, (B, C))
        else:
            # Chunks of the flattened (B, C) axis run in order; each takes its rows of
            # the source weights from the cursor.
            x_BCRE = chunked_evaluate_maybe_inplace(
                self._attention_only,
                x_BCRE,
                save_peak_memory_factor,
                residual=True,
                batch_dims=2,
                single_eval_pos=single_eval_pos,
                learned_rows=learned,
                cursor=cursor,
            )
        x_BCRE = self._local("norm2", x_BCRE, save_peak_memory_factor, learned, row_dims=2)
        x_BRCE = x_BCRE.transpose(1, 2).contiguous()
        del x_BCRE

        x_BRCE = self._local("mlp", x_BRCE, save_peak_memory_factor, learned, row_dims=1)
        x_BRCE = self._local("norm3", x_BRCE, save_peak_memory_factor, learned, row_dims=1)
        return x_BRCE, kv_entry

    def _weights_cursor(self, x_BCRE: torch.Tensor, learned: int) -> BatchCursor | None:
        """The source weights of every key row per (batch element, column), in the block's order.

        The weights set on the block cover the train rows; the ``learned`` rows
        before them weigh 1. None when every row counts once.
        """
        w_BN = self.source_weights_or_none()
        if w_BN is None:
            return None
        B, C = x_BCRE.shape[:2]
        if learned:
            w_BN = torch.cat([w_BN.new_ones(w_BN.shape[0], learned), w_BN], dim=1)
        return BatchCursor(w_BN.expand(B, -1).repeat_interleave(C, dim=0))

    def _attention_only(
        self,
        x_BcRE: torch.Tensor,
        single_eval_pos: int | None = None,
        learned_rows: int = 0,
        cursor: BatchCursor | None = None,
    ) -> torch.Tensor:
        return self._attention(x_BcRE, single_eval_pos, learned_rows=learned_rows, cursor=cursor)[0]

    def _attention(
        self,
        x_BcRE: torch.Tensor,
        single_eval_pos: int | None,
        *,
        cached_kv: KVCacheEntry | None = None,
        return_kv: bool = False,
        learned_rows: int = 0,
        cursor: BatchCursor | None = None,
    ) -> tuple[torch.Tensor, PresenceKVCacheEntry | None]:
        """Between-items OAttention per column (without the residual add).

        ``cursor`` hands out this call's rows of the key rows' weights (None:
        every row counts once, or a cache's rows carry their own).
        """
        att = self.per_column_attention_between_cells
        Bc, R, _ = x_BcRE.shape
        H, D = att.num_heads, att.head_dim
        p_BcR = self._presence(x_BcRE, learned_rows)
        q_BcRHD = att.q_projection(x_BcRE).view(Bc, R, H, D)

        entry = None
        if cached_kv is not None:
            p_BcN = getattr(cached_kv, "presence", None)
            if p_BcN is None:
                raise MissingPresenceError(
                    f"{self.path}: cached K/V carry no train presence; build the cache "
                    "with the patched model"
                )
            k_BcN1D, v_BcN1D = cached_kv.key, cached_kv.value
            if k_BcN1D.dtype != q_BcRHD.dtype:
                k_BcN1D, v_BcN1D = k_BcN1D.to(q_BcRHD.dtype), v_BcN1D.to(q_BcRHD.dtype)
            p_BcN = p_BcN.to(p_BcR.device)
            w_BcN = weights_as(getattr(cached_kv, "weights", None), p_BcN)
            o_BcRHD = self._oattend(q_BcRHD, k_BcN1D, v_BcN1D, p_BcR, source_mass(p_BcN, w_BcN))
        else:
            N = R if single_eval_pos is None else single_eval_pos
            x_train_BcNE = x_BcRE[:, :N]
            k_BcNHD = att.k_projection(x_train_BcNE).view(Bc, N, H, D)
            v_BcNHD = att.v_projection(x_train_BcNE).view(Bc, N, H, D)
            p_BcN = p_BcR[:, :N]
            w_BcN = None if cursor is None else weights_as(cursor.take(Bc), p_BcN)
            if N == R:
                o_BcRHD = self._oattend(q_BcRHD, k_BcNHD, v_BcNHD, p_BcR, source_mass(p_BcN, w_BcN))
            else:
                # Train queries use every head; test queries read the first
                # key/value head only (the host's multi-query attention).
                o_BcRHD = oattend_train_then_test(
                    self._oattend,
                    q_BcRHD,
                    k_BcNHD,
                    v_BcNHD,
                    p_BcR,
                    test_heads=1,
                    sources_BN=source_mass(p_BcN, w_BcN),
                )
            if return_kv:
                entry = PresenceKVCacheEntry(
                    key=k_BcNHD[:, :, :1].contiguous().detach(),
                    value=v_BcNHD[:, :, :1].contiguous().detach(),
                    presence=p_BcN.detach().clone(),
                    weights=None if w_BcN is None else w_BcN.detach().clone(),
                )
        return att.out_projection(o_BcRHD.reshape(Bc, R, H * D)), entry

    def _oattend(
        self,
        q_BcLHD: torch.Tensor,
        k_BcNJD: torch.Tensor,
        v_BcNJD: torch.Tensor,
        p_BcL: torch.Tensor,
        p_BcN: torch.Tensor,
    ) -> torch.Tensor:
        """OAttention of ``L`` receivers over ``N`` sources; ``(Bc, L, H, D)``.

        A null cell is a zero carrier that reaches the queries, keys and values
        with no norm in between (post-norm), so bias-free projections keep it
        exactly zero and OAttention's null-token checks are skipped; learned
        rows are never null.
        """
        att = self.per_column_attention_between_cells
        projections = (att.q_projection, att.k_projection, att.v_projection)
        return oattend_rows(
            q_BcLHD,
            k_BcNJD,
            v_BcNJD,
            p_BcL,
            p_BcN,
            eps_den=self.eps_den,
            nulls_are_zero=keeps_zero_rows(*projections),
        )


@replaces_host_class
class OTabPFNBlockForV2(OTabPFNBlockV2, tabpfn_v2.TabPFNBlock):
    """An :class:`OTabPFNBlockV2` replacing (and an instance of) v2's ``TabPFNBlock``."""


@replaces_host_class
class OTabPFNBlockForV2p5(OTabPFNBlockV2, tabpfn_v2_5.TabPFNBlock):
    """An :class:`OTabPFNBlockV2` replacing (and an instance of) v2.5's ``TabPFNBlock``."""


@replaces_host_class
class OTabPFNBlockForV2p6(OTabPFNBlockV2, tabpfn_v2_6.TabPFNBlock):
    """An :class:`OTabPFNBlockV2` replacing (and an instance of) v2.6's ``TabPFNBlock``."""


#: The replacement class of each post-norm block class (one per host module; exact match).
SUPPORTED_V2_BLOCKS: dict[type[nn.Module], type[OTabPFNBlockV2]] = {
    c.replaced_class: c for c in (OTabPFNBlockForV2, OTabPFNBlockForV2p5, OTabPFNBlockForV2p6)
}
