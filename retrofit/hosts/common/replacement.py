"""Replacements are instances of what they replace: the classes of swapped modules.

Every module a patch table swaps into a host is built by a retrofit class (its
*family*: :class:`~retrofit.hosts.v3.icl_block.OICLBlock`,
:class:`~retrofit.hosts.v2.block.OTabPFNBlockV2`,
:class:`~retrofit.hosts.v3.many_class_decoder.OManyClassDecoder`) and is an
instance of one subclass per tabpfn class it replaces, declared as
``class OFamilyForHost(OFamily, HostClass)`` under :func:`replaces_host_class`.
So client code that finds tabpfn's modules by type (``isinstance(m,
tabpfn_v3.ManyClassDecoder)``) or by class name (``type(m).__name__ ==
"ManyClassDecoder"``) finds a patched module where it found the original:

* ``isinstance(replacement, HostClass)`` holds, and ``type(replacement).__name__``
  is ``HostClass.__name__`` (what ``repr(model)`` prints too);
* ``__qualname__`` and ``__module__`` are the retrofit's
  (``retrofit.hosts.v3.icl_block.OICLBlockForV3``), so pickling finds the class
  and an error message can tell a replacement from the original;
* ``isinstance(replacement, OFamily)`` tells a patched module apart, and
  :func:`replacement_name` is the family's name, which patch reports record.

A replacement never runs the host class's ``__init__`` (that would build new
weights): :func:`adopt_host_modules` makes it hold the original's submodules,
parameters, buffers and plain attributes by reference, in the original's
order, so ``state_dict`` keys are the host's and the host's own helper methods
find what they read. The host methods a family does not override are listed
and pinned in ``tests/retrofit/hosts/test_host_overrides.py``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar

from torch import nn

from retrofit.errors import UnsupportedArchitectureError

__all__ = [
    "adopt_host_modules",
    "class_path",
    "replacement_class_for",
    "replacement_name",
    "replaces_host_class",
]

ReplacementT = TypeVar("ReplacementT", bound=type[nn.Module])


def replaces_host_class(cls: ReplacementT) -> ReplacementT:
    """Class decorator for ``class OFamilyForHost(OFamily, HostClass)``.

    Records ``HostClass`` as ``replaced_class`` and the family's name as
    ``retrofit_name``, and gives the class ``HostClass.__name__`` (its
    ``__qualname__`` stays its own, so pickling finds it in its module).

    Raises:
        TypeError: If ``cls`` does not derive from exactly a family and a host class.
    """
    if len(cls.__bases__) != 2:
        raise TypeError(f"{cls.__qualname__} must derive from a retrofit family and a host class")
    family, host = cls.__bases__
    cls.replaced_class = host
    cls.retrofit_name = family.__name__
    cls.__name__ = host.__name__
    return cls


def class_path(cls: type) -> str:
    """``module.qualname`` of ``cls``: tells a replacement from the class it replaces."""
    return f"{cls.__module__}.{cls.__qualname__}"


def replacement_name(module: nn.Module) -> str:
    """The retrofit family name of a replacement (``"OICLBlock"``), else its class name."""
    return getattr(type(module), "retrofit_name", type(module).__name__)


def replacement_class_for(
    original: nn.Module, supported: Mapping[type[nn.Module], ReplacementT], path: str
) -> ReplacementT:
    """The replacement class for ``original``'s exact class in ``supported``.

    Raises:
        UnsupportedArchitectureError: If ``original``'s class is not a key of
            ``supported``; a retrofit replacement (an instance of a key, not of
            exactly one) is named as such.
    """
    found = supported.get(type(original))
    if found is not None:
        return found
    if hasattr(type(original), "retrofit_name"):
        raise UnsupportedArchitectureError(
            f"{path}: {class_path(type(original))} is a retrofit replacement already; "
            "unpatch the model before patching it again"
        )
    names = ", ".join(class_path(c) for c in supported)
    raise UnsupportedArchitectureError(
        f"{path}: expected one of {names}, got {class_path(type(original))}"
    )


def adopt_host_modules(replacement: nn.Module, original: nn.Module, path: str) -> None:
    """Makes ``replacement`` hold ``original``'s modules and attributes by reference.

    Submodules, direct parameters and buffers are registered under their
    names in ``original``'s order (so ``state_dict`` keys and order are the
    host's, and no tensor is copied); plain attributes (the host's sizes,
    ``training``) are copied. Called by a family's ``__init__`` right after
    ``nn.Module.__init__``.

    Raises:
        UnsupportedArchitectureError: If ``original`` is not exactly the class
            ``replacement``'s class replaces (a retrofit replacement is refused
            as such: it is an instance of that class, not the class itself).
        TypeError: If ``replacement`` is of a family class itself.
    """
    expected = getattr(type(replacement), "replaced_class", None)
    if expected is None:
        raise TypeError(
            f"{class_path(type(replacement))} is a retrofit family: build a replacement "
            "with its from_module"
        )
    if type(original) is not expected:
        replacement_class_for(original, {expected: type(replacement)}, path)  # raises
    # torch's own registries, read whole: named_children() and friends skip None
    # entries and a module registered under two names.
    for name, module in original._modules.items():
        replacement.add_module(name, module)
    for name, parameter in original._parameters.items():
        replacement.register_parameter(name, parameter)
    non_persistent = original._non_persistent_buffers_set
    for name, buffer in original._buffers.items():
        replacement.register_buffer(name, buffer, persistent=name not in non_persistent)
    for name, value in vars(original).items():
        if not name.startswith("_"):
            setattr(replacement, name, value)
