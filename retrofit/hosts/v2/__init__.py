"""The v2 family (``TabPFNV2``, ``TabPFNV2p5``, ``TabPFNV2p6``): one table, block and ICL stage.

:mod:`.v2` (the patch table of all three), :mod:`.block` (the O-closed
``TabPFNBlock``), :mod:`.model` (the patched model classes: the encoder under
row presence) and :mod:`.icl_stage` (their null-padded ICL stages).
Importing the package registers the table and the stages.
"""

from retrofit.hosts.v2 import icl_stage, v2

__all__ = ["icl_stage", "v2"]
