"""The result store of one suite: run records, session records and carrier statistics.

Layout (``store`` is a suite's results directory: ``tabpfn-retrofit-results/offline18``
by default, the committed ``results/offline18`` only when named)::

    runs/<key>.json         one run per (case, variant, tau): a ``RunRecord``
                            (``eval.paper.record``); key = sha256 of the run's
                            full config (``eval.paper.spec.RunSpec``)
    runs/<key>.claim        held while a process computes that run (its PID
                            and host inside, for people; the lock is the truth)
    sessions/<time>.json    one ``SessionRecord`` per ``eval`` command (wall time,
                            the runs it computed and reused, the code paths that
                            were dirty in git)
    carriers/<sha12>.json   carrier norms of a host (``eval.paper.carriers``)

Every file is written atomically (``retrofit.files``), so a kill leaves no
partial file; JSON follows the project's policy (non-finite floats as
``"NaN"``/``"Infinity"``). Reading is strict: a run file that cannot be read
is an error naming the file, never a silent "failed" run. Reports read the
store through this module alone, without the runner.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from eval.errors import StoreError
from eval.paper.record import RunRecord, SessionRecord
from retrofit.files import process_alive, read_json, write_json_atomic, write_text_atomic

try:  # POSIX: a claim is an flock on its file, released by the kernel when its holder dies
    import fcntl
except ImportError:  # pragma: no cover - Windows: the PID in the file decides
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "carrier_path",
    "claim_run",
    "clear_stale_claims",
    "copy_record",
    "iter_sessions",
    "load_carriers",
    "load_records",
    "read_record",
    "release_claim",
    "run_path",
    "runs_dir",
    "utc_now",
    "write_carriers",
    "write_record",
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


_RERUN = "run eval again to recompute it (it replaces the file)"


def read_record(path: Path, *, advice: str = _RERUN) -> RunRecord | None:
    """The run stored at ``path``; None if there is none.

    Args:
        path: A run file.
        advice: What the error message tells the user to do.

    Raises:
        StoreError: If the file exists but is truncated, not JSON, not a run
            record, or holds another run's key.
    """
    if not path.exists():
        return None
    try:
        record = RunRecord.from_json(read_json(path))
    except (OSError, ValueError, TypeError) as exc:
        raise StoreError(f"run file {path} is unreadable ({type(exc).__name__}); {advice}") from exc
    if record.key != path.stem:
        raise StoreError(f"run file {path} does not hold the run its name says; {advice}")
    return record


def write_record(store: str | Path, record: RunRecord) -> Path:
    """Stores one run under its key."""
    return write_json_atomic(run_path(store, record.key), record.to_json())


def copy_record(source: str | Path, store: str | Path, key: str) -> bool:
    """Copies the successful run ``key`` of store ``source`` into ``store``, byte for byte.

    Returns:
        Whether it was copied: ``False`` when ``source`` has no readable run
        ``key`` with status ``"ok"`` (a failed or unreadable run is not copied).
    """
    path = run_path(source, key)
    try:
        record = read_record(path)
    except StoreError:
        return False
    if record is None or not record.ok:
        return False
    write_text_atomic(run_path(store, key), path.read_text(encoding="utf-8"))
    return True


def load_records(store: str | Path) -> list[RunRecord]:
    """Every run of a store, sorted by file name.

    Raises:
        StoreError: If ``store`` is a file, not a folder, or a run file is
            unreadable (see :func:`read_record`).
    """
    if Path(store).exists() and not Path(store).is_dir():
        raise StoreError(
            f"store {store} is a file, not a folder; give the folder `eval` wrote (its --store)"
        )
    directory = runs_dir(store)
    if not directory.is_dir():
        return []
    return [r for p in sorted(directory.glob("*.json")) if (r := read_record(p)) is not None]


# Claim files this process holds, with the descriptor that holds each lock.
_HELD: dict[Path, int] = {}


def _claim_path(store: str | Path, key: str) -> Path:
    return runs_dir(store) / f"{key}.claim"


def _claim_text() -> bytes:
    return f"{os.getpid()} {platform.node()}\n".encode()


def claim_run(store: str | Path, key: str) -> bool:
    """Claims the run ``key`` for this process; False if another process holds it.

    On POSIX the claim is an exclusive ``flock`` on ``runs/<key>.claim``: the
    kernel drops it when the holding process ends in any way (kill -9
    included), so the claim of a dead process is simply taken over, and no
    PID is ever guessed at. Without ``fcntl`` the file is created with
    ``O_EXCL`` and a claim whose PID no longer runs is taken over. A claim
    held by this process already counts as held (a second ``run_suite`` in one
    process skips it too).
    """
    path = _claim_path(store, key)
    path.parent.mkdir(parents=True, exist_ok=True)
    if fcntl is None:  # pragma: no cover - exercised on Windows only
        return _claim_by_pid(path)
    for _ in range(8):  # each retry follows a releaser that unlinked the file we opened
        fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # BlockingIOError: someone holds it
            os.close(fd)
            return False
        try:
            current = os.stat(path).st_ino
        except FileNotFoundError:
            current = None
        if current != os.fstat(fd).st_ino:  # released (unlinked) after we opened it
            os.close(fd)
            continue
        os.ftruncate(fd, 0)
        os.write(fd, _claim_text())
        _HELD[path] = fd
        return True
    return False


def _claim_by_pid(path: Path) -> bool:  # pragma: no cover - no fcntl
    for _ in range(2):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            try:
                pid = int(path.read_text().split()[0])
            except (OSError, ValueError, IndexError):
                return False  # being written right now, or unreadable: leave it
            if process_alive(pid):
                return False
            path.unlink(missing_ok=True)
            continue
        with os.fdopen(fd, "wb") as fh:
            fh.write(_claim_text())
        return True
    return False


def release_claim(store: str | Path, key: str) -> None:
    """Drops this process's claim on ``key`` (if it holds one)."""
    path = _claim_path(store, key)
    fd = _HELD.pop(path, None)
    if fcntl is not None and fd is None:
        return  # not ours: never delete another process's claim
    path.unlink(missing_ok=True)  # unlinked while still locked, then unlocked
    if fd is not None:
        os.close(fd)


def clear_stale_claims(store: str | Path) -> int:
    """Removes every claim file in ``store`` that no process holds any more.

    A killed ``eval`` leaves the claim files of the runs it held (the kernel
    drops the lock, not the file). Each is taken as :func:`claim_run` takes a
    dead process's claim and then released (which unlinks it); a claim that a
    live process holds is never taken, and this process's own are left alone.

    Returns:
        How many stale claim files were removed.
    """
    directory = runs_dir(store)
    removed = 0
    for path in sorted(directory.glob("*.claim")) if directory.is_dir() else ():
        if path in _HELD or not claim_run(store, path.stem):
            continue
        release_claim(store, path.stem)
        removed += 1
    return removed


def write_session(store: str | Path, record: SessionRecord) -> Path:
    """Stores one ``eval`` command's record (arguments, runs computed and reused, wall time)."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
    return write_json_atomic(Path(store) / "sessions" / f"{stamp}.json", record.to_json())


def iter_sessions(store: str | Path) -> Iterator[SessionRecord]:
    """Stored session records, oldest first (an unreadable one is skipped)."""
    directory = Path(store) / "sessions"
    for path in sorted(directory.glob("*.json")) if directory.is_dir() else ():
        try:
            yield SessionRecord.from_json(read_json(path))
        except (OSError, ValueError, TypeError):
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
