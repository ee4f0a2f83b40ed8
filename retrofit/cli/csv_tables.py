"""Train and test tables from CSV files, and prediction files, for the commands.

One reading of a CSV for ``predict`` and ``predict-batch``, so both refuse the
same things in the same words: a missing or unreadable file, a header without
data rows, a column named twice (pandas would silently rename the second
``a.1``), a target that is not numeric or is infinite, an infinite feature, a
column of numbers with a few text cells (a typo or a missing-value marker such
as ``?``, which would make the whole column text, encoded as categories), a
sample-weight column that is not finite numbers ``>= 0``, not all 0.
Feature columns stay as pandas parsed them: numbers as numbers, text as text,
for tabpfn to encode as categoricals. Prediction files are written under a
temporary name and renamed (:func:`retrofit.files.atomic_path`).

Every refusal is a :class:`~retrofit.errors.CommandError` naming the file;
``predict-batch`` adds the dataset. pandas is imported when a function runs,
so importing this module stays light.
"""

from __future__ import annotations

import csv
import math
from collections import Counter
from collections.abc import Collection
from pathlib import Path
from typing import TYPE_CHECKING

from retrofit.cli.console import one_line
from retrofit.errors import CommandError
from retrofit.files import atomic_path

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

__all__ = [
    "class_labels",
    "first_text_label",
    "numeric_target",
    "read_csv_table",
    "refuse_infinite_features",
    "refuse_stray_text",
    "sample_weights",
    "write_csv_atomic",
]


def _refuse_repeated_columns(path: Path, role: str) -> None:
    """Refuses a header that names a column twice (pandas would rename the second ``a.1``)."""
    try:
        with path.open(newline="", encoding="utf-8-sig") as fh:
            header = next((row for row in csv.reader(fh) if row), [])
    except (UnicodeDecodeError, csv.Error):
        return  # pandas reports what it cannot read
    repeated = [name for name, count in Counter(header).items() if count > 1]
    if repeated:
        names = ", ".join(repr(name) for name in repeated)
        raise CommandError(f"{role} file {path} repeats column(s) {names} in its header")


def read_csv_table(path_text: str | Path, role: str, *, min_rows: int = 1) -> pd.DataFrame:
    """The table in ``path_text``, with a header and at least ``min_rows`` data rows.

    Args:
        path_text: The CSV file (``~`` is expanded).
        role: What the file is (``"train"``, ``"test"``), for the messages.
        min_rows: The fewest data rows the command can use (a fit needs 2).

    Raises:
        CommandError: If the file is missing or a directory, empty, unreadable
            as CSV, has fewer data rows, or names a column twice.
    """
    import pandas as pd  # lazy: keeps --help light

    path = Path(path_text).expanduser()
    if path.is_dir():
        raise CommandError(f"{role} file {path} is a directory; give the CSV file itself")
    if not path.is_file():
        raise CommandError(f"{role} file not found: {path}")
    _refuse_repeated_columns(path, role)
    try:
        frame = pd.read_csv(path)
    except pd.errors.EmptyDataError as exc:
        raise CommandError(f"{role} file {path} is empty") from exc
    except (pd.errors.ParserError, UnicodeDecodeError, ValueError) as exc:
        raise CommandError(f"cannot read {role} file {path} as CSV: {one_line(exc)}") from exc
    if frame.shape[0] == 0:
        raise CommandError(f"{role} file {path} has a header but no data rows")
    if frame.shape[0] < min_rows:
        raise CommandError(
            f"{role} file {path} has {frame.shape[0]} data row; fitting needs at least {min_rows}"
        )
    if frame.columns.duplicated().any():
        dupes = sorted(set(frame.columns[frame.columns.duplicated()]))
        raise CommandError(f"{role} file {path} repeats column(s) {', '.join(map(str, dupes))}")
    return frame


def numeric_target(
    frame: pd.DataFrame, target: str, path: str | Path, *, allow_missing: bool
) -> np.ndarray:
    """The ``target`` column as float64.

    Args:
        frame: The table.
        target: The target column's name (present in ``frame``).
        path: The file, for the messages.
        allow_missing: Whether empty cells (NaN) are allowed (a test file's
            target may be partly unknown; a train file's may not).

    Raises:
        CommandError: If a cell is not a number, is infinite, or is empty where
            ``allow_missing`` is False.
    """
    import numpy as np  # lazy: keeps --help light
    import pandas as pd  # lazy: keeps --help light

    values = pd.to_numeric(frame[target], errors="coerce").to_numpy(dtype=np.float64)
    bad = np.isnan(values) & frame[target].notna().to_numpy()
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise CommandError(
            f"target column {target!r} in {path} is not numeric "
            f"(data row {row}: {frame[target].iloc[row]!r}); for class labels give "
            "--task classification"
        )
    if not np.isfinite(values[~np.isnan(values)]).all():
        raise CommandError(f"target column {target!r} in {path} holds an infinite value")
    if not allow_missing and np.isnan(values).any():
        row = int(np.flatnonzero(np.isnan(values))[0])
        raise CommandError(f"target column {target!r} in {path} is empty in data row {row}")
    return values


