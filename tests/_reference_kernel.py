"""Run the patched blocks on the float64 reference OAttention kernel.

``reference_kernel()`` swaps :func:`patches.oattention` for
:func:`patches.oattention_reference` in the two block modules that call it
(the ICL block of v3 and v3.5, the v2-family block), so every receiver row is
computed over exactly its live sources (``tests/_exactness.py``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import retrofit.hosts.v2 as hosts_v2
import retrofit.hosts.v3_block as v3_block
from patches import oattention_reference

__all__ = ["reference_kernel"]


@contextlib.contextmanager
def reference_kernel() -> Iterator[None]:
    """The patched v2-family, v3 and v3.5 blocks evaluate OAttention by the reference oracle."""
    modules = (v3_block, hosts_v2)
    fast = [m.oattention for m in modules]

    def reference(*args, validate=True, **kwargs):
        return oattention_reference(*args, **kwargs)

    for module in modules:
        module.oattention = reference
    try:
        yield
    finally:
        for module, kernel in zip(modules, fast, strict=True):
            module.oattention = kernel
