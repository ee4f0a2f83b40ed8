"""O-closed operators: the zero carrier as a true NULL state.

Public API: :func:`presence`, :func:`oattention` (fast, exact),
:func:`oattention_reference` (float64 oracle), :func:`support_size`, and the
modules :class:`OAttention`, :class:`OFFN`, :class:`ONorm`, :class:`OInject`,
:class:`OStandardize`, :class:`OTransformerBlock`.
"""

from patches.modules import (
    OFFN,
    OAttention,
    OInject,
    ONorm,
    OStandardize,
    OTransformerBlock,
    support_size,
)
from patches.oattention import oattention, oattention_direct, oattention_reference
from patches.presence import presence

__all__ = [
    "OFFN",
    "OAttention",
    "OInject",
    "ONorm",
    "OStandardize",
    "OTransformerBlock",
    "oattention",
    "oattention_direct",
    "oattention_reference",
    "presence",
    "support_size",
]