def sample_weights(
    frame: pd.DataFrame, column: str, path: str | Path, *, option: str = "--sample-weight"
) -> np.ndarray:
    """The ``column`` of a train table as row weights, checked as ``fit`` checks them.

    Raises:
        CommandError: A missing column, a cell that is not a number or is
            empty, a negative or infinite weight, or every weight 0.
    """
    import numpy as np  # lazy: keeps --help light
    import pandas as pd  # lazy: keeps --help light

    from retrofit.validation import check_sample_weight  # lazy: keeps --help light

    if column not in frame.columns:
        raise CommandError(
            f"{option} {column!r} is no column of {path} "
            f"(columns: {', '.join(map(str, frame.columns))})"
        )
    values = pd.to_numeric(frame[column], errors="coerce").to_numpy(dtype=np.float64)
    bad = np.isnan(values)
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise CommandError(
            f"{option} column {column!r} in {path} is no number in data row {row} "
            f"({frame[column].iloc[row]!r}); every train row needs a weight"
        )
    try:
        return check_sample_weight(values, len(values), where=f"{option} column {column!r}")
    except ValueError as err:
        raise CommandError(f"{err} (in {path})") from None


def first_text_label(frame: pd.DataFrame, target: str) -> tuple[int, object, bool] | None:
    """Where ``target`` first holds a cell that is not a number; None if none does.

    Empty cells are missing, neither text nor numbers; ``True``/``False`` cells
    are text (class labels, not the numbers 1 and 0).

    Returns:
        The 0-based data row, its cell, and whether other cells are numbers.
    """
    import numpy as np  # lazy: keeps --help light
    import pandas as pd  # lazy: keeps --help light

    column = frame[target]
    if column.dtype.kind in "iuf":
        return None
    present = column.notna().to_numpy()
    if column.dtype.kind == "b":
        text = present
    else:
        not_number = pd.to_numeric(column, errors="coerce").isna().to_numpy()
        boolean = column.map(lambda cell: isinstance(cell, (bool, np.bool_))).to_numpy(bool)
        text = present & (not_number | boolean)
    if not text.any():
        return None
    row = int(np.flatnonzero(text)[0])
    return row, column.iloc[row], bool((present & ~text).any())


def _label_text(frame: pd.DataFrame, target: str, path: str | Path) -> pd.Series:
    """``frame``'s ``target`` cells as the file holds them: text (blanks stripped), or missing.

    The column is read again from ``path`` as text, so a cell pandas parsed as a
    number (``1``, ``1.50``) keeps the characters the file holds.
    """
    import pandas as pd  # lazy: keeps --help light

    try:
        column = pd.read_csv(Path(path).expanduser(), usecols=[target], dtype=str)[target]
    except (OSError, ValueError, pd.errors.ParserError) as exc:
        message = f"cannot read target column {target!r} of {path}: {one_line(exc)}"
        raise CommandError(message) from exc
    if len(column) != len(frame):
        raise CommandError(
            f"{path}: target column {target!r} read as text has {len(column)} rows, "
            f"the table {len(frame)}; the file changed while it was read"
        )
    return column.str.strip().map(_number_text, na_action="ignore")


def _number_text(cell: str) -> str:
    """A cell that spells a number as that number's one spelling (``1.0`` -> ``1``), else as is.

    pandas writes an integer label column with a missing cell as floats
    (``0.0``, ``1.0``): those labels are the classes ``0`` and ``1`` of a file
    that writes them as integers, as they are when both columns are numbers.
    """
    try:
        number = float(cell)
    except ValueError:
        return cell
    if not math.isfinite(number):
        return cell
    return str(int(number)) if number.is_integer() else repr(number)


