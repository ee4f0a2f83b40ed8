"""A saved retrofit: an adapter that names its base model and holds no copy of its weights.

A retrofit adds no parameter (every patch shares the host's tensors), so a
saved retrofit is what PEFT calls an adapter: the retrofit settings and the
identity of the model they apply to. ``tabpfn-retrofit patch --out DIR``
writes one file, no weights::

    DIR/retrofit.json
      format        "tabpfn-retrofit-adapter/1"
      settings      mode, tau, support, eps_den (resolved: an unset tau is the host's default)
      base          the model the settings apply to, exactly one of
                      name    "embedded", "auto", a version alias ("v2.6") or one of
                              tabpfn's checkpoint names in its model cache: resolved as
                              a model_path is (retrofit.models.loading), for ``kind``
                      path    a checkpoint file: as given when absolute (or ``~/...``),
                              else relative to DIR
                    and
                      kind    "regressor" or "classifier": what a name was resolved for
                      sha256  the SHA-256 of the checkpoint file the retrofit was saved from
      kinds         what the retrofitted model does: the estimators that load DIR
      patch_digest  PatchReport.digest() of the patch the settings make (None: mode "none")
      versions      tabpfn-retrofit, tabpfn and torch at saving

Relative paths: a base given to ``patch`` by a relative path is recorded
relative to DIR (rewritten from where it was given), so a folder holding both
the adapter and its base can move, and an adapter loads the same from any
working directory; an absolute path stays as given.

Loading (:func:`retrofit.models.loading.resolve_model`) reads this file
(:func:`read_saved`), resolves the base, and refuses a base that is missing or
whose SHA-256 changed (:meth:`SavedRetrofit.verified_base`), in one line
naming the base, both digests and what to do. The settings are then the
defaults (:func:`retrofit.settings.resolve_settings`): a setting given
explicitly must equal the saved one, otherwise :class:`SettingsConflictError`.
The SHA-256 guards against a base that changed, not against an edited
``retrofit.json``: whoever can edit it can write any base and digest.

A directory of the format before adapters (``tabpfn-retrofit-saved/1``, a copy
of the host's weights beside ``retrofit.json``) is refused in one line naming
the way out: run ``patch`` again. ``patch --force`` may replace such a
directory.

Writing: ``retrofit.json`` is written atomically (a temporary file renamed),
so a reader sees the old file or the new one, never part of one; DIR is created
when missing (and removed again when the write fails), and may be an empty
directory. Replacing (``overwrite``) is allowed only for a saved retrofit
directory or a file, never for any other directory (:func:`check_replaceable`).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from retrofit.errors import InvalidPatchConfigError, OutputExistsError, SavedModelError
from retrofit.files import missing_dirs, remove_empty_dirs, sha256_of_checkpoint, write_text_atomic
from retrofit.models.weights import KINDS, Which
from retrofit.settings import SETTING_NAMES, RetrofitSettings
from retrofit.versions import package_versions

__all__ = [
    "FORMAT",
    "MANIFEST_NAME",
    "BaseIdentity",
    "SavedRetrofit",
    "check_patch_digest",
    "check_replaceable",
    "is_saved_dir",
    "read_saved",
    "recorded_path",
    "write_saved",
]

#: Identifies the layout of ``retrofit.json``; bumped on incompatible changes.
FORMAT = "tabpfn-retrofit-adapter/1"
MANIFEST_NAME = "retrofit.json"
#: The format before adapters, which copied the host's weights: refused, named.
_WEIGHTS_FORMAT = "tabpfn-retrofit-saved/1"
#: That format's weights file, which ``--force`` may replace with the directory.
_WEIGHTS_FILE = re.compile(r".+_retrofit\.safetensors")
_VERSIONED_PACKAGES = ("tabpfn-retrofit", "tabpfn", "torch")
_FIELDS = ("format", "settings", "base", "kinds", "patch_digest", "versions")
_SHORT = 12  # hex characters of a SHA-256 a message shows


@dataclass(frozen=True)
class BaseIdentity:
    """The identity of the model a saved retrofit applies to: a name or a path, kind, SHA-256.

    Attributes:
        name: ``"embedded"``, ``"auto"``, a version alias or a tabpfn checkpoint
            name, resolved as a ``model_path`` is; None for a path.
        path: A checkpoint file, absolute (or ``~/...``) or relative to the
            saved directory; None for a name.
        kind: The estimator kind a name is resolved for.
        sha256: The checkpoint file's SHA-256.
    """

    name: str | None
    path: str | None
    kind: Which
    sha256: str

    @property
    def label(self) -> str:
        """The base as ``retrofit.json`` records it (the name or the path)."""
        return self.name if self.name is not None else str(self.path)

    def to_dict(self) -> dict[str, str]:
        """The ``base`` object of ``retrofit.json``."""
        named = {"name": self.name} if self.name is not None else {"path": str(self.path)}
        return {**named, "kind": self.kind, "sha256": self.sha256}


def recorded_path(
    given: str,
    directory: str | os.PathLike[str],
    *,
    relative_to: str | os.PathLike[str] = ".",
) -> str:
    """How ``retrofit.json`` in ``directory`` records a base file given as ``given``.

    An absolute path (or one starting with ``~``) is recorded as given; a
    relative one names a file relative to ``relative_to`` (the working
    directory, or the saved retrofit that recorded it) and is rewritten
    relative to ``directory``. Paths are taken as written: symbolic links are
    kept, not followed.
    """
    if given.startswith("~") or Path(given).is_absolute():
        return given
    where = os.path.abspath(os.path.join(relative_to, given))
    return os.path.relpath(where, os.path.abspath(directory))


@dataclass(frozen=True)
class SavedRetrofit:
    """A saved retrofit directory, read and checked; its base is not touched here.

    Attributes:
        directory: The directory.
        settings: The retrofit settings (validated by :class:`RetrofitSettings`).
        base: The model they apply to.
        kinds: What the retrofitted model does: ``("regressor",)``,
            ``("classifier",)`` or both (v3.5).
        patch_digest: The digest of the patch the settings made when saved.
        versions: The package versions at saving.
    """

    directory: Path
    settings: RetrofitSettings
    base: BaseIdentity
    kinds: tuple[Which, ...]
    patch_digest: str | None
    versions: dict[str, str]

    @property
    def manifest_path(self) -> Path:
        """``DIR/retrofit.json``."""
        return self.directory / MANIFEST_NAME

    def base_location(self) -> Path:
        """Where a path base is: its absolute path, or its path joined to the directory.

        Raises:
            SavedModelError: The base is a name, not a path.
        """
        if self.base.path is None:
            raise SavedModelError(f"{self.manifest_path} names its base {self.base.name!r}")
        path = Path(self.base.path).expanduser()
        return path if path.is_absolute() else Path(os.path.abspath(self.directory / path))

    def verified_base(self, file: Path | None) -> Path:
        """``file`` if it holds the recorded base; else the one-line refusal.

        Args:
            file: The checkpoint the base resolved to; None when it resolved to no file.

        Raises:
            SavedModelError: No file, or one whose SHA-256 is not the recorded
                one, naming the base, both digests and what to do.
        """
        expected = self.base.sha256
        found = sha256_of_checkpoint(file) if file is not None and file.is_file() else None
        if found == expected:
            return file
        where = f" ({file})" if file is not None and str(file) != self.base.label else ""
        if found is None:
            state = f"is missing{where}: expected SHA-256 {expected[:_SHORT]}, found no file"
            restore = "put that checkpoint back"
        else:
            state = (
                f"changed since the retrofit was saved{where}: expected SHA-256 "
                f"{expected[:_SHORT]}, found {found[:_SHORT]}"
            )
            restore = "restore that checkpoint"
        raise SavedModelError(
            f"saved retrofit {self.directory}: its base {self.base.label!r} {state}; "
            f"{restore}, or retrofit the base you have into this directory again with "
            f"'{self.patch_command()}'"
        )

    def patch_command(self) -> str:
        """The ``tabpfn-retrofit patch`` command that writes this directory again."""
        s, base = self.settings, self.base
        model = base.name if base.name is not None else str(self.base_location())
        task = " --task classification" if base.kind == "classifier" else ""
        return (
            f"tabpfn-retrofit patch --model {model}{task} --mode {s.mode} --tau {s.tau!r} "
            f"--support {s.support} --eps-den {s.eps_den!r} --out {self.directory} --force"
        )


def is_saved_dir(path: object) -> bool:
    """Whether ``path`` names a directory holding a ``retrofit.json``."""
    if not isinstance(path, (str, os.PathLike)):
        return False
    p = Path(path).expanduser()
    return p.is_dir() and (p / MANIFEST_NAME).is_file()


def check_replaceable(out_dir: str | os.PathLike[str], *, overwrite: bool) -> None:
    """Refuses an ``out_dir`` that writing a saved retrofit there may not replace.

    Nothing there, or an empty directory, is fine. With ``overwrite`` a file,
    or a saved retrofit directory holding only its ``retrofit.json`` (and the
    weights file of the format before adapters), may be replaced; any other
    directory never is (it may hold the user's files).

    Raises:
        OutputExistsError: ``out_dir`` exists and may not be replaced.
    """
    out = Path(out_dir).expanduser()
    empty_dir = out.is_dir() and not out.is_symlink() and not any(out.iterdir())
    if not os.path.lexists(out) or empty_dir:
        return
    if not overwrite:
        raise OutputExistsError(f"{out} already exists (use --force to replace it)")
    if out.is_symlink() or not out.is_dir():
        return
    if not (out / MANIFEST_NAME).is_file():
        raise OutputExistsError(
            f"{out} is a directory but not a saved retrofit (no {MANIFEST_NAME}); "
            "--force replaces only a saved retrofit directory or a file"
        )
    others = sorted(
        entry.name
        for entry in out.iterdir()
        if entry.name != MANIFEST_NAME and not _WEIGHTS_FILE.fullmatch(entry.name)
    )
    if others:
        raise OutputExistsError(
            f"{out} holds files a saved retrofit does not ({', '.join(others[:5])}); "
            "--force replaces only a saved retrofit directory, move them first"
        )


def write_saved(
    out_dir: str | os.PathLike[str],
    *,
    settings: RetrofitSettings,
    base: BaseIdentity,
    kinds: Collection[Which],
    patch_digest: str | None,
    overwrite: bool = False,
) -> SavedRetrofit:
    """Writes a saved retrofit: ``out_dir/retrofit.json``, and nothing else.

    The caller resolved the settings and patched the base with them
    (:func:`retrofit.save_patched`); they are written as given.

    Args:
        out_dir: The directory to create (or an empty one, or one to replace).
        settings: The resolved settings.
        base: The base, as it is to be recorded (:func:`recorded_path` for a file).
        kinds: What the retrofitted model does.
        patch_digest: ``PatchReport.digest()`` of the patch (None: mode ``"none"``).
        overwrite: Replace an existing saved retrofit directory or file.

    Returns:
        The saved retrofit, read back.

    Raises:
        OutputExistsError: ``out_dir`` exists and may not be replaced
            (:func:`check_replaceable`).
    """
    out = Path(out_dir).expanduser()
    check_replaceable(out, overwrite=overwrite)
    manifest = {
        "format": FORMAT,
        "settings": settings.to_dict(),
        "base": base.to_dict(),
        "kinds": [kind for kind in KINDS if kind in kinds],
        "patch_digest": patch_digest,
        "versions": package_versions(_VERSIONED_PACKAGES),
    }
    text = json.dumps(manifest, indent=2) + "\n"
    created = missing_dirs(out)
    try:
        if out.is_symlink() or out.is_file():
            out.unlink()  # the file (or link) --force replaces
        out.mkdir(parents=True, exist_ok=True)
        write_text_atomic(out / MANIFEST_NAME, text)
    except BaseException:
        remove_empty_dirs(created)
        raise
    for entry in out.iterdir():  # a replaced directory of the format before adapters
        if _WEIGHTS_FILE.fullmatch(entry.name):
            entry.unlink()
    return read_saved(out)


def _parse_json_once_per_key(text: str, path: Path) -> Any:
    """``text`` parsed as JSON, refusing an object that names a key twice.

    Raises:
        SavedModelError: Naming ``path`` and the repeated key (json would keep
            the last value silently: which one was meant is unknown).
        json.JSONDecodeError: ``text`` is not JSON.
    """
    repeated: list[str] = []

    def pairs_to_dict(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        keys = [key for key, _ in pairs]
        repeated.extend(key for key in keys if keys.count(key) > 1)
        return dict(pairs)

    data = json.loads(text, object_pairs_hook=pairs_to_dict)
    if repeated:
        raise SavedModelError(f"{path} names the key {repeated[0]!r} twice")
    return data


def _object(value: Any, path: Path, field: str | None, keys: Collection[str]) -> dict[str, Any]:
    """``value`` when it is an object holding exactly ``keys``; else the one-line refusal.

    ``field`` names it in the message; None: the file's top level.
    """
    subject = f"{path}: field {field}" if field else str(path)
    if not isinstance(value, dict):
        raise SavedModelError(f"{subject} must be an object, got {type(value).__name__}")
    missing = [key for key in keys if key not in value]
    unknown = sorted(set(value) - set(keys))
    if missing or unknown:
        lacks = f"lacks {', '.join(missing)}" if missing else ""
        extra = f"holds {', '.join(unknown)}, which it does not take" if unknown else ""
        raise SavedModelError(f"{subject} {'; '.join(p for p in (lacks, extra) if p)}")
    return value


def _text(value: Any, path: Path, field: str) -> str:
    if not isinstance(value, str) or not value:
        raise SavedModelError(
            f"{path}: field {field} must be text, got {type(value).__name__} {value!r}"
        )
    return value


def _settings(value: Any, path: Path) -> RetrofitSettings:
    fields = _object(value, path, "settings", SETTING_NAMES)
    try:
        return RetrofitSettings(**fields)
    except InvalidPatchConfigError as exc:
        raise SavedModelError(f"{path}: field settings: {exc}") from None


def _base(value: Any, path: Path) -> BaseIdentity:
    named = "name" if isinstance(value, dict) and "name" in value else "path"
    fields = _object(value, path, "base", (named, "kind", "sha256"))
    where = _text(fields[named], path, f"base.{named}")
    if named == "name" and Path(where).name != where:
        raise SavedModelError(
            f"{path}: field base.name {where!r} is a path; a file is recorded as base.path"
        )
    kind = fields["kind"]
    if kind not in KINDS:
        raise SavedModelError(
            f"{path}: field base.kind must be one of {', '.join(KINDS)}, got {kind!r}"
        )
    digest = _text(fields["sha256"], path, "base.sha256")
    if len(digest) != 64 or set(digest) - set("0123456789abcdef"):
        raise SavedModelError(
            f"{path}: field base.sha256 must be 64 lowercase hex digits, got {digest!r}"
        )
    return BaseIdentity(
        name=where if named == "name" else None,
        path=where if named == "path" else None,
        kind=kind,
        sha256=digest,
    )


def _kinds(value: Any, path: Path, base: BaseIdentity) -> tuple[Which, ...]:
    if (
        not isinstance(value, list)
        or not value
        or len(set(map(str, value))) != len(value)
        or not set(value) <= set(KINDS)
    ):
        raise SavedModelError(
            f"{path}: field kinds must list one or both of {', '.join(KINDS)}, got {value!r}"
        )
    if base.kind not in value:
        raise SavedModelError(
            f"{path}: field base.kind {base.kind!r} is not among the kinds {value!r}"
        )
    return tuple(kind for kind in KINDS if kind in value)


def read_saved(directory: str | os.PathLike[str]) -> SavedRetrofit:
    """Reads and checks a saved retrofit directory's ``retrofit.json``; the base is not read.

    Args:
        directory: A directory written by :func:`write_saved`.

    Returns:
        The saved retrofit.

    Raises:
        SavedModelError: In one line naming the file: no or unreadable
            ``retrofit.json``, one naming a key twice, the format before adapters
            (run ``patch`` again), an unknown format, a field missing, unknown, of
            the wrong type or out of range (the settings are checked by
            :class:`RetrofitSettings`).
    """
    root = Path(directory).expanduser()
    path = root / MANIFEST_NAME
    if not path.is_file():
        raise SavedModelError(f"{root} is not a saved retrofit: no {MANIFEST_NAME}")
    try:
        manifest = _parse_json_once_per_key(path.read_text(encoding="utf-8"), path)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SavedModelError(f"cannot read {path}: {exc}") from exc
    found = manifest.get("format") if isinstance(manifest, dict) else None
    if found == _WEIGHTS_FORMAT:
        raise SavedModelError(
            f"{root} is a saved retrofit of the format before adapters ({found}, a copy of "
            "the host's weights), which this version no longer reads; save it again as an "
            f"adapter with 'tabpfn-retrofit patch --model BASE --out {root} --force'"
        )
    if found != FORMAT:
        raise SavedModelError(f"{path} has format {found!r}, expected {FORMAT!r}")
    manifest = _object(manifest, path, None, _FIELDS)
    base = _base(manifest["base"], path)
    digest = manifest["patch_digest"]
    if digest is not None:
        _text(digest, path, "patch_digest")
    versions = manifest["versions"]
    if not isinstance(versions, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in versions.items()
    ):
        raise SavedModelError(f"{path}: field versions must map package names to versions")
    return SavedRetrofit(
        directory=root,
        settings=_settings(manifest["settings"], path),
        base=base,
        kinds=_kinds(manifest["kinds"], path, base),
        patch_digest=digest,
        versions=dict(versions),
    )


def check_patch_digest(saved: SavedRetrofit, digests: Collection[str | None]) -> None:
    """Refuses a saved retrofit whose recorded patch is not the one just applied.

    ``retrofit.json`` records ``PatchReport.digest()`` of the patch its settings
    make (None for mode ``"none"``); a model loaded from it is patched with those
    settings, so its digest must be among ``digests``.

    Args:
        saved: The saved retrofit.
        digests: The digests of the patches made from it (None: no patch).

    Raises:
        SavedModelError: Naming ``retrofit.json`` and both digests.
    """
    if saved.patch_digest not in digests:
        found = ", ".join(sorted(str(d) for d in set(digests)))
        raise SavedModelError(
            f"{saved.manifest_path} records patch_digest {saved.patch_digest!r}, but its "
            f"settings patch the model to {found} (the file was modified, or saved by another "
            "version of tabpfn or the retrofit): patch the base again"
        )
