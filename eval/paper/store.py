"""The result store of one suite: run rows, session records and carrier statistics.

Layout (``store`` is a suite's results directory, e.g. ``results/offline18``)::

    runs/<key>.json         one row per (case, variant, tau); key = sha256 of
                            the run's full config (``eval.paper.spec.RunSpec``)
    runs/<key>.claim        held while a process computes that run
    sessions/<time>.json    one record per ``eval`` command (wall time, counts,
                            the code paths that were dirty in git)
    carriers/<sha12>.json   carrier norms of a host (``eval.paper.carriers``)

Every file is written atomically (``retrofit.files``), so a kill leaves no
partial file; JSON follows the project's policy (non-finite floats as
``"NaN"``/``"Infinity"``). Reading is strict: a run file that cannot be read
is an error naming the file, never a silent "failed" row. Reports read the
store through this module alone, without the runner.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from eval.errors import StoreError
from retrofit.files import read_json, write_json_atomic

__all__ = [
    "carrier_path",
    "claim_run",
    "iter_sessions",
    "load_carriers",
    "load_rows",
    "read_row",
    "release_claim",
    "run_path",
    "runs_dir",
    "utc_now",
    "write_carriers",
    "write_row",
    "write_session",
]


def utc_now() -> str:
    """The current UTC time, ISO 8601 to the second."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def runs_dir(store: str | Path) -> Path:
    """Directory of the per-run files under a suite's results directory."""
    return Path(store) / "runs"


def run_path(store: str | Path, key: str) -> Path:
    """The file of the run with ``key``."""
    return runs_dir(store) / f"{key}.json"


def read_row(path: Path) -> dict[str, Any] | None:
    """The row stored at ``path``; None if there is none.

    Raises:
        StoreError: If the file exists but is truncated, not JSON, or holds
            another run's key.
    """
    if not path.exists():
        return None
    try:
        row = read_json(path)
    except (OSError, ValueError) as exc:
        raise StoreError(
            f"run file {path} is unreadable ({type(exc).__name__}); delete it and rerun "
            "eval to recompute that run"
        ) from exc
    if not isinstance(row, dict) or row.get("key") != path.stem:
        raise StoreError(f"run file {path} does not hold the run its name says; delete it")
    return row


def write_row(store: str | Path, row: dict[str, Any]) -> Path:
    """Stores one run row under its key."""
    return write_json_atomic(run_path(store, row["key"]), row)


def load_rows(store: str | Path) -> list[dict[str, Any]]:
    """Every run row of a store, sorted by file name.

    Raises:
        StoreError: If a run file is unreadable (see :func:`read_row`).
    """
    directory = runs_dir(store)
    if not directory.is_dir():
        return []
    return [row for p in sorted(directory.glob("*.json")) if (row := read_row(p)) is not None]


def claim_run(store: str | Path, key: str) -> bool:
    """Claims the run ``key`` for this process; False if another process holds it.

    A claim is a file created with ``O_EXCL``, so two ``eval`` processes on
    one store never compute the same run twice. A claim whose process is
    gone (killed) is taken over.
    """
    path = runs_dir(store) / f"{key}.claim"
    path.parent.mkdir(parents=True, exist_ok=True)
    for _ in range(2):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            if _claim_is_live(path):
                return False
            path.unlink(missing_ok=True)
            continue
        with os.fdopen(fd, "w") as fh:
            fh.write(f"{os.getpid()}\n")
        return True
    return False


def _claim_is_live(path: Path) -> bool:
    try:
        pid = int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def release_claim(store: str | Path, key: str) -> None:
    """Drops this process's claim on ``key`` (if any)."""
    (runs_dir(store) / f"{key}.claim").unlink(missing_ok=True)


def write_session(store: str | Path, record: dict[str, Any]) -> Path:
    """Stores one ``eval`` command's record (arguments, counts, wall time)."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
    return write_json_atomic(Path(store) / "sessions" / f"{stamp}.json", record)


def iter_sessions(store: str | Path) -> Iterable[dict[str, Any]]:
    """Stored session records, oldest first (an unreadable one is skipped)."""
    directory = Path(store) / "sessions"
    for path in sorted(directory.glob("*.json")) if directory.is_dir() else ():
        try:
            yield read_json(path)
        except (OSError, ValueError):
            continue


def carrier_path(store: str | Path, checkpoint_sha256: str) -> Path:
    """Where the carrier statistics of a checkpoint live under a suite's results."""
    return Path(store) / "carriers" / f"{checkpoint_sha256[:12]}.json"


def write_carriers(store: str | Path, checkpoint_sha256: str, stats: dict[str, Any]) -> Path:
    """Stores a checkpoint's carrier statistics."""
    return write_json_atomic(carrier_path(store, checkpoint_sha256), stats)


def load_carriers(store: str | Path, checkpoint_sha256: str) -> dict[str, Any] | None:
    """The stored carrier statistics of a checkpoint, or ``None``."""
    try:
        return read_json(carrier_path(store, checkpoint_sha256))
    except (OSError, ValueError):
        return None
