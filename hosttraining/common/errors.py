"""Every exception and warning the training tooling raises (from ``RetrofitError``)."""

from __future__ import annotations

from retrofit.errors import CommandError, RetrofitWarning

__all__ = ["RunFileError", "RunFileWarning"]


class RunFileError(CommandError):
    """A training run's log or resume state cannot be used.

    The file is cut, truncated, another configuration's or incomplete; the
    message names the file and the way out, on one line.
    """


class RunFileWarning(RetrofitWarning, RuntimeWarning):
    """A training log's cut last line (a crash mid-write) was dropped and the run went on."""
