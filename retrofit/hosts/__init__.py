"""Patch tables, one per host architecture class.

Importing this package registers every shipped table with
:func:`retrofit.tables.register_host_patcher`. Add a host as
``retrofit/hosts/<name>.py`` and import it here.

========================  ==================  ==========================================
host class                table               blocks swapped
========================  ==================  ==========================================
``TabPFNV2``              :mod:`.v2`          ``blocks.i`` (``TabPFNBlock``)
``TabPFNV2p5``            :mod:`.v2`          ``blocks.i``; 64 thinking rows, presence 1
``TabPFNV2p6``            :mod:`.v2`          ``blocks.i``; 64 thinking rows, presence 1
``TabPFNV3``              :mod:`.v3`          ``icl_blocks.i`` (``ICLTransformerBlock``)
``TabPFNV3p5``            :mod:`.v3_5`        ``icl_blocks.i`` with q/k norms
========================  ==================  ==========================================
"""

from retrofit.hosts import v2, v2_icl_stage, v3, v3_5, v3_icl_stage

__all__ = ["v2", "v2_icl_stage", "v3", "v3_5", "v3_icl_stage"]
