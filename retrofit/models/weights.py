"""Real TabPFN weights: the published regressors and classifiers of every version tabpfn ships.

``"v2"``, ``"v2.5"``, ``"v2.6"``, ``"v3"`` and ``"v3.5"`` name tabpfn's own
default regressor (or, with ``which="classifier"``, classifier) checkpoint for
that version; ``"auto"`` is tabpfn's own
default version (``tabpfn.settings``: v3.5 unless ``TABPFN_MODEL_VERSION`` says
otherwise), resolved by tabpfn's resolver, as ``TabPFNRegressor()`` does. The
file lives in tabpfn's model cache (:func:`tabpfn.model_loading.get_cache_dir`,
set by ``TABPFN_MODEL_CACHE_DIR``) under tabpfn's default file name; when it is
missing, tabpfn's own downloader fetches it (every version but v2 first asks for
the licence acceptance, see ``docs/real_weights.md``). Offline, or when the
download is refused, the failure is one :class:`WeightsUnavailableError` naming
the exact path where the file must be placed. Offline means ``HF_HUB_OFFLINE`` set, or
the Hugging Face host not reachable within a few seconds (checked before
tabpfn's downloader, which would otherwise retry for about half a minute).
Nothing here reimplements a download.
"""

from __future__ import annotations

import os
import socket
import threading
from pathlib import Path
from typing import Literal
from urllib.parse import urlparse

from tabpfn import model_loading
from tabpfn.constants import ModelVersion

from retrofit.errors import UnknownVersionError, WeightsUnavailableError
from retrofit.models.aliases import AUTO, EMBEDDED, VERSION_ALIASES, alias_list

__all__ = [
    "AUTO",
    "DEFAULT_VERSIONS",
    "KINDS",
    "Which",
    "default_checkpoint_path",
    "default_weights",
    "hub_reachable",
    "is_version_alias",
    "resolve_version",
]

#: Which of tabpfn's two estimator kinds a checkpoint is for (tabpfn's own ``which``).
Which = Literal["regressor", "classifier"]
#: Both kinds, in that order (what a model that does both tasks, v3.5, is).
KINDS: tuple[Which, ...] = ("regressor", "classifier")

#: The version aliases this package resolves to tabpfn's default checkpoint
#: (the table of :mod:`retrofit.models.aliases`, as tabpfn's versions).
DEFAULT_VERSIONS: dict[str, ModelVersion] = {
    alias: ModelVersion(alias) for alias in VERSION_ALIASES
}

# Where a user fetches each default file by hand (the Hugging Face repository
# tabpfn downloads from; every one but v2 is gated behind the licence acceptance).
_MANUAL_URL = {
    "v2-classifier": "https://huggingface.co/Prior-Labs/TabPFN-v2-clf",
    "v2": "https://huggingface.co/Prior-Labs/TabPFN-v2-reg",
    "v2.5": "https://huggingface.co/Prior-Labs/tabpfn_2_5",
    "v2.6": "https://huggingface.co/Prior-Labs/tabpfn_2_6",
    "v3": "https://huggingface.co/Prior-Labs/tabpfn_3",
    "v3.5": "https://huggingface.co/Prior-Labs/tabpfn_3_5",
}

_TRUTHY_OFF = ("", "0", "false", "no", "off")
_REACH_TIMEOUT_S = 3.0
_PROXY_VARIABLES = ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")


def is_version_alias(model_path: object) -> bool:
    """Whether ``model_path`` is a version alias (``"v2"`` ... ``"v3.5"``, ``"auto"``)."""
    return isinstance(model_path, str) and (model_path in DEFAULT_VERSIONS or model_path == AUTO)


def resolve_version(version: str) -> str:
    """``version`` itself, or for ``"auto"`` tabpfn's default version (tabpfn's resolver).

    Raises:
        UnknownVersionError: ``version`` is not a supported alias, or ``"auto"`` resolves
            to a version this package has no alias for.
    """
    if version == AUTO:
        resolved = model_loading.resolve_model_version(None).value
        if resolved not in DEFAULT_VERSIONS:
            raise UnknownVersionError(
                f"tabpfn's default version is {resolved!r}, which has no retrofit alias; "
                f"set TABPFN_MODEL_VERSION to one of {alias_list()}"
            )
        return resolved
    if version not in DEFAULT_VERSIONS:
        raise UnknownVersionError(
            f"unknown TabPFN version {version!r}; expected {alias_list(auto=True)}"
        )
    return version


