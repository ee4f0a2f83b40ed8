"""The digests a fit state carries: of every member, and of the manifest itself.

The manifest names the SHA-256 of each member (``members_sha256``) and, over
everything else it holds (parameters, ``model_path``, settings, the member
digests), its own (``manifest_sha256``), computed on the canonical JSON of the
manifest as a load reads it back (sorted keys, no spaces). A load checks both
before it uses anything, so a file edited after it was saved (a target moved
by 100 in ``y.npy``, ``n_estimators`` changed in the manifest, another
``estimator`` named) or damaged is refused, naming the file.

What digests stored in the file cannot do: stop a forger who recomputes them.
Such a file still holds data only (nothing in it runs) and must pass every
later check (bounds, types, the refit's settings and weight digests); for
files from elsewhere, compare the file's SHA-256 with one its author gives you.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from retrofit.errors import FitStateError

__all__ = ["MANIFEST_DIGEST_KEY", "MEMBER_DIGESTS_KEY", "check_digests", "with_digests"]

MEMBER_DIGESTS_KEY = "members_sha256"
MANIFEST_DIGEST_KEY = "manifest_sha256"


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _manifest_digest(manifest: Mapping[str, Any]) -> str:
    body = {key: value for key, value in manifest.items() if key != MANIFEST_DIGEST_KEY}
    # The form a load sees (tuples as lists, keys as text), written canonically.
    as_read = json.loads(json.dumps(body, allow_nan=True))
    text = json.dumps(as_read, sort_keys=True, separators=(",", ":"), allow_nan=True)
    return _sha256(text.encode())


def with_digests(manifest: Mapping[str, Any], members: Mapping[str, bytes]) -> dict[str, Any]:
    """``manifest`` with the digest of each of ``members`` and then its own."""
    signed = dict(manifest)
    signed[MEMBER_DIGESTS_KEY] = {name: _sha256(data) for name, data in sorted(members.items())}
    signed[MANIFEST_DIGEST_KEY] = _manifest_digest(signed)
    return signed


def check_digests(where: str, manifest: Mapping[str, Any], members: Mapping[str, bytes]) -> None:
    """Refuses a manifest or member that does not match the digests the manifest holds.

    Args:
        where: The fit-state file, to name in an error.
        manifest: The manifest as read.
        members: Every member read besides the manifest.

    Raises:
        FitStateError: A digest missing or different, naming ``where`` and the member.
    """
    saved = manifest.get(MANIFEST_DIGEST_KEY)
    if not isinstance(saved, str) or saved != _manifest_digest(manifest):
        raise FitStateError(
            f"{where}: the manifest does not match its digest (edited or damaged since it was "
            "saved); save the fit state again"
        )
    digests = manifest.get(MEMBER_DIGESTS_KEY)
    if not isinstance(digests, dict) or set(digests) != set(members):
        raise FitStateError(
            f"{where}: the manifest's member digests do not name exactly the members it uses; "
            "save the fit state again"
        )
    for name in sorted(members):
        if digests[name] != _sha256(members[name]):
            raise FitStateError(
                f"{where}: {name} does not match its digest (edited or damaged since it was "
                "saved); save the fit state again"
            )
