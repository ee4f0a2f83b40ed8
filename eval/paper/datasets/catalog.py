"""Every offline dataset by name, and the offline suite file that verifies it.

Dataset names are unique across suites, so a name alone finds its spec and
the suite file (``offline18`` or ``offline_cls6``) that records its SHA-256.
"""

from __future__ import annotations

from eval.paper.datasets.classification import CLASSIFICATION_SPECS, OFFLINE_CLS6_DATASETS
from eval.paper.datasets.specs import OFFLINE18_DATASETS, SPECS, DatasetSpec

__all__ = ["ALL_SPECS", "OFFLINE_SUITE_OF", "SUITE_DATASETS", "spec_for"]

SUITE_DATASETS: dict[str, tuple[str, ...]] = {
    "offline18": OFFLINE18_DATASETS,
    "openml18": OFFLINE18_DATASETS,
    "offline_cls6": OFFLINE_CLS6_DATASETS,
}
"""The datasets of each suite, in suite order."""

ALL_SPECS: dict[str, DatasetSpec] = {**SPECS, **CLASSIFICATION_SPECS}
"""Every dataset's spec by short name."""
assert len(ALL_SPECS) == len(SPECS) + len(CLASSIFICATION_SPECS), "dataset names must be unique"

OFFLINE_SUITE_OF: dict[str, str] = {
    **dict.fromkeys(OFFLINE18_DATASETS, "offline18"),
    **dict.fromkeys(OFFLINE_CLS6_DATASETS, "offline_cls6"),
}
"""The offline suite whose file verifies each dataset's copy."""


def spec_for(name: str) -> DatasetSpec:
    """The specification of a dataset; ValueError naming the valid ones if unknown."""
    try:
        return ALL_SPECS[name]
    except KeyError:
        raise ValueError(f"unknown dataset {name!r}; valid names: {', '.join(ALL_SPECS)}") from None