def default_checkpoint_path(version: str, which: Which = "regressor") -> Path:
    """Where tabpfn keeps its default ``which`` checkpoint for ``version``.

    Args:
        version: A key of :data:`DEFAULT_VERSIONS`, or ``"auto"``.
        which: ``"regressor"`` or ``"classifier"``.

    Returns:
        ``<tabpfn cache dir>/<tabpfn's default file name>``, e.g.
        ``~/.cache/tabpfn/tabpfn-v3.5-20260909.safetensors``.

    Raises:
        UnknownVersionError: ``version`` is not a supported alias.
    """
    version = resolve_version(version)
    paths, _dirs, _names, _which = model_loading.resolve_model_path(
        None, which=which, version=DEFAULT_VERSIONS[version].value
    )
    return paths[0]


def _offline_requested() -> bool:
    value = os.environ.get("HF_HUB_OFFLINE", "").strip().lower()
    return value not in _TRUTHY_OFF


def _hub_host() -> str:
    endpoint = os.environ.get("HF_ENDPOINT") or "https://huggingface.co"
    return urlparse(endpoint).hostname or "huggingface.co"


def hub_reachable(timeout_s: float = _REACH_TIMEOUT_S) -> bool:
    """Whether a TCP connection to the Hugging Face host opens within ``timeout_s``.

    Behind a proxy (``HTTPS_PROXY``, ``ALL_PROXY``) the direct connection says
    nothing, so the answer is True and the download decides. The name lookup
    runs in a daemon thread, so a resolver that hangs cannot stall the caller.
    """
    if any(os.environ.get(name) for name in _PROXY_VARIABLES):
        return True
    host = _hub_host()
    reached = threading.Event()

    def connect() -> None:
        try:
            with socket.create_connection((host, 443), timeout=timeout_s):
                reached.set()
        except OSError:
            pass

    worker = threading.Thread(target=connect, name="hub-reachable", daemon=True)
    worker.start()
    worker.join(timeout_s + 0.5)
    return reached.is_set()


#: The versions whose weights tabpfn downloads only once its licence is accepted.
_GATED = frozenset(DEFAULT_VERSIONS) - {"v2"}


def _unavailable(
    version: str, path: Path, why: str, which: Which, asked: str | None = None
) -> WeightsUnavailableError:
    """The one-line refusal: how to get tabpfn's file, and the offline stand-in."""
    url = _MANUAL_URL.get(f"{version}-{which}", _MANUAL_URL[version])
    named = f" for {asked!r}" if asked and asked != version else ""
    licence = "accept tabpfn's licence and set TABPFN_TOKEN, then " if version in _GATED else ""
    return WeightsUnavailableError(
        f"TabPFN {version} {which} weights are not available{named} ({why}); to get them, "
        f"{licence}run once online and tabpfn downloads {path.name}, or download it from "
        f"{url} and place it at {path} (or set TABPFN_MODEL_CACHE_DIR to the folder holding "
        f"it), see docs/real_weights.md; model_path={EMBEDDED!r} (Python) or --model "
        f"{EMBEDDED} (command line) runs the small offline stand-in shipped with this package"
    )


def default_weights(version: str, *, download: bool = True, which: Which = "regressor") -> Path:
    """The path of tabpfn's default ``which`` checkpoint for ``version``, downloading if needed.

    The download is tabpfn's own (:func:`tabpfn.model_loading.download_model`):
    v2 comes from Hugging Face or tabpfn's public mirror, the others need the
    licence accepted first (``TABPFN_TOKEN``; see ``docs/real_weights.md``). No
    download is tried when ``download`` is false, ``HF_HUB_OFFLINE`` is set, or the
    Hugging Face host is unreachable (:func:`hub_reachable`).

    Args:
        version: A key of :data:`DEFAULT_VERSIONS`, or ``"auto"``.
        download: Whether to let tabpfn download a missing file.
        which: ``"regressor"`` or ``"classifier"``.

    Returns:
        The checkpoint path, which exists.

    Raises:
        WeightsUnavailableError: The file is missing and could not be fetched;
            the message names the exact path and file name to place by hand.
    """
    asked, version = version, resolve_version(version)
    path = default_checkpoint_path(version, which)
    if path.is_file():
        return path

    def unavailable(why: str) -> WeightsUnavailableError:
        return _unavailable(version, path, f"not in the model cache and {why}", which, asked)

    if not download:
        raise unavailable("downloading is off")
    if _offline_requested():
        raise unavailable("HF_HUB_OFFLINE is set")
    if not hub_reachable():
        raise unavailable(f"{_hub_host()} cannot be reached")
    try:
        result = model_loading.download_model(path, version=DEFAULT_VERSIONS[version], which=which)
    except Exception as exc:  # tabpfn's downloader reports most failures by value
        result = [exc]
    if result != "ok" or not path.is_file():
        cause = result[0] if isinstance(result, list) and result else None
        first_line = str(cause).strip().splitlines()[0] if cause else "download failed"
        raise unavailable(f"its download failed: {type(cause).__name__}: {first_line}") from cause
    return path
