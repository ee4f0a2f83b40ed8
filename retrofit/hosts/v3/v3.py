"""Patch table of TabPFN v3 (``tabpfn.architectures.tabpfn_v3.TabPFNV3``, tabpfn 9.2).

Swaps every ``ICLTransformerBlock`` in ``icl_blocks`` for an
:class:`~retrofit.hosts.v3.icl_block.OICLBlock` and the model's class for
:class:`OTabPFNV3`, whose overrides (:class:`~retrofit.hosts.v3.icl_host.OICLModelMixin`,
shared with v3.5) gate the ICL target embedding ``icl_y_encoder`` in Full-O and
return KV caches as :class:`~retrofit.hosts.common.presence_cache.PresenceTabPFNV3Cache`.
"""

from __future__ import annotations

from tabpfn.architectures.tabpfn_v3 import TabPFNV3

from retrofit.hosts.common.base import register_host_patcher
from retrofit.hosts.common.model_class import keeps_host_name
from retrofit.hosts.common.presence_cache import PresenceTabPFNV3Cache
from retrofit.hosts.v3.icl_host import ICLHostPatcher, OICLModelMixin

__all__ = ["OTabPFNV3", "V3Patcher"]


@keeps_host_name
class OTabPFNV3(OICLModelMixin, TabPFNV3):
    """A patched ``TabPFNV3``; only ever created by :func:`retrofit.patch`."""

    presence_cache_class = PresenceTabPFNV3Cache
    decoder_path = "many_class_decoder"


class V3Patcher(ICLHostPatcher):
    """Plans the v3 swaps: ``icl_blocks.i`` -> ``OICLBlock``."""

    host_class = TabPFNV3
    patched_class = OTabPFNV3
    injection_modules = ("icl_y_encoder",)


register_host_patcher(V3Patcher())
