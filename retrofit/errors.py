"""Every exception the retrofit library raises.

Each derives from :class:`RetrofitError` and from the builtin a caller would
catch for that kind of failure (``TypeError`` for a model the retrofit cannot
patch, ``FileNotFoundError`` for a missing checkpoint, ...), so code written
against plain Python exceptions keeps working. The same failure has one type
on every host.
"""

from __future__ import annotations

__all__ = [
    "AlreadyPatchedError",
    "BatchInputError",
    "CheckpointNotFoundError",
    "CommandError",
    "CorruptCheckpointError",
    "DuplicateHostError",
    "EmbeddedCheckpointError",
    "FitStateError",
    "IgnoredSettingWarning",
    "InputWarning",
    "InvalidInputError",
    "InvalidModelPathError",
    "InvalidPatchConfigError",
    "InvalidRowWeightsError",
    "InvalidSampleWeightError",
    "ManifestError",
    "MissingPresenceError",
    "NotPatchedError",
    "NothingMatchedError",
    "OutputExistsError",
    "RetrofitError",
    "RetrofitWarning",
    "SavedModelError",
    "SettingsConflictError",
    "TabPFNInternalsError",
    "UnknownVersionError",
    "UnsafeCheckpointError",
    "UnsupportedArchitectureError",
    "UnsupportedWeightingError",
    "WeightsUnavailableError",
]


class RetrofitError(Exception):
    """Base class of every error the retrofit raises."""


class CommandError(RetrofitError, ValueError):
    """A user-facing failure of a command; its message is printed as one line."""


class UnsupportedArchitectureError(RetrofitError, TypeError):
    """The model (or a submodule a patch table targets) has no patch table."""


class AlreadyPatchedError(RetrofitError, RuntimeError):
    """The model is patched already; unpatch it first."""


class NotPatchedError(RetrofitError, RuntimeError):
    """An operation that needs a patched model got an unpatched one."""


class NothingMatchedError(RetrofitError, LookupError):
    """The patch table found nothing to replace in the model."""


class DuplicateHostError(RetrofitError, ValueError):
    """A host class is registered twice (a patch table or an ICL stage)."""


class InvalidPatchConfigError(RetrofitError, ValueError):
    """A retrofit setting (mode, tau, support, eps_den) is out of range."""


class MissingPresenceError(RetrofitError, ValueError):
    """A patched block or cache needs the presence of rows it was not given."""


class InvalidModelPathError(RetrofitError, TypeError):
    """``model_path`` is of a type the retrofit cannot load a model from."""


class CheckpointNotFoundError(RetrofitError, FileNotFoundError):
    """The model path names no checkpoint on disk."""


class CorruptCheckpointError(RetrofitError, ValueError):
    """The checkpoint exists but tabpfn cannot load it."""


class UnsafeCheckpointError(CorruptCheckpointError):
    """A ``.ckpt`` pickle names objects other than tensors and plain values.

    Unpickling it could run code, so it is refused before anything else reads it.
    """


class InvalidInputError(RetrofitError, ValueError):
    """Data given to ``fit`` or ``predict`` is malformed (e.g. a non-numeric target)."""


class InvalidRowWeightsError(InvalidInputError):
    """Row weights (or presence) of a patched forward are malformed: shape, value or context."""


class InvalidSampleWeightError(InvalidInputError):
    """``sample_weight`` or ``class_weight`` given to an estimator is malformed (shape, value)."""


class UnknownVersionError(RetrofitError, ValueError):
    """A TabPFN version alias (``"v2"``, ``"auto"``, ...) naming no weights the retrofit knows."""


class WeightsUnavailableError(RetrofitError, RuntimeError):
    """The requested TabPFN weights are not on disk and could not be downloaded."""


class EmbeddedCheckpointError(RetrofitError, ValueError):
    """The embedded checkpoint is missing or does not match its SHA-256."""


class SavedModelError(RetrofitError, ValueError):
    """A saved retrofit is malformed, or its base is missing or not the one it was saved from."""


class FitStateError(RetrofitError, ValueError):
    """A fit state cannot be written, or a file is not a fit state this library reads."""


class OutputExistsError(RetrofitError, FileExistsError):
    """The output exists and may not be replaced (no ``--force``, or not replaceable)."""


class SettingsConflictError(RetrofitError, ValueError):
    """An explicit retrofit setting contradicts the one a saved directory carries."""


class TabPFNInternalsError(RetrofitError, RuntimeError):
    """The installed tabpfn lacks a private name a feature needs (``retrofit.tabpfn_surface``)."""


class RetrofitWarning(UserWarning):
    """Base class of the warnings the project itself issues.

    A command prints these as one line each and keeps every other library's
    warnings off stderr (``retrofit.cli.console``).
    """


class IgnoredSettingWarning(RetrofitWarning):
    """A setting was given that the run does not use (``tau`` with ``mode="none"``, say)."""


class InputWarning(RetrofitWarning):
    """Data a fit can use, but likely not as meant (a class that no train row holds, say)."""


class ManifestError(RetrofitError, ValueError):
    """A ``predict-batch`` manifest or a file it names is unusable; messages name the dataset."""


class BatchInputError(RetrofitError, ValueError):
    """A batched prediction's input lists or options are malformed; messages name the dataset."""


class UnsupportedWeightingError(RetrofitError, ValueError):
    """A fit with row weights meets a setting or step it cannot weight; the message names it."""
