"""Patch tables and null-padded ICL stages, one family of TabPFN hosts per module.

Importing this package registers every shipped host in :mod:`retrofit.hosts.base`
(the contract: :class:`~retrofit.hosts.base.HostPatcher` and
:class:`~retrofit.hosts.base.ICLStage`, one registry each, one entry per host
class, a second refused).

========================  ==================  ==========================================
host class                table               blocks swapped
========================  ==================  ==========================================
``TabPFNV2``              :mod:`.v2`          ``blocks.i`` (``TabPFNBlock``)
``TabPFNV2p5``            :mod:`.v2`          ``blocks.i``; 64 thinking rows, presence 1
``TabPFNV2p6``            :mod:`.v2`          ``blocks.i``; 64 thinking rows, presence 1
``TabPFNV3``              :mod:`.v3`          ``icl_blocks.i`` (``ICLTransformerBlock``);
                                              classifiers: ``many_class_decoder``
``TabPFNV3p5``            :mod:`.v3_5`        ``icl_blocks.i`` with q/k norms;
                                              ``heads.many_class_decoder``
========================  ==================  ==========================================

Classifiers and regressors of a version are the same host class, so one table
serves both: the v2 family's readout is per test row (nothing to patch), and
v3/v3.5 classifiers read their logits through ``ManyClassDecoder``, swapped
for :class:`~retrofit.hosts.many_class_decoder.OManyClassDecoder`.

Every replacement is an instance of the tabpfn class it replaces, under that
class's name (:mod:`.replacement`), so client code that finds tabpfn's modules
by type or by class name finds the patched ones.

Shared pieces: :mod:`.replacement` (the classes of swapped modules),
:mod:`.icl_block` (the O-closed ICL block of v3 and v3.5),
:mod:`.many_class_decoder` (their O-closed classifier readout),
:mod:`.icl_host` (the table and model overrides of an ICL-block host),
:mod:`.presence_cache` (KV caches that carry presence, for v2 and v3 alike).

Adding a host, in one folder of steps:

1. the O-closed block, if the host's block is new: ``<name>_block.py``
   (as :mod:`.v2_block`; an ICL-block host reuses :mod:`.icl_block`), and for
   each host block class a subclass of it and of the block under
   :func:`~retrofit.hosts.replacement.replaces_host_class`;
2. the patch table: ``<name>.py``, a :class:`~retrofit.hosts.base.HostPatcher`
   subclass passed to :func:`~retrofit.hosts.base.register_host_patcher`;
3. for ragged ``predict_batched``: ``<name>_icl_stage.py``, an
   :class:`~retrofit.hosts.base.ICLStage` passed to
   :func:`~retrofit.hosts.base.register_icl_stage` (optional; without it the
   host answers through tabpfn's own ``predict_batched``);
4. import the new modules below;
5. its default tau, if 1.0 does not suit it: an entry in
   :data:`retrofit.settings.DEFAULT_TAU_BY_HOST` (measured with
   ``python -m eval.calibration``).
"""

from retrofit.hosts import v2, v2_icl_stage, v3, v3_5, v3_icl_stage

__all__ = ["v2", "v2_icl_stage", "v3", "v3_5", "v3_icl_stage"]
