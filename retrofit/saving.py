"""Save a retrofitted host: patch it as a check, then write a saved directory.

:func:`save_patched` sits above loading, patching and the saved format (which
stays a leaf that only reads and writes directories).
"""

from __future__ import annotations

import os
from pathlib import Path

from retrofit.loading import load_host, resolve_checkpoint
from retrofit.patcher import patch
from retrofit.saved import SavedRetrofit, check_replaceable, write_saved
from retrofit.settings import RetrofitSettings

__all__ = ["save_patched"]


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
        overwrite: Replace an existing ``out_dir`` (a saved retrofit directory or a file).

    Returns:
        The verified saved directory.

    Raises:
        retrofit.errors.OutputExistsError: ``out_dir`` exists and ``overwrite`` is
            false, or it is a directory that is not a saved retrofit.
        retrofit.UnsupportedArchitectureError: The host has no patch table.
        retrofit.weights.WeightsUnavailableError: The weights are not on disk.
    """
    out = Path(out_dir).expanduser()
    check_replaceable(out, overwrite=overwrite)
    source = resolve_checkpoint(model_path)
    specs = load_host(model_path)
    settings = RetrofitSettings(mode=mode, tau=tau, support=support, eps_den=eps_den)
    digest = None
    if settings.mode != "none":  # "none" keeps the host as it is; it is still loaded as a check
        digest = patch(specs.model, **settings.to_dict()).digest()
    return write_saved(
        source,
        out,
        settings=settings.to_dict(),
        patch_digest=digest,
        source_label=str(model_path),
        overwrite=overwrite,
    )
