"""Writing files so that nothing is half-written, and the project's JSON policy.

Every file the project writes (predictions, saved models' manifests, run
rows, reports) goes through :func:`atomic_path`: the content is written to a
temporary name in the target directory and renamed into place, so a reader
never sees a partial file. A writer that raises removes its temporary file; one
killed outright (``kill -9``, power loss) cannot, so the temporary name carries
the writer's process id (``.NAME.tmp-PID-XXXXXXXX``, the convention of saved
directories' leftovers too) and :func:`remove_abandoned_temporaries` removes
those whose process is gone. The result gets the permissions a plain
``open(path, "w")`` would give it: those of the file it replaces, else
``0o666`` less the umask (``mkstemp`` alone would leave ``0o600``).

Also: the SHA-256 of a file (checkpoints, saved models, manifests; a
checkpoint verified at every fit is hashed again only once its identity
changes), and the folders a command created, to remove when it fails.

JSON policy, one for the whole project (:func:`to_jsonable`,
:func:`from_jsonable`): strict JSON, with non-finite floats recorded as the
strings ``"NaN"``, ``"Infinity"`` and ``"-Infinity"`` (never dropped, never
the non-standard bare literals), read back as floats.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "atomic_file_set",
    "atomic_path",
    "default_dir_mode",
    "default_file_mode",
    "file_identity",
    "from_jsonable",
    "missing_dirs",
    "process_alive",
    "read_json",
    "remove_abandoned_temporaries",
    "remove_empty_dirs",
    "sha256_file",
    "sha256_of_checkpoint",
    "to_jsonable",
    "write_json_atomic",
    "write_text_atomic",
]

_NONFINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def _umask() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return umask


def default_file_mode() -> int:
    """The mode ``open(path, "w")`` gives a new file: ``0o666`` less the umask."""
    return 0o666 & ~_umask()


def default_dir_mode() -> int:
    """The mode ``mkdir`` gives a new directory: ``0o777`` less the umask."""
    return 0o777 & ~_umask()


def _default_mode(path: Path) -> int:
    try:
        return stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        return default_file_mode()


def process_alive(pid: int) -> bool:
    """Whether a process with ``pid`` runs on this machine (one of another user counts)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OSError:
        return False
    return True


def _temporary_prefix(path: Path) -> str:
    """How :func:`atomic_path` names a temporary file of ``path``: hidden, with its PID."""
    return f".{path.name}.tmp-{os.getpid()}-"


