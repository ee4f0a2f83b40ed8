"""KV cache entries that carry the train rows' presence (``fit_with_cache``).

With ``fit_mode="fit_with_cache"`` tabpfn runs the train rows once, stores each
ICL block's train keys and values, and at predict sends only the test rows.
OAttention needs the train rows' presence (source weights and ``n_eff``) at
that point, so each entry carries it, through every path tabpfn moves an
entry along: ``at_storage_dtype``/``quantize`` (int8 or fp8 by default),
``dequantize``, ``to`` and batch concatenation. ``TabPFNV3Cache.concatenate``
(and ``TabPFNV3p5Cache``'s) calls the *base* entry classes' ``concatenate``,
which would drop the field, and v3.5's ``to``/``quantize`` rebuild the cache as
the host's class, so each host's cache class is subclassed as well, with the
same :class:`PresenceCacheMixin`. A classifier's cache also holds its
many-class decoder keys, whose train presence travels beside them
(``decoder_presence``, ``(B, N)``; None for a regressor).

A cache built under :func:`~retrofit.hosts.common.row_weights.row_weights`
also carries each train row's weight (its source weight: ``weights`` beside
every entry's ``presence``, the same shape; ``decoder_weights`` beside
``decoder_presence``), through the same paths; None where every row counts
once. Concatenating entries of which only some carry weights fills the others
with ones.

Shape letters: B batch (ensemble members), N train rows, J key/value heads,
D head dimension.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import torch
from tabpfn.architectures.kv_cache import (
    QUANTIZED_KV_DTYPE,
    KVCache,
    KVCacheEntry,
    QuantizedKVCacheEntry,
)
from tabpfn.architectures.tabpfn_v3 import TabPFNV3Cache
from tabpfn.architectures.tabpfn_v3_5 import TabPFNV3p5Cache

from retrofit.errors import MissingPresenceError, UnsupportedArchitectureError

__all__ = [
    "PresenceCacheMixin",
    "PresenceKVCacheEntry",
    "PresenceQuantizedKVCacheEntry",
    "PresenceTabPFNV3Cache",
    "PresenceTabPFNV3p5Cache",
    "with_presence",
]


@dataclasses.dataclass
class PresenceKVCacheEntry(KVCacheEntry):
    """A :class:`KVCacheEntry` with the train rows' presence ``(B, N)`` (and weights)."""

    presence: torch.Tensor | None = None
    weights: torch.Tensor | None = None

    def to(self, device: torch.device | str) -> PresenceKVCacheEntry:
        """Moves keys, values, presence and weights to ``device``."""
        return with_presence(
            super().to(device), _to(self.presence, device), _to(self.weights, device)
        )

    def quantize(self, dtype: torch.dtype = QUANTIZED_KV_DTYPE) -> PresenceQuantizedKVCacheEntry:
        """Quantizes keys and values (tabpfn's scheme); presence and weights stay in float."""
        return with_presence(super().quantize(dtype), self.presence, self.weights)

    @staticmethod
    def concatenate(entries: Sequence[KVCacheEntry]) -> PresenceKVCacheEntry:
        """One entry holding the batch elements of ``entries`` in order."""
        return with_presence(
            KVCacheEntry.concatenate(entries), _cat_presence(entries), _cat_weights(entries)
        )


@dataclasses.dataclass
class PresenceQuantizedKVCacheEntry(QuantizedKVCacheEntry):
    """A :class:`QuantizedKVCacheEntry` with the train rows' presence ``(B, N)`` (and weights)."""

    presence: torch.Tensor | None = None
    weights: torch.Tensor | None = None

    def to(self, device: torch.device | str) -> PresenceQuantizedKVCacheEntry:
        """Moves the quantized tensors, scales, presence and weights to ``device``."""
        return with_presence(
            super().to(device), _to(self.presence, device), _to(self.weights, device)
        )

    def dequantize(self, dtype: torch.dtype) -> PresenceKVCacheEntry:
        """Dequantizes keys and values (tabpfn's scheme), keeping presence and weights."""
        return with_presence(super().dequantize(dtype), self.presence, self.weights)

    @staticmethod
    def concatenate(entries: Sequence[QuantizedKVCacheEntry]) -> PresenceQuantizedKVCacheEntry:
        """One entry holding the batch elements of ``entries`` in order."""
        return with_presence(
            QuantizedKVCacheEntry.concatenate(entries),
            _cat_presence(entries),
            _cat_weights(entries),
        )


def with_presence(entry, presence: torch.Tensor | None, weights: torch.Tensor | None = None):
    """``entry`` as the presence-carrying class of its kind (same tensors, no copies).

    Args:
        entry: A :class:`KVCacheEntry` or :class:`QuantizedKVCacheEntry`.
        presence: The train rows' presence ``(B, N)``.
        weights: Their weights, the same shape; None where every row counts once.

    Returns:
        A :class:`PresenceKVCacheEntry` or :class:`PresenceQuantizedKVCacheEntry`.
    """
    if isinstance(entry, QuantizedKVCacheEntry):
        return PresenceQuantizedKVCacheEntry(
            key=entry.key,
            value=entry.value,
            key_scale=entry.key_scale,
            value_scale=entry.value_scale,
            presence=presence,
            weights=weights,
        )
    if isinstance(entry, KVCacheEntry):
        return PresenceKVCacheEntry(
            key=entry.key,
            value=entry.value,
            grid_dtype=entry.grid_dtype,
            presence=presence,
            weights=weights,
        )
    raise UnsupportedArchitectureError(f"expected a KV cache entry, got {type(entry).__name__}")


