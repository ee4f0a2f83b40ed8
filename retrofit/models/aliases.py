"""The names ``model_path`` and ``--model`` take besides files: the one alias table.

:data:`VERSION_ALIASES` maps each version alias to the tabpfn architecture class
its published checkpoints build; :mod:`retrofit.models.weights` resolves the
aliases to tabpfn's files, and every list of them shown to a user (an error
message, a command's ``--help``) is written from this table by
:func:`alias_list`, so no list can leave one out. This module imports nothing
but the settings, so the console script's ``--help`` can use it without
importing tabpfn.
"""

from __future__ import annotations

from collections.abc import Mapping

from retrofit.settings import DEFAULT_TAU_BY_HOST, NORM_WEIGHTED_TAU_HOSTS

__all__ = [
    "AUTO",
    "EMBEDDED",
    "VERSION_ALIASES",
    "alias_list",
    "default_tau_text",
]

#: Each version alias (tabpfn's ``ModelVersion`` value) and the tabpfn class its
#: published regressor and classifier checkpoints build.
VERSION_ALIASES: Mapping[str, str] = {
    "v2": "TabPFNV2",
    "v2.5": "TabPFNV2p5",
    "v2.6": "TabPFNV2p6",
    "v3": "TabPFNV3",
    "v3.5": "TabPFNV3p5",
}
#: tabpfn's own default version (what ``TabPFNRegressor()`` loads).
AUTO = "auto"
#: The host shipped inside this package.
EMBEDDED = "embedded"


def _joined(names: list[str], conjunction: str) -> str:
    if len(names) < 2:
        return "".join(names)
    return f"{', '.join(names[:-1])} {conjunction} {names[-1]}"


def alias_list(*, auto: bool = False, embedded: bool = False, conjunction: str = "or") -> str:
    """The version aliases as a user reads them: ``'v2', 'v2.5', 'v2.6', 'v3' or 'v3.5'``.

    Args:
        auto: Also name ``'auto'`` (tabpfn's default version), first.
        embedded: Also name ``'embedded'`` (the shipped host), first.
        conjunction: The word before the last name (``"or"``, ``"and"``).
    """
    names = [EMBEDDED] if embedded else []
    names += [AUTO] if auto else []
    names += list(VERSION_ALIASES)
    return _joined([repr(name) for name in names], conjunction)


def default_tau_text() -> str:
    """Each alias's default ``tau`` in words, from ``DEFAULT_TAU_BY_HOST``.

    For example ``0.1 for v2, v2.5 and v2.6 (v2.6's times its norm-weight
    scale), 1.0 for v3 and v3.5``.
    """
    by_tau: dict[float, list[str]] = {}
    for alias, host in VERSION_ALIASES.items():
        by_tau.setdefault(DEFAULT_TAU_BY_HOST[host], []).append(alias)
    scaled = [a for a, host in VERSION_ALIASES.items() if host in NORM_WEIGHTED_TAU_HOSTS]
    parts = []
    for tau, aliases in by_tau.items():
        note = "".join(
            f" ({alias}'s times its norm-weight scale)" for alias in scaled if alias in aliases
        )
        parts.append(f"{tau} for {_joined(aliases, 'and')}{note}")
    return ", ".join(parts)
