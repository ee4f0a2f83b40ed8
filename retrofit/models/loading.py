"""From any ``model_path`` to what it names: one resolver, one result, fresh models.

:func:`resolve_model` is the one resolver: it turns every ``model_path`` the
estimators, the command line, the fit-state archive and the runner take into
one :class:`ResolvedModel` (each entry's checkpoint file, in-memory model or
tabpfn download name, and the saved retrofits, each read and its base verified once).
:func:`load_host` builds a new model object from a single resolved checkpoint
through tabpfn's own loader and wraps it in :class:`tabpfn.ModelSpecs`, which
``TabPFNRegressor`` accepts as ``model_path`` and uses by reference. Every call
builds its own model: tabpfn casts a forced inference dtype into the weights in
place, so a model must never be shared between estimators or runs.

Accepted ``model_path`` entries, tried in order: ``"embedded"`` (the shipped
host), ``"v2"``, ``"v2.5"``, ``"v2.6"``, ``"v3"``, ``"v3.5"`` or ``"auto"``
(tabpfn's default checkpoints and tabpfn's default version, see
:mod:`retrofit.models.weights`), a saved retrofit directory (an adapter naming
its base, see :mod:`retrofit.models.saved`: the base resolves as a
``model_path`` and must have the recorded SHA-256), a local ``.safetensors``/``.ckpt`` file (a bare
name also in tabpfn's model cache, as tabpfn looks), one of tabpfn's checkpoint
names (tabpfn downloads it), a ``ModelSpecs``, None (tabpfn's default); or a
list of these.
"""

from __future__ import annotations

import copy
import dataclasses
import os
from pathlib import Path
from typing import Any

from tabpfn import ModelSpecs, model_loading
from tabpfn.inference_config import cpu_sample_limit
from tabpfn.model_loading import ModelSource

from retrofit.errors import (
    CheckpointNotFoundError,
    CorruptCheckpointError,
    InvalidModelPathError,
    SettingsConflictError,
)
from retrofit.models import saved, weights
from retrofit.models.aliases import AUTO, EMBEDDED, alias_list
from retrofit.models.checkpoints import check_checkpoint
from retrofit.models.embedded import embedded_model_path
from retrofit.models.weights import Which
from retrofit.tabpfn_surface import models_may_be_shared

__all__ = [
    "CHECKPOINT_SUFFIXES",
    "ModelPathLike",
    "ResolvedModel",
    "load_host",
    "resolve_model",
]

ModelPathLike = str | os.PathLike
CHECKPOINT_SUFFIXES = (".safetensors", ".ckpt")


def _tabpfn_file_names() -> frozenset[str]:
    # Every checkpoint file name tabpfn can download (ModelSource.get_* lists them).
    sources = [getattr(ModelSource, n)() for n in dir(ModelSource) if n.startswith("get_")]
    return frozenset(name for source in sources for name in source.filenames)


#: One resolved entry: an existing checkpoint file, a caller's in-memory model, one
#: of tabpfn's checkpoint names still to be downloaded by tabpfn, or None (tabpfn's default).
_Entry = Path | ModelSpecs | str | None


def _checked_file(where: Path) -> Path:
    """An existing file that is a checkpoint: its suffix, and a ``.ckpt`` read weights-only."""
    if where.suffix not in CHECKPOINT_SUFFIXES:
        raise CorruptCheckpointError(
            f"model_path {str(where)!r} is not a TabPFN checkpoint "
            f"(expected {' or '.join(CHECKPOINT_SUFFIXES)})"
        )
    check_checkpoint(where)  # weights-only, before tabpfn unpickles it
    return where.resolve()


def _file_entry(entry: ModelPathLike, which: Which) -> Path | str:
    """A path entry: the checkpoint file it names, or one of tabpfn's names to download."""
    path = Path(entry).expanduser()
    if path.is_dir():
        raise CheckpointNotFoundError(
            f"model_path {str(entry)!r} is a directory, not a checkpoint, and not a "
            f"saved retrofit: it has no {saved.MANIFEST_NAME} ({saved.MANIFEST_NAME} is missing)"
        )
    # tabpfn's own rule: a bare file name not in the working directory is in its model cache.
    where = model_loading.resolve_model_path(path, which=which)[0][0]
    if not where.is_file():
        if where.name in _tabpfn_file_names():
            return str(entry)  # tabpfn downloads one of its own checkpoints when it loads
        raise CheckpointNotFoundError(
            f"model_path {str(entry)!r}: no such file, and not "
            f"{alias_list(embedded=True, auto=True)}, a saved retrofit directory or one of "
            "tabpfn's checkpoint names"
        )
    return _checked_file(where)


def _name_entry(name: str, which: Which) -> Path | str:
    """``"embedded"``, a version alias or ``"auto"``: its checkpoint file; else a file entry."""
    if name == EMBEDDED:
        return Path(embedded_model_path(which))
    if weights.is_version_alias(name):
        # "auto" too: tabpfn's default version, through its own resolver and
        # downloader, with the one-line offline error naming where to place the file.
        return weights.default_weights(name, which=which)
    return _file_entry(name, which)


