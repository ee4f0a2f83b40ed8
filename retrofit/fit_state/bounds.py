"""How far a fit state may inflate when read: checked before anything is unpacked.

A fit state is a zip, and its data members are compressed: a file of 1 MB can
declare members of 1 GB (deflate reaches about 1,030:1 on zeros; overlapping
entries, more). Loading one would allocate the whole before any digest or
shape could be checked. So the reader bounds, from the zip's central directory
alone, the sum of the sizes its members declare::

    declared bytes <= max(FLOOR_BYTES, MAX_RATIO x the archive's size on disk)

(the size on disk, not the members' compressed sizes, which overlapping
entries would count twice), and a Parquet member's decoded cells from its
footer the same way, before its pages are decoded. ``zipfile`` never returns
more than a member declares (it stops there and checks the CRC), so the bound
holds for what is read.

Why these numbers. Real training data deflates at 1-13:1 (scikit-learn's
bundled datasets as float64 ``.npy``: 1.9-12.5), sparse data further
(0/1 features 27:1, 99 % zeros 68:1), and only near-constant data past 200
(a one-hot of 100 levels 248:1, 99.9 % zeros 418:1, zeros 1,026:1). Under
``FLOOR_BYTES`` (128 MiB, 16 million float64 cells) any ratio passes, so a
fit state of ordinary size is never refused; above it the members must
inflate no more than ``MAX_RATIO`` (200) times the file. The writer keeps its
own files inside the bound by storing a member uncompressed where compressing
it would cross the bound (:func:`stored_members`), and checks the file it
wrote with :func:`check_archive` before renaming it into place: a fit state
this library writes is never refused by it, and a file of N bytes never makes
a load allocate more than ``max(128 MiB, 200 N)``.
"""

from __future__ import annotations

import io
import os
import zipfile
import zlib
from collections.abc import Mapping
from pathlib import Path

import pyarrow.parquet as pq

from retrofit.errors import FitStateError

__all__ = ["FLOOR_BYTES", "MAX_RATIO", "check_archive", "check_parquet", "stored_members"]

#: Declared sizes up to this pass whatever the ratio (128 MiB).
FLOOR_BYTES = 128 * 2**20
#: Above the floor, the most the members may inflate over the archive's size.
MAX_RATIO = 200
#: Bytes a decoded Parquet cell is counted as (a float64 or a pointer).
_CELL_BYTES = 8


def _allowed(stored_bytes: int) -> int:
    return max(FLOOR_BYTES, MAX_RATIO * stored_bytes)


def _refusal(where: str, declared: int, stored: int, what: str) -> FitStateError:
    return FitStateError(
        f"{where}: {what} would inflate to {declared:,} bytes from {stored:,}, past the bound "
        f"of max({FLOOR_BYTES // 2**20} MiB, {MAX_RATIO} x the file) that every fit state this "
        "library writes keeps; refused unread (not written by save_fit_state, or tampered)"
    )


def check_archive(path: Path, archive: zipfile.ZipFile) -> None:
    """Refuses an archive whose members declare more bytes than its size allows.

    Reads the central directory only (``archive.infolist()``), nothing of a member.

    Raises:
        FitStateError: Naming ``path`` and the member that inflates most.
    """
    infos = archive.infolist()
    on_disk = os.path.getsize(path)
    declared = sum(info.file_size for info in infos)
    if declared > _allowed(on_disk):
        largest = max(infos, key=lambda info: info.file_size)
        raise _refusal(
            str(path), declared, on_disk, f"its members ({largest.filename} {largest.file_size:,})"
        )


def check_parquet(data: bytes, *, where: str, member: str) -> None:
    """Refuses a Parquet member whose footer declares more cells than its size allows.

    Parquet compresses again inside the member (dictionaries, run lengths): a
    column of one value costs a few bytes whatever its length. The footer's
    row and column counts are read, no page.

    Raises:
        FitStateError: Naming ``where`` and ``member``.
    """
    try:
        meta = pq.ParquetFile(io.BytesIO(data)).metadata
    except (OSError, ValueError) as err:  # pyarrow's ArrowInvalid is a ValueError
        raise FitStateError(
            f"{where}: {member} is not a readable Parquet file ({str(err)[:120]}); "
            "save the fit state again"
        ) from err
    decoded = meta.num_rows * max(meta.num_columns, 1) * _CELL_BYTES
    if decoded > _allowed(len(data)):
        raise _refusal(
            where, decoded, len(data), f"{member} ({meta.num_rows:,} rows x {meta.num_columns})"
        )


def stored_members(members: Mapping[str, bytes]) -> set[str]:
    """The members to store uncompressed so that the archive stays inside the bound.

    Members are deflated as ``zipfile`` does (its default level, so the sizes
    agree); while the declared total exceeds what the compressed total allows
    (the file on disk is larger still: the zip's own records), the most
    compressible member is stored as it is. Storing every member always fits.
    Only archives over ``FLOOR_BYTES`` pay the trial compression.

    Args:
        members: Every member to write, the manifest included, by name.
    """
    declared = sum(len(data) for data in members.values())
    if declared <= FLOOR_BYTES:
        return set()
    packed = {name: _deflated_size(data) for name, data in members.items()}
    stored: set[str] = set()
    by_ratio = sorted(packed, key=lambda name: len(members[name]) / max(packed[name], 1))
    while declared > _allowed(sum(packed.values())) and by_ratio:
        name = by_ratio.pop()
        stored.add(name)
        packed[name] = len(members[name])
    return stored


def _deflated_size(data: bytes) -> int:
    compressor = zlib.compressobj(zlib.Z_DEFAULT_COMPRESSION, zlib.DEFLATED, -15)
    return len(compressor.compress(data)) + len(compressor.flush())
