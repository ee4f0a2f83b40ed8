"""A retrofitted model on disk: the original weights plus the retrofit settings.

A saved directory holds exactly two files, no pickle::

    DIR/tabpfn_v3_regressor_retrofit.safetensors   the host checkpoint, unchanged
                                                   weights, readable by tabpfn's loader
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
and renamed into place, so a crash never leaves a half-written ``DIR``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from tabpfn.checkpoint import save_as_safetensors

from retrofit.checkpoints import load_checkpoint
from retrofit.errors import (
    SavedModelError,
    SettingsConflictError,
)
from retrofit.hashing import sha256_file
from retrofit.settings import SETTING_NAMES
from retrofit.versions import package_versions

__all__ = [
    "FORMAT",
    "MANIFEST_NAME",
    "WEIGHTS_SUFFIX",
    "SavedModelError",
    "SavedRetrofit",
    "SettingsConflictError",
    "is_saved_dir",
    "load_saved",
    "sha256_file",
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


def is_saved_dir(path: object) -> bool:
    """Whether ``path`` names a directory holding a ``retrofit.json``."""
    if not isinstance(path, (str, os.PathLike)):
        return False
    p = Path(path).expanduser()
    return p.is_dir() and (p / MANIFEST_NAME).is_file()


def _weights_file_name(architecture_name: str) -> str:
    # tabpfn picks the version from the file name ("v3" in it -> v3, "v3.5" ->
    # v3.5, none of its identifiers -> v2), so the architecture name leads it,
    # with its minor version written as tabpfn spells it ("tabpfn_v3_5" -> "tabpfn_v3.5").
    versioned = re.sub(r"^(tabpfn_v\d+)_(\d+)$", r"\1.\2", architecture_name)
    return f"{versioned}_regressor_retrofit{WEIGHTS_SUFFIX}"


def write_saved(
    source_checkpoint: str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    *,
    settings: Mapping[str, Any],
    patch_digest: str | None = None,
    source_label: str | None = None,
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
        overwrite: Replace an existing ``out_dir`` (only once the new one is complete).

    Returns:
        The saved directory, as :func:`load_saved` reads it.

    Raises:
        FileExistsError: ``out_dir`` exists and ``overwrite`` is false.
        SavedModelError: ``settings`` lacks a setting, or the checkpoint has no
            state dict.
        retrofit.errors.UnsafeCheckpointError: A ``.ckpt`` source holds more
            than tensors and plain values (read with the weights-only unpickler).
    """
    missing = [name for name in SETTING_NAMES if name not in settings]
    if missing:
        raise SavedModelError(f"settings lack {', '.join(missing)}")
    source = Path(source_checkpoint)
    out = Path(out_dir).expanduser()
    if out.exists() and not overwrite:
        raise FileExistsError(f"output directory already exists: {out} (use --force to replace)")

    checkpoint = load_checkpoint(source)
    if not isinstance(checkpoint.get("state_dict"), dict):
        raise SavedModelError(f"{source} holds no state_dict; it is not a TabPFN checkpoint")
    architecture_name = checkpoint.get("architecture_name", "tabpfn_v2")
    kept = {"state_dict": checkpoint["state_dict"]}
    kept.update({k: checkpoint[k] for k in _CHECKPOINT_KEYS if k in checkpoint})
    weights_name = _weights_file_name(architecture_name)

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
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
        _move_into_place(tmp, out, overwrite=overwrite)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return load_saved(out)


def _move_into_place(tmp: Path, out: Path, *, overwrite: bool) -> None:
    if not out.exists():
        os.rename(tmp, out)
        return
    if not overwrite:
        raise FileExistsError(f"output directory already exists: {out} (use --force to replace)")
    old = out.parent / f".{out.name}.old-{os.getpid()}"
    os.rename(out, old)
    try:
        os.rename(tmp, out)
    except BaseException:
        os.rename(old, out)
        raise
    shutil.rmtree(old, ignore_errors=True)


def load_saved(directory: str | os.PathLike[str]) -> SavedRetrofit:
    """Read and verify a saved retrofit directory.

    Args:
        directory: A directory written by :func:`write_saved`.

    Returns:
        The directory, its verified weights file and its settings.

    Raises:
        SavedModelError: No or unreadable ``retrofit.json``, an unknown format,
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
        manifest = json.loads(manifest_path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SavedModelError(f"cannot read {manifest_path}: {exc}") from exc
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        found = manifest.get("format") if isinstance(manifest, dict) else None
        raise SavedModelError(f"{manifest_path} has format {found!r}, expected {FORMAT!r}")
    try:
        settings = {name: manifest["settings"][name] for name in SETTING_NAMES}
        weights_name = manifest["weights"]["file"]
        expected_sha = manifest["weights"]["sha256"]
    except (KeyError, TypeError) as exc:
        raise SavedModelError(f"{manifest_path} lacks the field {exc}") from exc
    weights = root / weights_name
    if not isinstance(weights_name, str) or not weights_name.endswith(WEIGHTS_SUFFIX):
        # tabpfn unpickles any other file; a matching SHA-256 proves no origin.
        raise SavedModelError(
            f"{manifest_path} names the weights file {weights_name!r}; a saved retrofit "
            f"holds {WEIGHTS_SUFFIX} weights only (no pickle)"
        )
    if Path(weights_name).name != weights_name or not weights.is_file():
        raise SavedModelError(f"{root} lacks its weights file {weights_name}")
    actual_sha = sha256_file(weights)
    if actual_sha != expected_sha:
        raise SavedModelError(
            f"SHA-256 mismatch for {weights}: expected {expected_sha}, found {actual_sha} "
            "(the file was modified or is incomplete)"
        )
    return SavedRetrofit(root, weights, settings, manifest)
