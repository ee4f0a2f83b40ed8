"""What the patched model classes share: the host's class name, tabpfn's forward keywords.

A host whose patch overrides model-level methods (v3 and v3.5: the ICL target
injection and the KV cache; every host: :mod:`retrofit.hosts.common.row_presence`)
gets its class swapped for ``class OHost(OMixin, Host)``, decorated with
:func:`keeps_host_name`; :func:`retrofit.unpatch` swaps the class back.
"""

from __future__ import annotations

from typing import Any

from torch import nn

__all__ = ["NOT_GIVEN", "keeps_host_name"]

#: ``task_type`` not given to ``forward`` (distinct from None, which some hosts accept).
#: tabpfn's inference engine passes ``task_type`` only to a ``forward`` whose
#: signature names it, so an overriding ``forward`` names it with this default and
#: passes it on only when given.
NOT_GIVEN: Any = object()


def keeps_host_name(cls: type[nn.Module]) -> type[nn.Module]:
    """Class decorator for ``class OTabPFNV3(OICLModelMixin, TabPFNV3)``: the host's name.

    A patched model is found by class name where the host was (``repr`` and
    client code dispatching on ``type(model).__name__`` see ``"TabPFNV3"``), as
    every swapped module is (:mod:`retrofit.hosts.common.replacement`); ``__qualname__``
    stays the retrofit's, so pickling finds the class, and ``retrofit_name``
    (what patch reports record) is the retrofit class's own name.
    """
    host = cls.__bases__[-1]
    cls.retrofit_name = cls.__name__
    cls.__name__ = host.__name__
    return cls