def class_labels(
    target: str,
    train: pd.DataFrame,
    train_path: str | Path,
    test: pd.DataFrame | None = None,
    test_path: str | Path | None = None,
    *,
    reserved: set[str],
) -> tuple[np.ndarray, np.ndarray | None]:
    """The ``target`` columns of a train table and of a test table as class labels, read alike.

    pandas types each file's column on its own: one text label among integers
    makes the train column text while the test file's stays integers, and then
    no test label equals its class (``"1" != 1``). So labels are taken as the
    files show them, the same way for both files: numbers when both columns
    hold only numbers (``1`` and ``1.0`` are one class), otherwise the text of
    every cell in both (a test file's ``1`` is the train file's ``1``). A test
    file may lack classes of the train file, or hold others.

    Args:
        target: The target column's name (present in ``train``).
        train: The training table; every row must have a label.
        train_path: Its file, read again for the labels' text, and for the messages.
        test: The test table, when it has the target column (its labels may be
            partly missing), else None.
        test_path: Its file.
        reserved: Column names of the prediction file: a class's probability
            column is named by its label, so no train label may be one of them.

    Returns:
        The train labels and the test labels (None without ``test``).

    Raises:
        CommandError: If a train label is missing or names a reserved column.
    """
    import numpy as np  # lazy: keeps --help light

    tables = [(train, train_path)] + ([(test, test_path)] if test is not None else [])
    as_text = any(first_text_label(frame, target) is not None for frame, _ in tables)
    columns = [
        _label_text(frame, target, path) if as_text else frame[target] for frame, path in tables
    ]
    missing = columns[0].isna().to_numpy()
    if missing.any():
        row = int(np.flatnonzero(missing)[0])
        raise CommandError(
            f"target column {target!r} in {train_path} has no label in data row {row}"
        )
    clash = sorted({str(c) for c in columns[0].unique()} & reserved)
    if clash:
        raise CommandError(
            f"class label(s) {clash} in {train_path} name an output column; rename the class(es)"
        )
    labels = [column.to_numpy() for column in columns]
    return labels[0], (labels[1] if test is not None else None)


def refuse_infinite_features(frame: pd.DataFrame, path: str | Path) -> None:
    """Every numeric feature column must be finite (NaN is a missing value, inf an error).

    Raises:
        CommandError: Naming the column and the first data row with an infinite value.
    """
    import numpy as np  # lazy: keeps --help light

    for name in frame.columns:
        if frame[name].dtype.kind in "fiu":
            values = frame[name].to_numpy(dtype=np.float64)
            infinite = np.isinf(values)
            if infinite.any():
                row = int(np.flatnonzero(infinite)[0])
                raise CommandError(
                    f"feature column {name!r} in {path} holds an infinite value "
                    f"(data row {row}: {values[row]})"
                )


def refuse_stray_text(
    frame: pd.DataFrame, path: str | Path, *, categorical: Collection[str] = (), option: str = ""
) -> None:
    """Refuses a feature column of numbers in which some cells are text.

    pandas reads such a column as text, and tabpfn then encodes every distinct
    number as a category of its own (a numeric feature of 300 values becomes a
    300-level categorical): almost always a typo or a missing-value marker
    (``?``, ``n/a``). A column with more number cells than text cells is taken
    to be numeric; one with more text is left to tabpfn as text.

    Args:
        frame: The feature columns.
        path: The file, for the message.
        categorical: Columns declared categorical, which may mix numbers and text.
        option: How a user declares a column categorical (``"--categorical"``),
            offered as the other way out; empty: none.

    Raises:
        CommandError: Naming the column, the first text cell's data row and the cell.
    """
    import numpy as np  # lazy: keeps --help light
    import pandas as pd  # lazy: keeps --help light

    for name in frame.columns:
        column = frame[name]
        if column.dtype.kind != "O" or name in categorical:
            continue
        present = column.notna().to_numpy()
        text = present & pd.to_numeric(column, errors="coerce").isna().to_numpy()
        n_text = int(text.sum())
        if n_text == 0 or int(present.sum()) - n_text <= n_text:
            continue
        row = int(np.flatnonzero(text)[0])
        others = f" and {n_text - 1} more" if n_text > 1 else ""
        declare = f", or give {option} {name} to take the column as categories" if option else ""
        raise CommandError(
            f"feature column {name!r} in {path} holds numbers but text in data row {row} "
            f"({column.iloc[row]!r}){others}: fix or empty that cell (an empty cell is a "
            f"missing value){declare}"
        )


def write_csv_atomic(frame: pd.DataFrame, path_text: str | Path) -> Path:
    """Writes ``frame`` (no index) to ``path_text`` under a temporary name, then renames it.

    Raises:
        CommandError: If the path is a folder or its folder does not exist.
    """
    path = Path(path_text).expanduser()
    if path.is_dir():
        raise CommandError(f"{path} is a directory; give a file name")
    if not path.parent.is_dir():
        raise CommandError(f"{path}: folder {path.parent} does not exist")
    with atomic_path(path) as tmp, tmp.open("w", newline="") as fh:
        frame.to_csv(fh, index=False)
    return path
