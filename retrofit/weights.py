"""Real TabPFN weights: the published regressors of every version tabpfn ships.

``"v2"``, ``"v2.5"``, ``"v2.6"``, ``"v3"`` and ``"v3.5"`` name tabpfn's own
default regressor checkpoint for that version; ``"auto"`` is tabpfn's own
default version (``tabpfn.settings``: v3.5 unless ``TABPFN_MODEL_VERSION`` says
otherwise), resolved by tabpfn's resolver, as ``TabPFNRegressor()`` does. The
file lives in tabpfn's model cache (:func:`tabpfn.model_loading.get_cache_dir`,
set by ``TABPFN_MODEL_CACHE_DIR``) under tabpfn's default file name; when it is
missing, tabpfn's own downloader fetches it (every version but v2 first asks for
the licence acceptance, see ``docs/real_weights.md``). Offline, or when the
download is refused, the failure is one :class:`WeightsUnavailableError` naming
the exact path where the file must be placed. Nothing here reimplements a download.
"""

from __future__ import annotations

import os
from pathlib import Path

from tabpfn import model_loading
from tabpfn.constants import ModelVersion

from retrofit.errors import WeightsUnavailableError

__all__ = [
    "AUTO",
    "DEFAULT_VERSIONS",
    "WeightsUnavailableError",
    "default_checkpoint_path",
    "default_weights",
    "is_version_alias",
    "resolve_version",
]

#: The version aliases this package resolves to tabpfn's default regressor.
DEFAULT_VERSIONS: dict[str, ModelVersion] = {
    "v2": ModelVersion.V2,
    "v2.5": ModelVersion.V2_5,
    "v2.6": ModelVersion.V2_6,
    "v3": ModelVersion.V3,
    "v3.5": ModelVersion.V3_5,
}
#: The alias of tabpfn's own default version (what ``TabPFNRegressor()`` loads).
AUTO = "auto"

# Where a user fetches each default file by hand (the Hugging Face repository
# tabpfn downloads from; every one but v2 is gated behind the licence acceptance).
_MANUAL_URL = {
    "v2": "https://huggingface.co/Prior-Labs/TabPFN-v2-reg",
    "v2.5": "https://huggingface.co/Prior-Labs/tabpfn_2_5",
    "v2.6": "https://huggingface.co/Prior-Labs/tabpfn_2_6",
    "v3": "https://huggingface.co/Prior-Labs/tabpfn_3",
    "v3.5": "https://huggingface.co/Prior-Labs/tabpfn_3_5",
}

_TRUTHY_OFF = ("", "0", "false", "no", "off")


def is_version_alias(model_path: object) -> bool:
    """Whether ``model_path`` is a version alias (``"v2"`` ... ``"v3.5"``, ``"auto"``)."""
    return isinstance(model_path, str) and (model_path in DEFAULT_VERSIONS or model_path == AUTO)


def resolve_version(version: str) -> str:
    """``version`` itself, or for ``"auto"`` tabpfn's default version (tabpfn's resolver).

    Raises:
        ValueError: ``version`` is not a supported alias, or ``"auto"`` resolves
            to a version this package has no alias for.
    """
    if version == AUTO:
        resolved = model_loading.resolve_model_version(None).value
        if resolved not in DEFAULT_VERSIONS:
            raise ValueError(
                f"tabpfn's default version is {resolved!r}, which has no retrofit alias; "
                f"expected one of {sorted(DEFAULT_VERSIONS)}"
            )
        return resolved
    if version not in DEFAULT_VERSIONS:
        raise ValueError(
            f"unknown TabPFN version {version!r}; expected one of "
            f"{sorted(DEFAULT_VERSIONS)} or {AUTO!r}"
        )
    return version


def default_checkpoint_path(version: str) -> Path:
    """Where tabpfn keeps its default regressor checkpoint for ``version``.

    Args:
        version: A key of :data:`DEFAULT_VERSIONS`, or ``"auto"``.

    Returns:
        ``<tabpfn cache dir>/<tabpfn's default file name>``, e.g.
        ``~/.cache/tabpfn/tabpfn-v3.5-20260909.safetensors``.

    Raises:
        ValueError: ``version`` is not a supported alias.
    """
    version = resolve_version(version)
    paths, _dirs, _names, _which = model_loading.resolve_model_path(
        None, which="regressor", version=DEFAULT_VERSIONS[version].value
    )
    return paths[0]


def _offline_requested() -> bool:
    value = os.environ.get("HF_HUB_OFFLINE", "").strip().lower()
    return value not in _TRUTHY_OFF


def _unavailable(version: str, path: Path, why: str) -> WeightsUnavailableError:
    return WeightsUnavailableError(
        f"TabPFN {version} regressor weights are not available ({why}); "
        f"download {path.name} from {_MANUAL_URL[version]} and place it at {path} "
        "(or set TABPFN_MODEL_CACHE_DIR to the folder holding it)"
    )


def default_weights(version: str, *, download: bool = True) -> Path:
    """The path of tabpfn's default regressor for ``version``, downloading it if needed.

    The download is tabpfn's own (:func:`tabpfn.model_loading.download_model`):
    v2 comes from Hugging Face or tabpfn's public mirror, the others need the
    licence accepted first (``TABPFN_TOKEN``; see ``docs/real_weights.md``). No
    download is tried when ``download`` is false or ``HF_HUB_OFFLINE`` is set.

    Args:
        version: A key of :data:`DEFAULT_VERSIONS`, or ``"auto"``.
        download: Whether to let tabpfn download a missing file.

    Returns:
        The checkpoint path, which exists.

    Raises:
        WeightsUnavailableError: The file is missing and could not be fetched;
            the message names the exact path and file name to place by hand.
    """
    version = resolve_version(version)
    path = default_checkpoint_path(version)
    if path.is_file():
        return path
    if not download:
        raise _unavailable(version, path, "not in the model cache and downloading is off")
    if _offline_requested():
        raise _unavailable(version, path, "not in the model cache and HF_HUB_OFFLINE is set")
    try:
        result = model_loading.download_model(
            path, version=DEFAULT_VERSIONS[version], which="regressor"
        )
    except Exception as exc:  # tabpfn's downloader reports most failures by value
        result = [exc]
    if result != "ok" or not path.is_file():
        cause = result[0] if isinstance(result, list) and result else None
        first_line = str(cause).strip().splitlines()[0] if cause else "download failed"
        raise _unavailable(
            version, path, f"download failed: {type(cause).__name__}: {first_line}"
        ) from cause
    return path
