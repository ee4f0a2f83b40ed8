"""Patch tables and null-padded ICL stages, one folder per family of TabPFN hosts.

Importing this package registers every shipped host in :mod:`.common.base`
(the contract: :class:`~retrofit.hosts.common.base.HostPatcher` and
:class:`~retrofit.hosts.common.base.ICLStage`, one registry each, one entry per host
class, a second refused).

========================  ==================  ==========================================
host class                table               blocks swapped
========================  ==================  ==========================================
``TabPFNV2``              :mod:`.v2.v2`       ``blocks.i`` (``TabPFNBlock``)
``TabPFNV2p5``            :mod:`.v2.v2`       ``blocks.i``; 64 thinking rows, presence 1
``TabPFNV2p6``            :mod:`.v2.v2`       ``blocks.i``; 64 thinking rows, presence 1
``TabPFNV3``              :mod:`.v3.v3`       ``icl_blocks.i`` (``ICLTransformerBlock``);
                                              classifiers: ``many_class_decoder``
``TabPFNV3p5``            :mod:`.v3.v3_5`     ``icl_blocks.i`` with q/k norms;
                                              ``heads.many_class_decoder``
========================  ==================  ==========================================

Classifiers and regressors of a version are the same host class, so one table
serves both: the v2 family's readout is per test row (nothing to patch), and
v3/v3.5 classifiers read their logits through ``ManyClassDecoder``, swapped
for :class:`~retrofit.hosts.v3.many_class_decoder.OManyClassDecoder`.

Every replacement is an instance of the tabpfn class it replaces, under that
class's name (:mod:`.common.replacement`), so client code that finds tabpfn's
modules by type or by class name finds the patched ones.

The folders:

* :mod:`.common`: what every family uses: the contract and registries
  (:mod:`.common.base`), the classes of swapped modules
  (:mod:`.common.replacement`), KV caches that carry presence
  (:mod:`.common.presence_cache`) and the O-closed row attention
  (:mod:`.common.row_attention`);
* :mod:`.v2`: v2, v2.5 and v2.6: the table (:mod:`.v2.v2`), the O-closed
  block (:mod:`.v2.block`) and the ICL stage (:mod:`.v2.icl_stage`);
* :mod:`.v3`: v3 and v3.5: their tables (:mod:`.v3.v3`, :mod:`.v3.v3_5`) over
  the ICL-block host's table and model overrides (:mod:`.v3.icl_host`), the
  O-closed ICL block (:mod:`.v3.icl_block`), the classifiers' O-closed readout
  (:mod:`.v3.many_class_decoder`) and the ICL stage (:mod:`.v3.icl_stage`).

Adding a host, in one folder of steps (a new family gets its own folder):

1. the O-closed block, if the host's block is new: ``<family>/block.py``
   (as :mod:`.v2.block`; an ICL-block host reuses :mod:`.v3.icl_block`), and for
   each host block class a subclass of it and of the block under
   :func:`~retrofit.hosts.common.replacement.replaces_host_class`;
2. the patch table: ``<family>/<name>.py``, a
   :class:`~retrofit.hosts.common.base.HostPatcher` subclass passed to
   :func:`~retrofit.hosts.common.base.register_host_patcher`;
3. for ragged ``predict_batched``: ``<family>/icl_stage.py``, an
   :class:`~retrofit.hosts.common.base.ICLStage` passed to
   :func:`~retrofit.hosts.common.base.register_icl_stage` (optional; without it the
   host answers through tabpfn's own ``predict_batched``);
4. import the new modules in the family's ``__init__.py`` (a new family: below);
5. its default tau, if 1.0 does not suit it: an entry in
   :data:`retrofit.settings.DEFAULT_TAU_BY_HOST` (measured with
   ``python -m lab calibration``).
"""

from retrofit.hosts import v2, v3
from retrofit.hosts.v2 import icl_stage as v2_icl_stage
from retrofit.hosts.v3 import icl_stage as v3_icl_stage
from retrofit.hosts.v3 import v3_5

__all__ = ["v2", "v2_icl_stage", "v3", "v3_5", "v3_icl_stage"]
