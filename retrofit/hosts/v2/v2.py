"""The patch tables of TabPFN v2, v2.5 and v2.6: every ``TabPFNBlock`` -> :class:`OTabPFNBlockV2`.

The block and what it changes: :mod:`retrofit.hosts.v2.block`. v2.5 and v2.6
prepend learned thinking rows, which the block treats as present (presence 1);
v2.6's default tau follows its norms' learned weights. The model's class is
swapped for :mod:`retrofit.hosts.v2.model`'s, whose encoder honours
:func:`retrofit.row_presence`.
"""

from __future__ import annotations

from tabpfn.architectures.tabpfn_v2 import TabPFNV2
from tabpfn.architectures.tabpfn_v2_5 import TabPFNV2p5
from tabpfn.architectures.tabpfn_v2_6 import TabPFNV2p6
from torch import nn

from retrofit.hosts.common.base import (
    HostPatcher,
    ReplacedModule,
    Swap,
    register_host_patcher,
    swap_each,
)
from retrofit.hosts.v2.block import OTabPFNBlockV2
from retrofit.hosts.v2.model import OTabPFNV2, OTabPFNV2p5, OTabPFNV2p6
from retrofit.settings import PatchConfig

__all__ = ["V2Patcher", "V2p5Patcher", "V2p6Patcher"]


class V2Patcher(HostPatcher):
    """Swaps every ``TabPFNBlock`` of a ``TabPFNV2`` for an :class:`OTabPFNBlockV2`."""

    host_class = TabPFNV2
    patched_class: type[nn.Module] = OTabPFNV2
    closes_input_rows = True

    def learned_rows(self, model: nn.Module) -> int:
        """Leading learned rows entering block 0 (none in v2)."""
        return 0

    def plan(self, model: nn.Module, config: PatchConfig) -> list[Swap]:
        """One swap per block, each sharing the original's modules."""
        learned = self.learned_rows(model)

        def build(block: nn.Module, path: str) -> nn.Module:
            return OTabPFNBlockV2.from_module(
                block,
                mode=config.mode,
                tau=config.tau,
                support=config.support,
                eps_den=config.eps_den,
                path=path,
                learned_rows=learned,
            )

        return swap_each(model.blocks, "blocks", build)

    def overrides(self, model: nn.Module, config: PatchConfig) -> list[ReplacedModule]:
        """The class swap (the encoder under row presence)."""
        return [
            ReplacedModule(
                path="",
                old_class=type(model).__name__,
                new_class=self.patched_class.retrofit_name,
                shared_parameters=0,
                kind="class",
            )
        ]

    def attach(self, model: nn.Module, config: PatchConfig) -> None:
        """Swaps in the patched class."""
        model.__class__ = self.patched_class

    def detach(self, model: nn.Module) -> None:
        """Swaps the host class back."""
        model.__class__ = self.host_class


class V2p5Patcher(V2Patcher):
    """v2.5: v2's block swap, with the thinking rows as learned rows (presence 1)."""

    host_class = TabPFNV2p5
    patched_class = OTabPFNV2p5

    def learned_rows(self, model: nn.Module) -> int:
        """The thinking rows ``AddThinkingRows`` prepends (``num_thinking_rows``)."""
        return int(model.add_thinking_rows.num_thinking_rows)


class V2p6Patcher(V2p5Patcher):
    """v2.6: as v2.5; its norms are RMSNorms with a learned weight (RMSNorm(0) = 0).

    The carrier entering the between-items attention is ``layernorm_mha1``'s
    output, whose ``||h||^2`` is about ``||gamma||^2`` rather than ``E``, so the
    default tau follows the weights (:data:`retrofit.settings.NORM_WEIGHTED_TAU_HOSTS`).
    """

    host_class = TabPFNV2p6
    patched_class = OTabPFNV2p6

    def carrier_scale_ratio(self, model: nn.Module) -> float:
        """``min over blocks ||gamma||^2 / E``: the default tau is the calibrated one times it."""
        ratios = [
            float(block.layernorm_mha1.weight.detach().double().square().mean())
            for block in model.blocks
        ]
        return min(ratios) if ratios else 1.0


register_host_patcher(V2Patcher())
register_host_patcher(V2p5Patcher())
register_host_patcher(V2p6Patcher())
