"""Installed versions of the packages that can change a number."""

from __future__ import annotations

from collections.abc import Iterable
from importlib import metadata

__all__ = ["NUMERIC_PACKAGES", "package_versions"]

#: The packages whose versions every stored result records.
NUMERIC_PACKAGES: tuple[str, ...] = (
    "tabpfn-retrofit",
    "tabpfn",
    "torch",
    "scikit-learn",
    "numpy",
    "safetensors",
)


def package_versions(names: Iterable[str] = NUMERIC_PACKAGES) -> dict[str, str]:
    """``{distribution name: version}``; ``"not installed"`` for an absent one."""
    versions = {}
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions
