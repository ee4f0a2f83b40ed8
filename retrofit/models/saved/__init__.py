"""A retrofitted model on disk: the original weights plus the retrofit settings.

A saved directory holds exactly two files, no pickle::

    DIR/tabpfn_v3_regressor_retrofit.safetensors   the host checkpoint, unchanged
                                                   weights, readable by tabpfn's loader
                                                   (``_classifier_`` for a classifier;
                                                   neither for v3.5, which does both)
    DIR/retrofit.json                              mode, tau, support, eps_den, the
                                                   SHA-256 of the weights file and of
                                                   the source checkpoint, versions

The retrofit adds no parameters (every patch shares the host's tensors), so the
weights are the source checkpoint's, re-saved with
:func:`tabpfn.checkpoint.save_as_safetensors`; the file name keeps the version
(``v3``, ``v2``) because tabpfn reads the version from it. Loading verifies the
SHA-256 before anything reads the weights.

Settings precedence (one rule, used by the estimator and the command line): the
directory's settings are the defaults. A setting given explicitly (not ``None``)
must equal the saved one, otherwise :class:`SettingsConflictError`; to change a
setting, patch the source again into a new directory.

The directory is written next to its destination under a hidden temporary name
(``.DIR.tmp-PID-*``) and renamed into place, so a crash never leaves a
half-written ``DIR``; the next write beside it removes the leftovers of a
process that is gone (and puts back a ``DIR`` it had moved aside). Replacing
(``overwrite``) is allowed only for a saved retrofit directory or a file,
never for any other directory (:func:`check_replaceable`). The directory and
its files get the permissions ``mkdir`` and ``open`` would give them (the
umask), or those of the directory and files they replace.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from tabpfn.checkpoint import save_as_safetensors

from retrofit.errors import (
    InvalidPatchConfigError,
    OutputExistsError,
    SavedModelError,
)
from retrofit.files import (
    default_dir_mode,
    default_file_mode,
    missing_dirs,
    process_alive,
    remove_empty_dirs,
    sha256_file,
    sha256_of_checkpoint,
)
from retrofit.models.checkpoints import load_checkpoint
from retrofit.models.weights import KINDS, Which
from retrofit.settings import SETTING_NAMES, check_given
from retrofit.versions import package_versions

__all__ = [
    "FORMAT",
    "MANIFEST_NAME",
    "WEIGHTS_SUFFIX",
    "SavedRetrofit",
    "check_patch_digest",
    "check_replaceable",
    "is_saved_dir",
    "load_saved",
    "remove_leftovers",
    "write_saved",
]

#: Identifies the layout of ``retrofit.json``; bumped on incompatible changes.
FORMAT = "tabpfn-retrofit-saved/1"
MANIFEST_NAME = "retrofit.json"
#: The only weights format a saved directory admits.
WEIGHTS_SUFFIX = ".safetensors"
# The checkpoint keys tabpfn's loader reads (model_loading._build_model and
# _get_inference_config_from_checkpoint); anything else is left out.
_CHECKPOINT_KEYS = ("config", "architecture_name", "inference_config")
_VERSIONED_PACKAGES = ("tabpfn-retrofit", "tabpfn", "torch", "safetensors")


@dataclass(frozen=True)
class SavedRetrofit:
    """A verified saved retrofit directory.

    Attributes:
        directory: The directory.
        checkpoint: The weights file inside it (verified against its SHA-256).
        settings: ``mode``, ``tau``, ``support``, ``eps_den``.
        manifest: The whole parsed ``retrofit.json``.
    """

    directory: Path
    checkpoint: Path
    settings: dict[str, Any]
    manifest: dict[str, Any]

    @property
    def kinds(self) -> tuple[Which, ...]:
        """What the saved model does, as its weights file name says.

        ``("regressor",)``, ``("classifier",)``, or both for a v3.5 model.
        """
        for kind in KINDS:
            if self.checkpoint.name.endswith(f"_{kind}_retrofit{WEIGHTS_SUFFIX}"):
                return (kind,)
        return KINDS


def is_saved_dir(path: object) -> bool:
    """Whether ``path`` names a directory holding a ``retrofit.json``."""
    if not isinstance(path, (str, os.PathLike)):
        return False
    p = Path(path).expanduser()
    return p.is_dir() and (p / MANIFEST_NAME).is_file()


def check_replaceable(out_dir: str | os.PathLike[str], *, overwrite: bool) -> None:
    """Refuses an ``out_dir`` that writing a saved directory there may not replace.

    Nothing there is fine. With ``overwrite`` a file, or a saved retrofit
    directory holding only its ``retrofit.json`` and weights, may be replaced;
    any other directory never is (it may hold the user's files).

    Raises:
        OutputExistsError: ``out_dir`` exists and may not be replaced.
    """
    out = Path(out_dir).expanduser()
    if not os.path.lexists(out):
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
        if entry.name != MANIFEST_NAME and not _is_weights_file_name(entry.name)
    )
    if others:
        raise OutputExistsError(
            f"{out} holds files a saved retrofit does not ({', '.join(others[:5])}); "
            "--force replaces only a saved retrofit directory, move them first"
        )


def _is_weights_file_name(name: str) -> bool:
    return name.endswith(f"_retrofit{WEIGHTS_SUFFIX}")


# Leftovers of a killed write beside DIR: .DIR.tmp-PID-XXXX and .DIR.old-PID.
def _leftover_pattern(out: Path) -> re.Pattern[str]:
    return re.compile(rf"\.{re.escape(out.name)}\.(tmp|old)-(\d+)(?:-.*)?")


def remove_leftovers(out_dir: str | os.PathLike[str]) -> list[Path]:
    """Removes what a killed write of ``out_dir`` left beside it; returns what it removed.

    Only leftovers of processes that no longer run are touched. A ``.DIR.old-PID``
    (the previous ``DIR``, moved aside just before the new one was renamed in)
    is put back when ``DIR`` itself is missing.
    """
    out = Path(out_dir).expanduser()
    if not out.parent.is_dir():
        return []
    pattern = _leftover_pattern(out)
    removed: list[Path] = []
    for entry in sorted(out.parent.iterdir()):
        match = pattern.fullmatch(entry.name)
        if match is None or process_alive(int(match.group(2))):
            continue
        if match.group(1) == "old" and not os.path.lexists(out):
            os.rename(entry, out)
            continue
        _remove(entry)
        removed.append(entry)
    return removed


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def _match_modes(tmp: Path, out: Path) -> None:
    """Gives ``tmp`` and its files the modes of the ``out`` they replace, else the umask's.

    ``mkdtemp`` makes the folder 0700 and a writer may use a private temporary
    file too, so every mode is set explicitly.
    """
    replaced = out.is_dir() and not out.is_symlink()
    for entry in tmp.iterdir():
        old = out / entry.name
        keep = replaced and old.is_file()
        os.chmod(entry, stat.S_IMODE(old.stat().st_mode) if keep else default_file_mode())
    os.chmod(tmp, stat.S_IMODE(out.stat().st_mode) if replaced else default_dir_mode())


def _weights_file_name(architecture_name: str, kinds: Collection[str]) -> str:
    # tabpfn picks the version from the file name ("v3" in it -> v3, "v3.5" ->
    # v3.5, none of its identifiers -> v2), so the architecture name leads it,
    # with its minor version written as tabpfn spells it ("tabpfn_v3_5" -> "tabpfn_v3.5");
    # the kind follows, as in tabpfn's own names, unless the model does both.
    versioned = re.sub(r"^(tabpfn_v\d+)_(\d+)$", r"\1.\2", architecture_name)
    kind = f"_{next(iter(kinds))}" if len(kinds) == 1 else ""
    return f"{versioned}{kind}_retrofit{WEIGHTS_SUFFIX}"


def write_saved(
    source_checkpoint: str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    *,
    settings: Mapping[str, Any],
    patch_digest: str | None = None,
    source_label: str | None = None,
    kinds: Collection[str] = ("regressor",),
    overwrite: bool = False,
) -> SavedRetrofit:
    """Write ``source_checkpoint``'s weights and ``settings`` as a saved directory.

    The settings are written as given; validate them first (the caller patches
    a model with them, see ``retrofit.save_patched``).

    Args:
        source_checkpoint: A ``.ckpt`` or ``.safetensors`` file tabpfn can read.
        out_dir: The directory to create.
        settings: ``mode``, ``tau``, ``support``, ``eps_den``.
        patch_digest: ``PatchReport.digest()`` of the model patched with these
            settings, recorded for provenance.
        source_label: How the user named the source (``"embedded"``, ``"v3"``, a path).
        kinds: What the model does (:func:`retrofit.models.kinds.host_kinds`):
            ``("regressor",)``, ``("classifier",)`` or both; it names the weights file.
        overwrite: Replace an existing ``out_dir`` (only once the new one is complete).

    Returns:
        The saved directory, as :func:`load_saved` reads it.

    Raises:
        OutputExistsError: ``out_dir`` exists and ``overwrite`` is false, or it
            is a directory that is not a saved retrofit (see
            :func:`check_replaceable`), or it is ``source_checkpoint`` itself.
        SavedModelError: ``settings`` lacks a setting, or the checkpoint has no
            state dict.
        retrofit.errors.UnsafeCheckpointError: A ``.ckpt`` source holds more
            than tensors and plain values (read with the weights-only unpickler).
    """
    missing = [name for name in SETTING_NAMES if name not in settings]
    if missing:
        raise SavedModelError(f"settings lack {', '.join(missing)}")
    if not kinds or not set(kinds) <= set(KINDS):
        raise SavedModelError(f"kinds must be among {', '.join(KINDS)}, got {list(kinds)}")
    source = Path(source_checkpoint)
    out = Path(out_dir).expanduser()
    remove_leftovers(out)
    check_replaceable(out, overwrite=overwrite)
    if out.exists() and out.resolve() == source.resolve():
        raise OutputExistsError(f"{out} is the source checkpoint; give another directory")

    checkpoint = load_checkpoint(source)
    if not isinstance(checkpoint.get("state_dict"), dict):
        raise SavedModelError(f"{source} holds no state_dict; it is not a TabPFN checkpoint")
    architecture_name = checkpoint.get("architecture_name", "tabpfn_v2")
    kept = {"state_dict": checkpoint["state_dict"]}
    kept.update({k: checkpoint[k] for k in _CHECKPOINT_KEYS if k in checkpoint})
    weights_name = _weights_file_name(architecture_name, set(kinds))

    created = missing_dirs(out.parent)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-{os.getpid()}-", dir=out.parent))
    try:
        save_as_safetensors(kept, tmp / weights_name)
        manifest = {
            "format": FORMAT,
            "settings": {name: settings[name] for name in SETTING_NAMES},
            "weights": {"file": weights_name, "sha256": sha256_file(tmp / weights_name)},
            "source": {
                "label": source_label if source_label is not None else str(source),
                "file": source.name,
                "sha256": sha256_file(source),
                "dropped_keys": sorted(
                    k for k in checkpoint if k != "state_dict" and k not in _CHECKPOINT_KEYS
                ),
            },
            "architecture_name": architecture_name,
            "patch_digest": patch_digest,
            "versions": package_versions(_VERSIONED_PACKAGES),
            "created_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        }
        (tmp / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
        _match_modes(tmp, out)
        _move_into_place(tmp, out, overwrite=overwrite)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        remove_empty_dirs(created)
        raise
    return load_saved(out)


def _move_into_place(tmp: Path, out: Path, *, overwrite: bool) -> None:
    if not os.path.lexists(out):
        os.rename(tmp, out)
        return
    check_replaceable(out, overwrite=overwrite)  # again: it may have changed meanwhile
    old = out.parent / f".{out.name}.old-{os.getpid()}"
    os.rename(out, old)
    try:
        os.rename(tmp, out)
    except BaseException:
        os.rename(old, out)
        raise
    _remove(old)  # a directory, or the file (or link) --force replaced


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


def _check_field_types(manifest_path: Path, manifest: dict, settings: dict[str, Any]) -> None:
    """Refuses a field of the wrong type, naming the file and the field.

    Raises:
        SavedModelError: A setting out of range or of the wrong type, or a
            weights file name, SHA-256 or patch digest that is not text.
    """
    for name, value in settings.items():
        try:
            if value is None:
                raise InvalidPatchConfigError("no value")
            check_given({name: value})
        except InvalidPatchConfigError as exc:
            raise SavedModelError(f"{manifest_path}: field settings.{name}: {exc}") from None
    texts = {
        "weights.file": manifest["weights"]["file"],
        "weights.sha256": manifest["weights"]["sha256"],
    }
    if manifest.get("patch_digest") is not None:
        texts["patch_digest"] = manifest["patch_digest"]
    for field, value in texts.items():
        if not isinstance(value, str):
            raise SavedModelError(
                f"{manifest_path}: field {field} must be text, got {type(value).__name__} {value!r}"
            )


def check_patch_digest(saved: SavedRetrofit, digests: Collection[str | None]) -> None:
    """Refuses a saved directory whose recorded patch is not the one just applied.

    ``retrofit.json`` records ``PatchReport.digest()`` of the patch its settings
    make (None for mode ``"none"``); a model loaded from it is patched with those
    settings, so its digest must be among ``digests``.

    Args:
        saved: The loaded directory.
        digests: The digests of the patches made from it (None: no patch).

    Raises:
        SavedModelError: Naming ``retrofit.json`` and both digests.
    """
    recorded = saved.manifest.get("patch_digest")
    if recorded not in digests:
        found = ", ".join(sorted(str(d) for d in set(digests)))
        raise SavedModelError(
            f"{saved.directory / MANIFEST_NAME} records patch_digest {recorded!r}, but its "
            f"settings patch the model to {found} (the file was modified, or saved by another "
            "version of tabpfn or the retrofit): patch the source again"
        )


def load_saved(directory: str | os.PathLike[str]) -> SavedRetrofit:
    """Read and verify a saved retrofit directory.

    Args:
        directory: A directory written by :func:`write_saved`.

    Returns:
        The directory, its verified weights file and its settings.

    Raises:
        SavedModelError: No or unreadable ``retrofit.json``, one naming a key
            twice, a field of the wrong type or out of range, an unknown format,
            a weights file that is not ``.safetensors``, a missing weights file,
            or a SHA-256 mismatch (a modified file). The SHA-256 guards the
            files' integrity, not their origin: whoever can edit the directory
            can write a matching hash.
    """
    root = Path(directory).expanduser()
    manifest_path = root / MANIFEST_NAME
    if not manifest_path.is_file():
        raise SavedModelError(f"{root} is not a saved retrofit: no {MANIFEST_NAME}")
    try:
        manifest = _parse_json_once_per_key(manifest_path.read_text(), manifest_path)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SavedModelError(f"cannot read {manifest_path}: {exc}") from exc
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        found = manifest.get("format") if isinstance(manifest, dict) else None
        raise SavedModelError(f"{manifest_path} has format {found!r}, expected {FORMAT!r}")
    try:
        settings = {name: manifest["settings"][name] for name in SETTING_NAMES}
        weights_name = manifest["weights"]["file"]
        expected_sha = manifest["weights"]["sha256"]
    except KeyError as exc:
        raise SavedModelError(f"{manifest_path} lacks the field {exc}") from exc
    except TypeError:
        raise SavedModelError(
            f"{manifest_path}: fields settings and weights must be objects (name: value)"
        ) from None
    _check_field_types(manifest_path, manifest, settings)
    weights = root / weights_name
    if not weights_name.endswith(WEIGHTS_SUFFIX):
        # tabpfn unpickles any other file; a matching SHA-256 proves no origin.
        raise SavedModelError(
            f"{manifest_path} names the weights file {weights_name!r}; a saved retrofit "
            f"holds {WEIGHTS_SUFFIX} weights only (no pickle)"
        )
    if Path(weights_name).name != weights_name or not weights.is_file():
        raise SavedModelError(f"{root} lacks its weights file {weights_name}")
    actual_sha = sha256_of_checkpoint(weights)
    if actual_sha != expected_sha:
        raise SavedModelError(
            f"SHA-256 mismatch for {weights}: expected {expected_sha}, found {actual_sha} "
            "(the file was modified or is incomplete)"
        )
    return SavedRetrofit(root, weights, settings, manifest)
