"""Patch table of TabPFN v3 (``tabpfn.architectures.tabpfn_v3.TabPFNV3``, tabpfn 9.2).

Swaps every ``ICLTransformerBlock`` in ``icl_blocks`` for an :class:`OICLBlock`
and swaps the model's class for :class:`OTabPFNV3`, a subclass whose method
overrides call into tabpfn for two model-level parts of the retrofit:

* OInject of the ICL target embedding (``mode="full-o"``). ``TabPFNV3.forward``
  adds ``_embed_icl_y(y)`` to the train rows inline; the override of
  ``_stages_0_to_2`` reads the presence of the carriers it returns and the
  override of ``_embed_icl_y`` gates the embedding by it, so
  ``h + p(h) * g(y)`` is what the host adds. A null train row stays null.
* Presence-carrying KV caches: a cache built by ``forward(...,
  return_kv_cache=True)`` is returned as a
  :class:`~retrofit.hosts.v3_cache.PresenceTabPFNV3Cache`.

A class swap (rather than instance attributes) keeps ``deepcopy``, pickling
and ``.to()`` working; :func:`retrofit.unpatch` swaps the class back.
"""

from __future__ import annotations

from typing import Any

import torch
from tabpfn.architectures.tabpfn_v3 import ICLTransformerBlock, TabPFNV3
from torch import nn

from patches import presence
from retrofit.errors import UnsupportedArchitectureError
from retrofit.hosts.v3_block import OICLBlock
from retrofit.hosts.v3_cache import PresenceTabPFNV3Cache
from retrofit.patcher import (
    HostPatcher,
    ReplacedModule,
    Swap,
    patch_config_of,
    register_host_patcher,
)
from retrofit.settings import PatchConfig

__all__ = ["OTabPFNV3", "V3Patcher"]

# Presence of the rows leaving stage 2, read by _embed_icl_y in the same
# forward and dropped when it returns (one forward per model at a time:
# tabpfn gives every device its own model object).
_CARRIER_PRESENCE = "_retrofit_stage2_presence_BR"


class OTabPFNV3(TabPFNV3):
    """A patched ``TabPFNV3``; only ever created by :func:`retrofit.patch`."""

    def forward(self, x: Any, y: Any, *, task_type: str | None = None, **kwargs: Any) -> Any:
        """``TabPFNV3.forward``, returning a presence-carrying KV cache when one is built."""
        try:
            result = super().forward(x, y, task_type=task_type, **kwargs)
        finally:
            self.__dict__.pop(_CARRIER_PRESENCE, None)
        if kwargs.get("return_kv_cache"):
            output, cache = result
            if cache is not None and not isinstance(cache, PresenceTabPFNV3Cache):
                cache = PresenceTabPFNV3Cache.from_cache(cache)
            return output, cache
        return result

    def _stages_0_to_2(self, x_RiBC: torch.Tensor, y: torch.Tensor, **kwargs: Any) -> Any:
        out = super()._stages_0_to_2(x_RiBC, y, **kwargs)
        config = patch_config_of(self)
        if config.mode == "full-o":
            h_BRiD = out[0].flatten(-2)
            if torch.is_grad_enabled() and h_BRiD.requires_grad:
                # forward() then adds the target embedding into these carriers in
                # place, which autograd refuses for a tensor presence saved.
                h_BRiD = h_BRiD.clone()
            self.__dict__[_CARRIER_PRESENCE] = presence(h_BRiD, config.tau)
        return out

    def _embed_icl_y(self, y_BN: torch.Tensor) -> torch.Tensor:
        emb_BND = super()._embed_icl_y(y_BN)
        if patch_config_of(self).mode != "full-o":
            return emb_BND
        p_BR = self.__dict__.get(_CARRIER_PRESENCE)
        if p_BR is None:
            raise RuntimeError(
                "icl_y_encoder: OInject needs the train carriers' presence, but "
                "_embed_icl_y was called outside TabPFNV3.forward"
            )
        p_BN = p_BR[:, : y_BN.shape[1]]
        # OInject: the host adds h + g(y); gating g by p(h) makes it h + p(h) g(y).
        return emb_BND * p_BN.unsqueeze(-1).to(emb_BND.dtype)


class V3Patcher(HostPatcher):
    """Plans the v3 swaps: ``icl_blocks.i`` -> :class:`OICLBlock`."""

    host_class = TabPFNV3

    def plan(self, model: nn.Module, config: PatchConfig) -> list[Swap]:
        """One :class:`OICLBlock` per ``ICLTransformerBlock``; nothing is modified.

        Raises:
            UnsupportedArchitectureError: If an ICL block is not exactly an
                ``ICLTransformerBlock`` (a changed host).
        """
        swaps = []
        for i, block in enumerate(getattr(model, "icl_blocks", [])):
            path = f"icl_blocks.{i}"
            if type(block) is not ICLTransformerBlock:
                raise UnsupportedArchitectureError(
                    f"{path}: expected ICLTransformerBlock, got {type(block).__name__}"
                )
            replacement = OICLBlock.from_module(
                block,
                mode=config.mode,
                tau=config.tau,
                support=config.support,
                eps_den=config.eps_den,
                path=path,
            )
            swaps.append(Swap(path=path, original=block, replacement=replacement))
        return swaps

    def overrides(self, model: nn.Module, config: PatchConfig) -> list[ReplacedModule]:
        """The class swap, and in Full-O the gated target injection."""
        entries = [
            ReplacedModule(
                path="",
                old_class=type(model).__name__,
                new_class=OTabPFNV3.__name__,
                shared_parameters=0,
                kind="class",
            )
        ]
        if config.mode == "full-o":
            entries.append(
                ReplacedModule(
                    path="icl_y_encoder",
                    old_class=type(model.icl_y_encoder).__name__,
                    new_class="OInject",
                    shared_parameters=sum(p.numel() for p in model.icl_y_encoder.parameters()),
                    kind="override",
                )
            )
        return entries

    def frozen_parameters(self, model: nn.Module, config: PatchConfig) -> list[nn.Parameter]:
        """The target embedding's parameters in Full-O."""
        return list(model.icl_y_encoder.parameters()) if config.mode == "full-o" else []

    def attach(self, model: nn.Module, config: PatchConfig) -> None:
        """Swaps in :class:`OTabPFNV3`."""
        model.__class__ = OTabPFNV3

    def detach(self, model: nn.Module) -> None:
        """Swaps ``TabPFNV3`` back and drops any transient state."""
        model.__class__ = TabPFNV3
        model.__dict__.pop(_CARRIER_PRESENCE, None)


register_host_patcher(V3Patcher())
