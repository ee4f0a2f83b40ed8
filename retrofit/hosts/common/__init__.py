"""What every host family shares: the contract, replacement classes, presence caches, row attention.

:mod:`.base` (the :class:`~retrofit.hosts.common.base.HostPatcher` and
:class:`~retrofit.hosts.common.base.ICLStage` contract and their registries),
:mod:`.replacement` (the classes of swapped modules), :mod:`.presence_cache`
(KV caches that carry presence, for v2 and v3 alike) and :mod:`.row_attention`
(the O-closed attention between rows).
"""
