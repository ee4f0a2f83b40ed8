"""Fit-state files altered as an attacker would: members replaced, manifests edited, bombs.

:func:`rewrite` copies a fit state with members replaced and the manifest
edited, either leaving its digests as they were (an edit the digests must
catch) or recomputing them (a forger's file, for the checks behind the
digests). :func:`write_zip` writes an archive from raw entries, so a member
can be a deflate stream of a gigabyte of zeros built in a second
(:func:`deflated_zeros`).
"""

from __future__ import annotations

import dataclasses
import json
import struct
import zipfile
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from retrofit.fit_state.archive import MANIFEST_NAME
from retrofit.fit_state.digests import MANIFEST_DIGEST_KEY, MEMBER_DIGESTS_KEY, with_digests

__all__ = ["RawEntry", "deflated_entry", "deflated_zeros", "rewrite", "write_zip"]


def rewrite(
    source: Path,
    target: Path,
    *,
    replace: dict[str, bytes] | None = None,
    edit: Callable[[dict[str, Any]], None] | None = None,
    forge: bool = False,
    methods: dict[str, int] | None = None,
) -> Path:
    """``source`` copied to ``target`` with members replaced and the manifest edited.

    Args:
        source: A fit state.
        target: Where to write the copy.
        replace: Members to replace or add, by name.
        edit: Called on the manifest (a dict) to change it in place.
        forge: Recompute the digests over the new content (of the members the
            manifest names), as a forger would; else they stay as saved.
        methods: A zip compression method by member name (default deflate).
    """
    replace = dict(replace or {})
    with zipfile.ZipFile(source) as old:
        members = {name: old.read(name) for name in old.namelist()}
    members.update(replace)
    manifest = json.loads(members.pop(MANIFEST_NAME))
    if edit is not None:
        edit(manifest)
    if forge:
        named = set(manifest[MEMBER_DIGESTS_KEY])
        body = {
            k: v for k, v in manifest.items() if k not in (MEMBER_DIGESTS_KEY, MANIFEST_DIGEST_KEY)
        }
        manifest = with_digests(body, {n: d for n, d in members.items() if n in named})
    with zipfile.ZipFile(target, "w", compression=zipfile.ZIP_DEFLATED) as new:
        new.writestr(MANIFEST_NAME, json.dumps(manifest, indent=1))
        for name, data in members.items():
            new.writestr(name, data, compress_type=(methods or {}).get(name))
    return target


@dataclasses.dataclass(frozen=True)
class RawEntry:
    """One zip member as stored: its name, its deflate stream, and what it inflates to."""

    name: str
    deflated: bytes
    crc: int
    size: int


def deflated_entry(name: str, data: bytes) -> RawEntry:
    """``data`` deflated as a zip member."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
    stream = compressor.compress(data) + compressor.flush()
    return RawEntry(name, stream, zlib.crc32(data), len(data))


def deflated_zeros(name: str, prefix: bytes, n_mib: int) -> RawEntry:
    """A member of ``prefix`` then ``n_mib`` MiB of zeros, compressed about 1,000:1.

    Each MiB of zeros ends in a full flush, which resets the compressor, so
    every MiB after the first compresses to the same bytes: the stream is built
    from one compressed block, repeated, and only the CRC walks every byte.
    """
    mib = bytes(2**20)
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
    head = compressor.compress(prefix) + compressor.flush(zlib.Z_FULL_FLUSH)
    block = compressor.compress(mib) + compressor.flush(zlib.Z_FULL_FLUSH)
    again = compressor.compress(mib) + compressor.flush(zlib.Z_FULL_FLUSH)
    assert again == block  # the premise of the repetition
    stream = head + block * n_mib + compressor.flush()
    crc = zlib.crc32(prefix)
    for _ in range(n_mib):
        crc = zlib.crc32(mib, crc)
    return RawEntry(name, stream, crc, len(prefix) + n_mib * 2**20)


def write_zip(path: Path, entries: Sequence[RawEntry]) -> Path:
    """A zip archive (no zip64: every size under 4 GiB) of deflated ``entries``."""
    local, central = bytearray(), bytearray()
    for entry in entries:
        name = entry.name.encode()
        sizes = (entry.crc, len(entry.deflated), entry.size)
        central += (
            struct.pack(
                "<IHHHHHHIIIHHHHHII",
                0x02014B50,
                20,
                20,
                0,
                8,
                0,
                0x21,
                *sizes,
                len(name),
                0,
                0,
                0,
                0,
                0,
                len(local),
            )
            + name
        )
        local += struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, 8, 0, 0x21, *sizes, len(name), 0)
        local += name + entry.deflated
    end = struct.pack(
        "<IHHHHIIH", 0x06054B50, 0, 0, len(entries), len(entries), len(central), len(local), 0
    )
    path.write_bytes(bytes(local + central + end))
    return path
