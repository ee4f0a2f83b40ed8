"""Every exception the evaluation raises (from ``RetrofitError``) and its warnings."""

from __future__ import annotations

from retrofit.errors import CommandError, RetrofitError, RetrofitWarning

__all__ = [
    "CheckpointChangedError",
    "ClusterUnreachableError",
    "DatasetIntegrityError",
    "DatasetUnavailableError",
    "DatasetWarning",
    "MissingExtraError",
    "ReportError",
    "StoreError",
    "StoreWarning",
]


class CheckpointChangedError(RetrofitError, RuntimeError):
    """The checkpoint's tensors changed during a run (results would be mixed)."""


class DatasetUnavailableError(RetrofitError, RuntimeError):
    """The requested data cannot be obtained (e.g. OpenML unreachable offline)."""


class DatasetIntegrityError(RetrofitError, ValueError):
    """Loaded data does not match its suite file (shape, SHA-256 or columns)."""


class MissingExtraError(CommandError, ModuleNotFoundError):
    """A module of one of the runner's extras is not installed; the message names the install."""


class ClusterUnreachableError(RetrofitError, ConnectionError):
    """The scheduler or cluster address given to a distributed executor does not answer."""


class ReportError(RetrofitError, RuntimeError):
    """The store holds nothing to report (or nothing matching the request)."""


class StoreError(RetrofitError, ValueError):
    """A file in a result store cannot be read (truncated, not JSON, wrong key)."""


class StoreWarning(RetrofitWarning, RuntimeWarning):
    """A store file was unreadable and its run is recomputed (``eval`` goes on)."""


class DatasetWarning(RetrofitWarning):
    """Loaded data differs from its suite file in a way that is worked around."""
