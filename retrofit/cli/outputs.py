"""Checking where a command will write before it does any work.

A command that fits a model or computes a suite checks its output first, so a
bad ``--out`` or ``--store`` fails in a second, not after the work: the output
must not be a directory (for a file) or a file (for a directory), its folder
must exist (or be creatable) and be writable, and it must not be one of the
command's inputs (the same file through a relative path, a symbolic link or a
hard link included). The checks create nothing;
:func:`retrofit.files.missing_dirs` and :func:`retrofit.files.remove_empty_dirs`
let a command that creates a directory and then fails leave no empty one behind.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from retrofit.errors import CommandError

__all__ = [
    "check_output_dir",
    "check_output_file",
    "same_file",
]


def same_file(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> bool:
    """Whether ``a`` and ``b`` name one file (links and relative paths resolved)."""
    a, b = Path(a).expanduser(), Path(b).expanduser()
    if a.exists() and b.exists():
        return os.path.samefile(a, b)
    return a.resolve() == b.resolve()


def _writable_dir(path: Path) -> bool:
    return os.access(path, os.W_OK | os.X_OK)


def _nearest_existing(path: Path) -> Path:
    for candidate in (path, *path.parents):
        if os.path.lexists(candidate):
            return candidate
    return Path(path.anchor or ".")


def check_output_file(
    path: str | os.PathLike[str],
    *,
    option: str = "--out",
    inputs: Mapping[str, str | os.PathLike[str] | None] | None = None,
) -> Path:
    """Refuses an output file that cannot or must not be written.

    Args:
        path: The file the command will write (replacing it if it exists).
        option: How the user gave it, for the message.
        inputs: The command's input files by role (``{"train": ...}``); ``None``
            values are skipped.

    Returns:
        ``path`` with ``~`` expanded.

    Raises:
        CommandError: ``path`` is a directory, its folder is missing or not
            writable, or it is one of ``inputs``.
    """
    out = Path(path).expanduser()
    if out.is_dir():
        raise CommandError(f"{option} {out} is a directory; give a file name")
    folder = out.parent
    if not folder.is_dir():
        raise CommandError(f"{option} {out}: folder {folder} does not exist")
    if not _writable_dir(folder):
        raise CommandError(f"{option} {out}: folder {folder} is not writable")
    for role, source in (inputs or {}).items():
        if source is not None and same_file(out, source):
            raise CommandError(
                f"{option} {out} is the {role} file {source}; write the output elsewhere"
            )
    return out


def check_output_dir(path: str | os.PathLike[str], *, option: str = "--store") -> Path:
    """Refuses an output directory that is not a writable directory and cannot be created.

    Returns:
        ``path`` with ``~`` expanded (nothing is created).

    Raises:
        CommandError: ``path`` is a file, or it (or the folder it would be
            created in) is not writable.
    """
    out = Path(path).expanduser()
    if out.exists():
        if not out.is_dir():
            raise CommandError(f"{option} {out} is a file, not a directory")
        if not _writable_dir(out):
            raise CommandError(f"{option} {out} is not writable")
        return out
    base = _nearest_existing(out)
    if not base.is_dir():
        raise CommandError(f"{option} {out} cannot be created: {base} is not a directory")
    if not _writable_dir(base):
        raise CommandError(f"{option} {out} cannot be created: {base} is not writable")
    return out