def remove_abandoned_temporaries(
    path: str | os.PathLike[str], *, suffix: str = ".tmp"
) -> list[Path]:
    """Removes the temporary files of ``path`` that killed :func:`atomic_path` writers left.

    Only files named as :func:`atomic_path` names them (for this ``suffix``)
    whose process no longer runs on this machine are removed: a writer at work
    keeps its file. Costs a listing of ``path``'s folder, so writers that save
    into folders of many files (run stores) do not call it on every write.

    Returns:
        The files removed.
    """
    path = Path(path)
    # mkstemp's random part: 8 characters of [a-z0-9_].
    pattern = re.compile(rf"\.{re.escape(path.name)}\.tmp-(\d+)-[a-z0-9_]{{8}}{re.escape(suffix)}")
    removed: list[Path] = []
    try:
        entries = sorted(path.parent.iterdir())
    except OSError:  # no folder yet: nothing was left
        return removed
    for entry in entries:
        match = pattern.fullmatch(entry.name)
        if match is None or process_alive(int(match.group(1))) or not entry.is_file():
            continue
        entry.unlink(missing_ok=True)
        removed.append(entry)
    return removed


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str], *, suffix: str = ".tmp") -> Iterator[Path]:
    """A temporary path beside ``path`` that becomes ``path`` when the block succeeds.

    Parent directories are created. On any exception the temporary file is
    removed and ``path`` is left as it was.

    Args:
        path: The file to write.
        suffix: Ending of the temporary name (some writers pick a format from it).

    Yields:
        The temporary path to write to.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = _default_mode(path)
    fd, tmp_name = tempfile.mkstemp(prefix=_temporary_prefix(path), suffix=suffix, dir=path.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        yield tmp
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_text_atomic(path: str | os.PathLike[str], text: str) -> Path:
    """Writes ``text`` (UTF-8) to ``path`` atomically; returns the path."""
    with atomic_path(path) as tmp, tmp.open("w", encoding="utf-8", newline="") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    return Path(path)


_SET_STAGING = ".file-set.new"
_SET_READY = ".ready"


def _fsync_file(path: Path) -> None:
    with path.open("rb") as fh:
        os.fsync(fh.fileno())


def _finish_file_set(directory: Path, names: Sequence[str]) -> None:
    """Completes or undoes a file set that a killed writer left staged in ``directory``.

    A staged set marked ready is moved into place (the writer was killed while
    moving it); one not marked ready is dropped (killed while writing it), so
    the files in ``directory`` are always one writer's whole set.
    """
    staging = directory / _SET_STAGING
    if not staging.is_dir():
        return
    ready = staging / _SET_READY
    if ready.exists():
        members = set(ready.read_text(encoding="utf-8").split("\n")) - {""}
        for name in names:
            staged = staging / name
            if name in members:
                if staged.exists():  # not moved yet
                    os.replace(staged, directory / name)
            else:  # the new set has no such file: an old one would be out of step
                (directory / name).unlink(missing_ok=True)
    shutil.rmtree(staging, ignore_errors=True)


@contextlib.contextmanager
def atomic_file_set(directory: str | os.PathLike[str], names: Iterable[str]) -> Iterator[Path]:
    """A staging folder whose files replace a whole set of files in ``directory`` at once.

    Write the new set into the yielded folder. When the block succeeds the
    staged files are synced, the folder is marked ready, and each file is
    moved into ``directory``; a file of ``names`` the new set lacks is
    removed, so no file of an older set stays beside the new one. When the
    block raises, nothing in ``directory`` changes. A writer killed while
    writing leaves the old set; one killed while moving leaves a ready
    staging folder that the next :func:`atomic_file_set` on ``directory``
    finishes first. Each move is an atomic rename, so a reader sees each file
    whole; two writers of one directory at the same time are not supported.

    Args:
        directory: Where the set lives (created if missing).
        names: Every file name the set may hold.

    Yields:
        The staging folder (``directory/.file-set.new``).

    Raises:
        ValueError: If the block wrote a file not in ``names``.
    """
    directory = Path(directory)
    names = tuple(names)
    directory.mkdir(parents=True, exist_ok=True)
    _finish_file_set(directory, names)
    staging = directory / _SET_STAGING
    staging.mkdir()
    try:
        yield staging
        written = sorted(p.name for p in staging.iterdir())
        unknown = sorted(set(written) - set(names))
        if unknown:
            raise ValueError(f"file set of {directory} has no place for {', '.join(unknown)}")
        for name in written:
            _fsync_file(staging / name)
        write_text_atomic(staging / _SET_READY, "\n".join(written) + "\n")
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    _finish_file_set(directory, names)


def to_jsonable(obj: Any) -> Any:
    """Strict-JSON form of ``obj`` under the project's policy.

    Non-finite floats become ``"NaN"``, ``"Infinity"``, ``"-Infinity"``; tuples
    become lists; numpy and torch scalars become Python numbers; paths strings.
    """
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, os.PathLike):
        return os.fspath(obj)
    if hasattr(obj, "item") and callable(obj.item) and getattr(obj, "ndim", 0) == 0:
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return "NaN" if math.isnan(obj) else ("Infinity" if obj > 0 else "-Infinity")
    return obj


def from_jsonable(obj: Any) -> Any:
    """Inverse of :func:`to_jsonable` for non-finite floats (the three strings)."""
    if isinstance(obj, dict):
        return {k: from_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [from_jsonable(v) for v in obj]
    if isinstance(obj, str) and obj in _NONFINITE:
        return _NONFINITE[obj]
    return obj


def write_json_atomic(path: str | os.PathLike[str], obj: Any, *, sort_keys: bool = False) -> Path:
    """Writes ``obj`` as strict, indented JSON to ``path`` atomically."""
    text = json.dumps(to_jsonable(obj), indent=2, allow_nan=False, sort_keys=sort_keys) + "\n"
    return write_text_atomic(path, text)


def read_json(path: str | os.PathLike[str]) -> Any:
    """Reads a file written by :func:`write_json_atomic` (non-finite floats restored).

    Raises:
        OSError: If the file cannot be read.
        ValueError: If it is not valid JSON.
    """
    return from_jsonable(json.loads(Path(path).read_text(encoding="utf-8")))


def sha256_file(path: str | os.PathLike[str]) -> str:
    """Hex SHA-256 of a file's bytes, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def file_identity(path: str | os.PathLike[str]) -> tuple[str, int, int, int, int, int]:
    """What changes when a file is replaced or written: its path, inode, size and times.

    The change time (``st_ctime_ns``) moves on every write and rename and cannot
    be set back by the writer, so a file rewritten with the same size and a
    restored modification time still has a new identity.

    Raises:
        OSError: If the file cannot be read (it does not exist).
    """
    resolved = Path(path).resolve()
    st = resolved.stat()
    return (str(resolved), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


#: :func:`sha256_of_checkpoint`'s digests by :func:`file_identity`, oldest first.
_DIGESTS: dict[tuple[str, int, int, int, int, int], str] = {}
_MAX_DIGESTS = 64


def sha256_of_checkpoint(path: str | os.PathLike[str]) -> str:
    """:func:`sha256_file` of a file read many times (a checkpoint verified at every fit).

    Each digest is remembered for the process under the file's
    :func:`file_identity`, so the file is hashed again only once it changes;
    the check that the bytes match a recorded digest then costs a ``stat``.

    Raises:
        OSError: If the file cannot be read.
    """
    identity = file_identity(path)
    found = _DIGESTS.get(identity)
    if found is None:
        found = sha256_file(identity[0])
        if len(_DIGESTS) >= _MAX_DIGESTS:
            _DIGESTS.pop(next(iter(_DIGESTS)))
        _DIGESTS[identity] = found
    return found


def missing_dirs(path: str | os.PathLike[str]) -> list[Path]:
    """``path`` and those of its parents that do not exist yet, deepest first."""
    out = Path(path).expanduser()
    missing = []
    for candidate in (out, *out.parents):
        if os.path.lexists(candidate):
            break
        missing.append(candidate)
    return missing


def remove_empty_dirs(directories: Sequence[Path]) -> None:
    """Removes each of ``directories`` (deepest first) that holds only empty folders.

    Anything holding a file is kept; used when a command created these and
    then failed.
    """
    for directory in directories:
        if not directory.is_dir() or directory.is_symlink():
            continue
        for root, _dirs, _files in os.walk(directory, topdown=False):  # children first
            try:
                os.rmdir(root)
            except OSError:
                pass
