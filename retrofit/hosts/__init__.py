"""Patch tables, one per host architecture class.

Importing this package registers every shipped table with
:func:`retrofit.patcher.register_host_patcher`. Add a host as
``retrofit/hosts/<name>.py`` and import it here.
"""

from retrofit.hosts import v2, v2_icl_stage, v3, v3_icl_stage

__all__ = ["v2", "v2_icl_stage", "v3", "v3_icl_stage"]