def _saved_base(found: saved.SavedRetrofit) -> Path:
    """A saved retrofit's base checkpoint, resolved as a ``model_path`` and its SHA-256 checked.

    A name resolves as it does given as ``model_path``, for the recorded kind (an
    alias offline fails with the alias's own one-line error); a path is the file
    there. A base that resolves to no file, or to one with another SHA-256, is
    refused in one line (:meth:`~retrofit.models.saved.SavedRetrofit.verified_base`).
    """
    if found.base.path is not None:
        where = found.base_location()
        return _checked_file(found.verified_base(where))
    try:
        entry = _name_entry(found.base.name, found.base.kind)
    except CheckpointNotFoundError:  # a checkpoint name no longer in tabpfn's cache
        entry = None
    return found.verified_base(entry if isinstance(entry, Path) else None)


def _resolve_entry(entry: Any, which: Which) -> tuple[_Entry, saved.SavedRetrofit | None]:
    """One ``model_path`` entry resolved for a ``which``, and its saved directory."""
    if isinstance(entry, ModelSpecs) or entry is None:
        return entry, None
    if not isinstance(entry, (str, os.PathLike)):
        raise InvalidModelPathError(
            "model_path must be 'auto', 'embedded', a version alias, a path, a ModelSpecs "
            f"or a list of these; got {type(entry).__name__}"
        )
    if entry == EMBEDDED or weights.is_version_alias(entry):
        return _name_entry(str(entry), which), None
    if saved.is_saved_dir(entry):
        found = saved.read_saved(entry)  # read, and its base verified, once, here
        return _saved_base(found), found
    return _file_entry(entry, which), None


def _label(entry: Any) -> str:
    if isinstance(entry, ResolvedModel):
        return entry.label
    if isinstance(entry, ModelSpecs):
        return "ModelSpecs"
    return str(entry)


@dataclasses.dataclass(frozen=True)
class ResolvedModel:
    """A ``model_path`` resolved once: what each entry is, and how the user named it.

    :func:`resolve_model` makes it, from every ``model_path`` the estimators,
    the command line, the fit-state archive and the runner take; resolving an
    already resolved model returns it as it is (a saved directory is hashed once).

    Attributes:
        label: How the user named the model (``"embedded"``, ``"v3"``, a path;
            ``"ModelSpecs"`` for an in-memory model; a list as a list of these).
        entries: One per model: an existing checkpoint file (a ``Path``), the
            caller's ``ModelSpecs``, one of tabpfn's checkpoint names that
            tabpfn downloads when it loads (a ``str``), or None (tabpfn's default).
        saved: The saved retrofits among the entries (each entry is its base,
            verified).
        is_list: Whether ``model_path`` was a list (tabpfn's ensemble of models).
        which: The estimator kind names were resolved for (a saved retrofit's
            base resolves for the kind it records).
    """

    label: str
    entries: tuple[_Entry, ...]
    saved: tuple[saved.SavedRetrofit, ...] = ()
    is_list: bool = False
    which: Which = "regressor"

    @property
    def checkpoint(self) -> Path:
        """The one checkpoint file behind a single model (what :func:`load_host` loads).

        Raises:
            InvalidModelPathError: A list, or an in-memory ``ModelSpecs``.
            CheckpointNotFoundError: One of tabpfn's names not yet downloaded, or None.
        """
        if self.is_list or isinstance(self.entries[0], ModelSpecs):
            raise InvalidModelPathError(
                f"model_path {self.label} is not one checkpoint file; give a name, a "
                "checkpoint file or a saved retrofit directory"
            )
        entry = self.entries[0]
        if not isinstance(entry, Path):
            raise CheckpointNotFoundError(
                f"model_path {self.label!r} names no file here yet; fit an estimator with it "
                f"once (tabpfn downloads its own checkpoints) or give {alias_list(embedded=True)}"
            )
        return entry

    @property
    def by_reference(self) -> bool:
        """Whether tabpfn will use in-memory models by reference; a patch must go to a copy."""
        return any(isinstance(entry, ModelSpecs) for entry in self.entries)

    @property
    def saved_settings(self) -> dict | None:
        """The one set of settings the saved directories carry; None without one.

        Raises:
            SettingsConflictError: Saved directories with different settings.
        """
        distinct = {tuple(found.settings.to_dict().items()) for found in self.saved}
        if len(distinct) > 1:
            raise SettingsConflictError(
                "the saved directories in model_path were retrofitted with different "
                f"settings: {'; '.join(str(dict(s)) for s in sorted(distinct))}"
            )
        return self.saved[0].settings.to_dict() if self.saved else None

    def tabpfn_model_path(self, which: Which) -> Any:
        """What tabpfn's loader takes for these entries, for a ``which`` estimator.

        Files pass as paths, ``ModelSpecs`` as they are; a list mixing the two
        (which tabpfn refuses) has its files loaded by :func:`load_host`, a new
        model object at every call.
        """
        values: list[Any] = [str(e) if isinstance(e, Path) else e for e in self.entries]
        if self.is_list and self.by_reference:
            values = [
                v if isinstance(v, ModelSpecs) else load_host(str(v), which=which) for v in values
            ]
        return values if self.is_list else values[0]


