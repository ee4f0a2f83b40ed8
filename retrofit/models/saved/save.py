"""Save a retrofit: patch its base as a check, then write the adapter that names the base.

:func:`save_patched` sits above loading, patching and the saved format
(:mod:`retrofit.models.saved`, which stays a leaf that only reads and writes
``retrofit.json``: loading reads it, so the format cannot import loading, and
this module, which needs both, lives beside it and is not imported by it).
"""

from __future__ import annotations

import os
from pathlib import Path

from retrofit.errors import OutputExistsError
from retrofit.files import sha256_of_checkpoint
from retrofit.models.aliases import EMBEDDED
from retrofit.models.kinds import host_kinds
from retrofit.models.loading import ModelPathLike, ResolvedModel, load_host, resolve_model
from retrofit.models.saved import (
    BaseIdentity,
    SavedRetrofit,
    check_replaceable,
    recorded_path,
    write_saved,
)
from retrofit.models.weights import Which, is_version_alias
from retrofit.patcher import patch_with_settings, resolve_for_model

__all__ = ["save_patched"]


def _base_of(source: ResolvedModel, kind: Which, out: Path) -> BaseIdentity:
    """How the adapter in ``out`` records the base ``source`` resolved to.

    A saved retrofit given as the source names its own base (a relative path
    rewritten relative to ``out``); a name stays a name; a file that exists where
    it was given is a path (:func:`~retrofit.models.saved.recorded_path`); any
    other file was found by name in tabpfn's model cache, and stays that name.
    """
    checkpoint = source.checkpoint  # one file, or the one-line refusal
    digest = sha256_of_checkpoint(checkpoint)
    if source.saved:
        old = source.saved[0]
        if old.base.path is None:
            return old.base
        path = recorded_path(old.base.path, out, relative_to=old.directory)
        return BaseIdentity(None, path, old.base.kind, old.base.sha256)
    given = source.label
    if given != EMBEDDED and not is_version_alias(given) and Path(given).expanduser().is_file():
        return BaseIdentity(None, recorded_path(given, out), kind, digest)
    return BaseIdentity(given, None, kind, digest)


def save_patched(
    model_path: ModelPathLike | ResolvedModel,
    out_dir: str | os.PathLike[str],
    *,
    mode: str | None = None,
    tau: float | None = None,
    support: str | None = None,
    eps_den: float | None = None,
    which: Which = "regressor",
    overwrite: bool = False,
) -> SavedRetrofit:
    """Patch the base at ``model_path`` with these settings and save the retrofit to ``out_dir``.

    What is saved is an adapter: ``out_dir/retrofit.json`` with the settings,
    the base's identity (its name or path, kind and SHA-256) and the package
    versions, never a copy of the weights (:mod:`retrofit.models.saved`). The
    base is loaded and patched first, so an unsupported architecture or a bad
    setting fails before anything is written. The settings are resolved once,
    as every entry point resolves them
    (:func:`retrofit.patcher.resolve_for_model`), and ``retrofit.json`` records
    the resolved ones (an unset ``tau`` as the host's default) and the patch
    report's digest.

    Args:
        model_path: ``"embedded"``, ``"auto"``, a version alias, a checkpoint
            file (recorded as given when absolute, else relative to ``out_dir``),
            a saved directory (its base becomes this one's; its settings are the
            defaults here, and those given replace them), or one of these resolved.
        out_dir: The directory to create (or an empty one, or one to replace).
        mode: ``"none"``, ``"oattention"`` or ``"full-o"``; None: saved, else ``"full-o"``.
        tau: Presence scale; None: saved, else the host class's default.
        support: ``"count"`` or ``"mass"``; None: saved, else ``"count"``.
        eps_den: OAttention denominator floor; None: saved, else 1e-6.
        which: The kind a name stands for (``"classifier"``: the embedded
            classifier, a version's published classifier); a resolved
            ``model_path`` keeps the kind it was resolved for.
        overwrite: Replace an existing ``out_dir`` (a saved retrofit directory or a file).

    Returns:
        The saved retrofit, read back.

    Raises:
        retrofit.errors.OutputExistsError: ``out_dir`` exists and ``overwrite`` is
            false, it is a directory that is not a saved retrofit, or it is the
            base checkpoint itself.
        retrofit.UnsupportedArchitectureError: The host has no patch table.
        retrofit.errors.WeightsUnavailableError: The weights are not on disk.
    """
    out = Path(out_dir).expanduser()
    check_replaceable(out, overwrite=overwrite)
    source = resolve_model(model_path, which)  # a saved directory is read once, here
    if os.path.lexists(out) and out.resolve() == source.checkpoint.resolve():
        raise OutputExistsError(f"{out} is the base checkpoint; give another directory")
    specs = load_host(source, which=source.which)
    kinds = host_kinds(specs)
    kind = source.which if source.which in kinds else kinds[0]
    requested = {"mode": mode, "tau": tau, "support": support, "eps_den": eps_den}
    settings = resolve_for_model(specs.model, requested, source.saved_settings, replace_saved=True)
    digest = None
    if settings.mode != "none":  # "none" keeps the host as it is; it is still loaded as a check
        digest = patch_with_settings(specs.model, settings).digest()
    return write_saved(
        out,
        settings=settings,
        base=_base_of(source, kind, out),
        kinds=kinds,
        patch_digest=digest,
        overwrite=overwrite,
    )
