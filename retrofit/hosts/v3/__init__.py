"""The v3 family (``TabPFNV3``, ``TabPFNV3p5``): ICL-block hosts and their classifier readout.

:mod:`.v3` and :mod:`.v3_5` (the patch tables), :mod:`.icl_host` (the table
and model overrides an ICL-block host shares), :mod:`.icl_block` (the O-closed
ICL block), :mod:`.many_class_decoder` (the O-closed ``ManyClassDecoder`` of
their classifiers) and :mod:`.icl_stage` (their null-padded ICL stages).
Importing the package registers the tables and the stages.
"""

from retrofit.hosts.v3 import icl_stage, v3, v3_5

__all__ = ["icl_stage", "v3", "v3_5"]