def _to(t: torch.Tensor | None, device: torch.device | str) -> torch.Tensor | None:
    return None if t is None else t.to(device)


def _cat_presence(entries: Sequence[object]) -> torch.Tensor:
    return _cat_required([getattr(e, "presence", None) for e in entries], "KV cache entries")


def _cat_weights(entries: Sequence[object]) -> torch.Tensor | None:
    return _cat_optional(
        [getattr(e, "weights", None) for e in entries],
        [getattr(e, "presence", None) for e in entries],
    )


def _cat_optional(
    parts: Sequence[torch.Tensor | None], like: Sequence[torch.Tensor | None]
) -> torch.Tensor | None:
    """The weights of concatenated entries: None if none has any, else ones for those without."""
    if all(p is None for p in parts):
        return None
    return torch.cat(
        [
            p if p is not None else torch.ones_like(ref, dtype=_weights_dtype(parts))
            for p, ref in zip(parts, like, strict=True)
        ]
    )


def _weights_dtype(parts: Sequence[torch.Tensor | None]) -> torch.dtype:
    return next(p.dtype for p in parts if p is not None)


def _cat_required(parts: Sequence[torch.Tensor | None], what: str) -> torch.Tensor:
    if any(p is None for p in parts):
        raise MissingPresenceError(f"cannot concatenate {what} of which some carry no presence")
    return torch.cat(parts)


class PresenceCacheMixin:
    """Keeps every per-layer entry's presence through the host cache's operations.

    Mixed in before a host's ``KVCache`` dataclass; the host's own ``to``,
    ``quantize`` and ``concatenate`` do the work and the result is re-wrapped
    (same tensors) as the presence-carrying class.
    """

    @classmethod
    def from_cache(cls, cache: KVCache) -> KVCache:
        """The same cache (same tensors) as this class."""
        return cls(**{f.name: getattr(cache, f.name) for f in dataclasses.fields(cache)})

    def _with_decoder_presence(self, cache: KVCache, decoder_presence, decoder_weights) -> KVCache:
        """``cache`` as this class, with the decoder keys' presence and weights set."""
        rebuilt = self.from_cache(cache)
        rebuilt.decoder_presence = decoder_presence
        rebuilt.decoder_weights = decoder_weights
        return rebuilt

    def to(self, device: torch.device | str) -> KVCache:
        """Moves every cached tensor, presence and weights included, to ``device``."""
        return self._with_decoder_presence(
            super().to(device),
            _to(self.decoder_presence, device),
            _to(self.decoder_weights, device),
        )

    def quantize(self, dtype: torch.dtype = QUANTIZED_KV_DTYPE) -> KVCache:
        """Quantizes the ICL entries; presence, weights (and the decoder keys) stay in float."""
        return self._with_decoder_presence(
            super().quantize(dtype), self.decoder_presence, self.decoder_weights
        )

    @classmethod
    def concatenate(cls, caches: Sequence[KVCache]) -> KVCache:
        """One cache holding the batch elements of ``caches`` in order (consumes them)."""
        layers = list(caches[0].kv)
        presence = {idx: _cat_presence([c.kv[idx] for c in caches]) for idx in layers}
        weights = {idx: _cat_weights([c.kv[idx] for c in caches]) for idx in layers}
        decoder_parts = [getattr(c, "decoder_presence", None) for c in caches]
        decoder_weights = [getattr(c, "decoder_weights", None) for c in caches]
        merged = super().concatenate(caches)
        merged.kv = {
            idx: with_presence(e, presence[idx], weights[idx]) for idx, e in merged.kv.items()
        }
        merged = cls.from_cache(merged)
        if merged.decoder_keys is not None:
            merged.decoder_presence = _cat_required(decoder_parts, "decoder keys")
            merged.decoder_weights = _cat_optional(decoder_weights, decoder_parts)
        return merged


@dataclasses.dataclass
class PresenceTabPFNV3Cache(PresenceCacheMixin, TabPFNV3Cache):
    """A ``TabPFNV3Cache`` whose per-layer entries (and decoder keys) keep their presence."""

    decoder_presence: torch.Tensor | None = None
    decoder_weights: torch.Tensor | None = None


@dataclasses.dataclass
class PresenceTabPFNV3p5Cache(PresenceCacheMixin, TabPFNV3p5Cache):
    """A ``TabPFNV3p5Cache`` whose per-layer entries (and decoder keys) keep their presence."""

    decoder_presence: torch.Tensor | None = None
    decoder_weights: torch.Tensor | None = None
