"""Loading a suite dataset by name from either source, verified against its suite file."""

from __future__ import annotations

from pathlib import Path

from eval.extras import require_extra
from eval.paper.datasets.canonical import Dataset
from eval.paper.datasets.catalog import spec_for
from eval.paper.datasets.offline import load_offline

__all__ = ["load_dataset"]

_SOURCES = ("offline", "openml")


def load_dataset(name: str, source: str = "offline", *, suites_dir: Path | None = None) -> Dataset:
    """Load one suite dataset in canonical form, verified against its suite file.

    Args:
        name: Short name, one of :data:`OFFLINE18_DATASETS` or
            :data:`OFFLINE_CLS6_DATASETS`.
        source: ``"offline"`` (package copies, no network; verified against
            the dataset's offline suite, ``offline18`` or ``offline_cls6``)
            or ``"openml"`` (OpenML client and cache; suite ``openml18``).
        suites_dir: Directory of the suite files; default :data:`SUITES_DIR`.

    Returns:
        The verified :class:`Dataset` (cached per arguments; arrays read-only).

    Raises:
        ValueError: If ``name`` or ``source`` is unknown.
        DatasetUnavailableError: If the data cannot be obtained (OpenML server
            unreachable and not cached, package file missing).
        MissingExtraError: If the source's packages (the ``eval`` extra) are
            not installed.
        DatasetIntegrityError: If shape, SHA-256 or columns differ from the
            suite file.
    """
    spec = spec_for(name)
    if source not in _SOURCES:
        raise ValueError(f"unknown source {source!r}; valid sources: {', '.join(_SOURCES)}")
    resolved = str(Path(suites_dir).resolve()) if suites_dir is not None else None
    if source == "offline":
        return load_offline(name, resolved)
    if spec.task != "regression":
        raise ValueError(f"{name}: only the regression datasets have an OpenML suite here")
    # Imported here: openml takes about a second to import, and the offline
    # suite (every command's default) must not pay for it.
    require_extra("eval", ("openml", "requests"), needed_by=f"{name} from OpenML")
    from eval.paper.datasets.openml_source import load_openml

    return load_openml(name, resolved)