def resolve_model(model_path: Any, which: Which = "regressor") -> ResolvedModel:
    """Resolve any ``model_path`` once, for a regressor or a classifier.

    ``"embedded"``, the version aliases, ``"auto"`` and saved retrofits
    become their checkpoint files (a saved retrofit's base verified once); a
    checkpoint file is checked (its suffix, and a ``.ckpt`` read weights-only);
    tabpfn's own checkpoint names (which tabpfn downloads), ``ModelSpecs`` and
    None pass unchanged. In a list each entry is resolved.

    Args:
        model_path: What ``OTabPFNRegressor(model_path=...)`` (or the
            classifier's) takes: a name, a file, a saved directory, a
            ``ModelSpecs``, a list of these, or an already resolved model.
        which: The estimator kind a name (``"embedded"``, a version alias)
            stands for: ``"regressor"`` or ``"classifier"``.

    Raises:
        InvalidModelPathError: An entry is of a type no loader takes.
        CheckpointNotFoundError: A file that does not exist and is not one tabpfn
            downloads, or a directory that is not a saved retrofit.
        CorruptCheckpointError: A file that is not a checkpoint type.
        SavedModelError: A saved retrofit's ``retrofit.json`` fails its check, or
            its base is missing or has another SHA-256 than the recorded one.
        WeightsUnavailableError: A version alias's weights cannot be had.
        EmbeddedCheckpointError: ``"embedded"`` for a kind this installation does
            not ship, or a shipped file that fails its SHA-256.
    """
    if isinstance(model_path, ResolvedModel):
        return model_path
    given = model_path if isinstance(model_path, list) else [model_path]
    entries: list[_Entry] = []
    found: list[saved.SavedRetrofit] = []
    for entry in given:
        if isinstance(entry, ResolvedModel):  # resolved (and hashed) once, at the boundary
            entries.extend(entry.entries)
            found.extend(entry.saved)
            continue
        value, saved_dir = _resolve_entry(entry, which)
        entries.append(value)
        found.extend([saved_dir] if saved_dir is not None else [])
    label = str([_label(e) for e in given]) if isinstance(model_path, list) else _label(model_path)
    return ResolvedModel(
        label, tuple(entries), tuple(found), isinstance(model_path, list), which=which
    )


def load_host(
    model_path: ModelPathLike | ResolvedModel = AUTO, *, which: Which = "regressor"
) -> ModelSpecs:
    """A freshly built host model with its configs, ready for ``TabPFNRegressor`` (or ``which``).

    tabpfn's per-path limit on CPU training rows (``MAX_CPU_SAMPLES``, by
    version: 1,000 before v3, 5,000 from v3), which its loader sets only for
    checkpoints given by path, replaces the checkpoint's own value here too, so
    an in-memory model fits exactly the rows on CPU that the same checkpoint
    given by path would.

    Args:
        model_path: See :func:`resolve_model`; tabpfn's ``"auto"`` by default, as
            the estimators' (``"embedded"`` names the small offline stand-in).
        which: The estimator kind tabpfn loads the checkpoint for.

    Returns:
        ``ModelSpecs(model, architecture_config, inference_config,
        norm_criterion)`` with a model object no one else holds.

    Raises:
        CheckpointNotFoundError: If the checkpoint does not exist.
        UnsafeCheckpointError: If a ``.ckpt`` pickle holds more than tensors and
            plain values (checked with the weights-only unpickler before tabpfn
            reads the file).
        CorruptCheckpointError: If tabpfn cannot read or build it.
    """
    path = resolve_model(model_path, which).checkpoint
    check_checkpoint(path)  # a name's file too, not only a local one
    try:
        model, criterion, arch_config, inference_config = model_loading.load_model(
            path=path, estimator_type=which
        )
    except Exception as err:
        first = (str(err).strip().splitlines() or [""])[0][:200]
        raise CorruptCheckpointError(
            f"cannot load TabPFN checkpoint {path}: {type(err).__name__}: {first}"
        ) from err
    if models_may_be_shared():
        # TABPFN_MODEL_CACHE_SIZE shares built models between calls; ours must not be.
        model = copy.deepcopy(model)
    version = model_loading.resolve_model_version(path)
    inference_config = dataclasses.replace(
        inference_config, MAX_CPU_SAMPLES=cpu_sample_limit(version)
    )
    return ModelSpecs(
        model=model,
        architecture_config=arch_config,
        inference_config=inference_config,
        norm_criterion=criterion,
    )
