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
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

from tabpfn.checkpoint import Checkpoint, save_as_safetensors

from retrofit.hashing import sha256_file

__all__ = [
    "FORMAT",
    "MANIFEST_NAME",
    "SETTING_NAMES",
    "SavedModelError",
    "SavedRetrofit",
    "SettingsConflictError",
    "is_saved_dir",
    "load_saved",
    "merge_settings",
    "save_patched",
    "sha256_file",
    "write_saved",
]

#: Identifies the layout of ``retrofit.json``; bumped on incompatible changes.
FORMAT = "tabpfn-retrofit-saved/1"
MANIFEST_NAME = "retrofit.json"
#: The retrofit settings a directory carries, in ``retrofit.patch``'s names.
SETTING_NAMES = ("mode", "tau", "support", "eps_den")
# The checkpoint keys tabpfn's loader reads (model_loading._build_model and
# _get_inference_config_from_checkpoint); anything else is left out.
_CHECKPOINT_KEYS = ("config", "architecture_name", "inference_config")
_VERSIONED_PACKAGES = ("tabpfn-retrofit", "tabpfn", "torch", "safetensors")


class SavedModelError(ValueError):
    """A saved retrofit directory is missing, malformed, or fails its SHA-256 check."""


class SettingsConflictError(ValueError):
    """An explicit retrofit setting contradicts the one a saved directory carries."""


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
    # tabpfn picks the version from the file name ("v3" in it -> v3, none of its
    # identifiers -> v2), so the architecture name, e.g. "tabpfn_v3", leads it.
    return f"{architecture_name}_regressor_retrofit.safetensors"


def _package_versions() -> dict[str, str]:
    versions = {}
    for name in _VERSIONED_PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "unknown"
    return versions


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
    """
    missing = [name for name in SETTING_NAMES if name not in settings]
    if missing:
        raise SavedModelError(f"settings lack {', '.join(missing)}")
    source = Path(source_checkpoint)
    out = Path(out_dir).expanduser()
    if out.exists() and not overwrite:
        raise FileExistsError(f"output directory already exists: {out} (use --force to replace)")

    checkpoint = Checkpoint(source).load()
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
            "versions": _package_versions(),
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
            a missing weights file, or a SHA-256 mismatch (a modified file).
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
    if Path(weights_name).name != weights_name or not weights.is_file():
        raise SavedModelError(f"{root} lacks its weights file {weights_name}")
    actual_sha = sha256_file(weights)
    if actual_sha != expected_sha:
        raise SavedModelError(
            f"SHA-256 mismatch for {weights}: expected {expected_sha}, found {actual_sha} "
            "(the file was modified or is incomplete)"
        )
    return SavedRetrofit(root, weights, settings, manifest)


def save_patched(
    model_path: str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    *,
    mode: str,
    tau: float = 1.0,
    support: str = "count",
    eps_den: float = 1e-6,
    overwrite: bool = False,
) -> SavedRetrofit:
    """Patch the host at ``model_path`` with these settings and save it to ``out_dir``.

    The host is loaded and patched first, so an unsupported architecture or a
    bad setting fails before anything is written; the report's digest is
    recorded in ``retrofit.json``.

    Args:
        model_path: ``"embedded"``, ``"v3"``, ``"v2"``, a checkpoint file or a saved
            directory (its weights are re-saved with the new settings).
        out_dir: The directory to create.
        mode: ``"none"``, ``"oattention"`` or ``"full-o"``.
        tau: Presence scale.
        support: ``"count"`` or ``"mass"``.
        eps_den: OAttention denominator floor.
        overwrite: Replace an existing ``out_dir``.

    Returns:
        The verified saved directory.

    Raises:
        FileExistsError: ``out_dir`` exists and ``overwrite`` is false.
        retrofit.UnsupportedArchitecture: The host has no patch table.
        retrofit.weights.WeightsUnavailableError: The weights are not on disk.
    """
    # Imported here: retrofit.loading reads saved directories through this module.
    from retrofit import patch
    from retrofit.loading import load_host, resolve_checkpoint

    out = Path(out_dir).expanduser()
    if out.exists() and not overwrite:
        raise FileExistsError(f"output directory already exists: {out} (use --force to replace)")
    source = resolve_checkpoint(model_path)
    specs = load_host(model_path)
    digest = None
    if mode != "none":  # "none" keeps the host as it is; it is still loaded as a check
        digest = patch(specs.model, mode, tau=tau, support=support, eps_den=eps_den).digest()
    settings = {"mode": mode, "tau": tau, "support": support, "eps_den": eps_den}
    return write_saved(
        source,
        out,
        settings=settings,
        patch_digest=digest,
        source_label=str(model_path),
        overwrite=overwrite,
    )


def merge_settings(
    saved: Mapping[str, Any], requested: Mapping[str, Any], *, where: str = "the saved model"
) -> dict[str, Any]:
    """Apply the precedence rule: saved settings are the defaults, explicit ones must agree.

    Args:
        saved: The directory's settings.
        requested: Settings given by the caller; ``None`` means "not given".
        where: How to name the directory in the error message.

    Returns:
        The settings to use (the saved ones).

    Raises:
        SettingsConflictError: An explicit setting differs from the saved one.
    """
    conflicts = [
        f"{name}={requested[name]!r} (saved: {saved[name]!r})"
        for name in SETTING_NAMES
        if requested.get(name) is not None and not _same(requested[name], saved[name])
    ]
    if conflicts:
        raise SettingsConflictError(
            f"{where} was retrofitted with other settings: {'; '.join(conflicts)}; "
            "leave them unset to use the saved ones, or patch the source again"
        )
    return {name: saved[name] for name in SETTING_NAMES}


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return float(a) == float(b)
    return a == b
