"""Save a retrofitted host: patch it as a check, then write a saved directory.

:func:`save_patched` sits above loading, patching and the saved format
(:mod:`retrofit.models.saved`, which stays a leaf that only reads and writes
directories: loading reads them, so the format cannot import loading, and this
module, which needs both, lives beside it and is not imported by it).
"""

from __future__ import annotations

import os
from pathlib import Path

from retrofit.models.kinds import host_kinds
from retrofit.models.loading import ModelPathLike, ResolvedModel, load_host, resolve_model
from retrofit.models.saved import SavedRetrofit, check_replaceable, write_saved
from retrofit.patcher import patch_with_settings, resolve_for_model

__all__ = ["save_patched"]


def save_patched(
    model_path: ModelPathLike | ResolvedModel,
    out_dir: str | os.PathLike[str],
    *,
    mode: str | None = None,
    tau: float | None = None,
    support: str | None = None,
    eps_den: float | None = None,
    overwrite: bool = False,
) -> SavedRetrofit:
    """Patch the host at ``model_path`` with these settings and save it to ``out_dir``.

    The host is loaded and patched first, so an unsupported architecture or a
    bad setting fails before anything is written. The settings are resolved
    once, as every entry point resolves them
    (:func:`retrofit.patcher.resolve_for_model`), and ``retrofit.json`` records
    the resolved ones (an unset ``tau`` as the host's default) and the patch
    report's digest. The weights file is named by what the host does
    (``..._regressor_retrofit``, ``..._classifier_retrofit``, or neither for v3.5,
    which does both: :attr:`SavedRetrofit.kinds`).

    Args:
        model_path: ``"embedded"``, ``"v3"``, ``"v2"``, a checkpoint file, a saved
            directory (its weights are re-saved; its settings are the defaults
            here, and those given replace them), or one of these resolved.
        out_dir: The directory to create.
        mode: ``"none"``, ``"oattention"`` or ``"full-o"``; None: saved, else ``"full-o"``.
        tau: Presence scale; None: saved, else the host class's default.
        support: ``"count"`` or ``"mass"``; None: saved, else ``"count"``.
        eps_den: OAttention denominator floor; None: saved, else 1e-6.
        overwrite: Replace an existing ``out_dir`` (a saved retrofit directory or a file).

    Returns:
        The verified saved directory.

    Raises:
        retrofit.errors.OutputExistsError: ``out_dir`` exists and ``overwrite`` is
            false, or it is a directory that is not a saved retrofit.
        retrofit.UnsupportedArchitectureError: The host has no patch table.
        retrofit.errors.WeightsUnavailableError: The weights are not on disk.
    """
    out = Path(out_dir).expanduser()
    check_replaceable(out, overwrite=overwrite)
    source = resolve_model(model_path)  # a saved directory is hashed once, here
    specs = load_host(source)
    requested = {"mode": mode, "tau": tau, "support": support, "eps_den": eps_den}
    settings = resolve_for_model(specs.model, requested, source.saved_settings, replace_saved=True)
    digest = None
    if settings.mode != "none":  # "none" keeps the host as it is; it is still loaded as a check
        digest = patch_with_settings(specs.model, settings).digest()
    return write_saved(
        source.checkpoint,
        out,
        settings=settings.to_dict(),
        patch_digest=digest,
        source_label=source.label,
        kinds=host_kinds(specs),
        overwrite=overwrite,
    )
