r"""The canonical form of a dataset and its SHA-256.

Every dataset is turned into the same canonical form: ``X`` float64 of shape
``(n_rows, n_features)`` in OpenML's column order with categorical columns
ordinal-encoded by a fixed, recorded category list, and ``y`` float64 of shape
``(n_rows,)``. Its digest (:func:`canonical_sha256`) covers a header naming
the shape, then the row-major little-endian float64 bytes of ``X`` and ``y``.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from eval.errors import DatasetIntegrityError
from eval.paper.datasets.specs import DatasetSpec

__all__ = [
    "HASH_VERSION",
    "Dataset",
    "canonical_sha256",
    "file_sha256",
    "freeze",
    "to_canonical",
]

HASH_VERSION = "tabpfn-retrofit/dataset-v1"
"""The first word of the digest's header; changes when the canonical form does."""


@dataclass(frozen=True, eq=False)
class Dataset:
    """A regression dataset in canonical form.

    Arrays are read-only; equality is identity (arrays are not comparable by
    ``==``), compare :attr:`sha256` instead.

    Attributes:
        name: Short name, one of :data:`OFFLINE18_DATASETS` or :data:`OFFLINE_CLS6_DATASETS`.
        openml_id: OpenML dataset id (OpenML-CTR23 version for regression);
            ``None`` where no OpenML dataset holds exactly these rows.
        X: Features, float64 ``(n_rows, n_features)``; categorical columns are
            ordinal codes into :attr:`categories`.
        y: Target, float64 ``(n_rows,)``; for classification the code of
            each row's label in :attr:`classes` (``0.0 .. K-1``).
        feature_names: Column names of ``X`` (OpenML order).
        target: Name of the target column.
        categorical_features: Indices of the categorical columns of ``X``.
        source: Where the data came from (package, version and file, or
            OpenML id and cache).
        sha256: :func:`canonical_sha256` of ``X`` and ``y``.
        categories: Category labels of each categorical column; code ``k`` in
            column ``j`` stands for ``categories[j][k]``.
        classes: A classification target's labels (code ``k`` stands for
            ``classes[k]``); empty for regression.
    """

    name: str
    openml_id: int | None
    X: np.ndarray
    y: np.ndarray
    feature_names: list[str]
    target: str
    categorical_features: list[int]
    source: str
    sha256: str
    categories: dict[int, list[str]] = field(default_factory=dict)
    classes: list[str] = field(default_factory=list)

    @property
    def shape(self) -> tuple[int, int]:
        """``(n_rows, n_features)`` of :attr:`X`."""
        return (int(self.X.shape[0]), int(self.X.shape[1]))


def canonical_sha256(X: np.ndarray, y: np.ndarray) -> str:
    r"""SHA-256 of the canonical serialization of ``X`` and ``y``.

    Digest of the header ``"tabpfn-retrofit/dataset-v1 X=<n>x<d> y=<n> <f8 C\\n"``
    followed by the row-major little-endian float64 bytes of ``X`` and then of
    ``y``.

    Args:
        X: 2-D feature array (cast to float64).
        y: 1-D target array (cast to float64), one value per row of ``X``.

    Returns:
        The hex digest.

    Raises:
        ValueError: If the shapes are not ``(n, d)`` and ``(n,)``.
    """
    X64 = np.ascontiguousarray(X, dtype="<f8")
    y64 = np.ascontiguousarray(y, dtype="<f8")
    if X64.ndim != 2 or y64.ndim != 1 or X64.shape[0] != y64.shape[0]:
        raise ValueError(
            f"expected X of shape (n, d) and y of shape (n,), got {X64.shape} and {y64.shape}"
        )
    n, d = X64.shape
    digest = hashlib.sha256(f"{HASH_VERSION} X={n}x{d} y={n} <f8 C\n".encode())
    digest.update(X64.tobytes())
    digest.update(y64.tobytes())
    return digest.hexdigest()


def file_sha256(path: Path) -> str:
    """SHA-256 of a file's bytes."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def to_canonical(
    frame: pd.DataFrame, spec: DatasetSpec, target: str, where: str
) -> tuple[np.ndarray, np.ndarray, list[int], dict[int, list[str]]]:
    """Ordinal-encode categoricals and return float64 ``X``, ``y``.

    ``frame`` holds the features in ``spec.feature_names`` order and the
    column ``target``.
    """
    features = frame.drop(columns=[target])
    columns: list[np.ndarray] = []
    categorical: list[int] = []
    categories: dict[int, list[str]] = {}
    for j, name in enumerate(spec.feature_names):
        col = features.iloc[:, j]
        if name in spec.categories:
            cats = list(spec.categories[name])
            values = col.astype("string")
            unknown = sorted(set(values.dropna()) - set(cats))
            if unknown or values.isna().any():
                raise DatasetIntegrityError(
                    f"{spec.name}: column {name!r} of {where} has values outside "
                    f"{cats} (unknown: {unknown}, missing: {int(values.isna().sum())})"
                )
            codes = pd.Categorical(values, categories=cats).codes.astype(np.float64)
            columns.append(codes)
            categorical.append(j)
            categories[j] = cats
        else:
            columns.append(_to_float64(col, f"{spec.name}: column {name!r}"))
    X = np.ascontiguousarray(np.column_stack(columns), dtype=np.float64)
    if spec.classes:
        y = np.ascontiguousarray(_class_codes(frame[target], spec, where))
    else:
        y = np.ascontiguousarray(_to_float64(frame[target], f"{spec.name}: target"))
    return X, y, categorical, categories


def _class_codes(col: pd.Series, spec: DatasetSpec, where: str) -> np.ndarray:
    """Labels to their float64 codes in ``spec.classes``; every label must be listed."""
    labels = col.astype("string").str.strip()
    unknown = sorted(set(labels.dropna()) - set(spec.classes))
    if unknown or labels.isna().any():
        raise DatasetIntegrityError(
            f"{spec.name}: target of {where} has labels outside {list(spec.classes)} "
            f"(unknown: {unknown}, missing: {int(labels.isna().sum())})"
        )
    return pd.Categorical(labels, categories=list(spec.classes)).codes.astype(np.float64)


def _to_float64(col: pd.Series, what: str) -> np.ndarray:
    """Column to float64; text cells go through Python's ``float``."""
    try:
        if pd.api.types.is_numeric_dtype(col.dtype):
            return col.to_numpy(dtype=np.float64)
        return np.array([float(v) for v in col], dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise DatasetIntegrityError(f"{what}: non-numeric value ({exc})") from exc


def freeze(array: np.ndarray) -> np.ndarray:
    """``array``, made read-only."""
    array.setflags(write=False)
    return array
