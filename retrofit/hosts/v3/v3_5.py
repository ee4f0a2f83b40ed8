"""Patch table of TabPFN v3.5 (``tabpfn.architectures.tabpfn_v3_5.TabPFNV3p5``, tabpfn 9.2).

tabpfn's default model (``model_path="auto"``). Its ICL stage is v3's with
three differences, each handled by the shared pieces rather than a copy:

* ``ICLAttention`` normalises queries and keys per head (RMSNorm) after the
  projections: :class:`~retrofit.hosts.v3.icl_block.OICLBlock` applies them at the
  same points for this block class (identity settings reproduce the host).
* The ICL target embedding is ``icl_y_layernorm(icl_y_encoder[task](y))``, an
  affine LayerNorm whose bias revives a null train row: in Full-O the whole of
  ``_embed_icl_y`` is gated by the train carriers' presence
  (:class:`~retrofit.hosts.v3.icl_host.OICLModelMixin`, which also passes v3.5's
  ``task_type`` through).
* ``TabPFNV3p5Cache.to``/``quantize``/``concatenate`` rebuild the cache as the
  host class: caches are returned as
  :class:`~retrofit.hosts.common.presence_cache.PresenceTabPFNV3p5Cache`.

``enable_icl_bf16`` casts ``icl_blocks`` to bfloat16 after patching as before:
the swapped blocks hold the host's modules, so they are cast with them, and
presence is computed in float32.
"""

from __future__ import annotations

from tabpfn.architectures.tabpfn_v3_5 import TabPFNV3p5

from retrofit.hosts.common.base import register_host_patcher
from retrofit.hosts.common.model_class import keeps_host_name
from retrofit.hosts.common.presence_cache import PresenceTabPFNV3p5Cache
from retrofit.hosts.v3.icl_host import ICLHostPatcher, OICLModelMixin

__all__ = ["OTabPFNV3p5", "V3p5Patcher"]


@keeps_host_name
class OTabPFNV3p5(OICLModelMixin, TabPFNV3p5):
    """A patched ``TabPFNV3p5``; only ever created by :func:`retrofit.patch`."""

    presence_cache_class = PresenceTabPFNV3p5Cache
    decoder_path = "heads.many_class_decoder"
    ranks_cells = True


class V3p5Patcher(ICLHostPatcher):
    """Plans the v3.5 swaps: ``icl_blocks.i`` -> ``OICLBlock`` (with q/k norms)."""

    host_class = TabPFNV3p5
    patched_class = OTabPFNV3p5
    injection_modules = ("icl_y_encoder", "icl_y_layernorm")


register_host_patcher(V3p5Patcher())
