"""What the hosts with an ICL stage (TabPFN v3 and v3.5) share: the overrides and the table.

Both hosts end in ICL transformer blocks (train rows are the keys) and add the
ICL target embedding to the train rows inline in ``forward``, between
``_stages_0_to_2`` and the first block. The retrofit swaps every block for an
:class:`~retrofit.hosts.v3.icl_block.OICLBlock` and the model's class for a
subclass that mixes in :class:`OICLModelMixin`, whose overrides call into
tabpfn for the three model-level parts of the retrofit:

* OInject of the ICL target embedding (``mode="full-o"``): the override of
  ``_stages_0_to_2`` reads the presence of the carriers it returns, and the
  override of ``_embed_icl_y`` gates the embedding by it, so the host adds
  ``h + p(h) * g(y)``. ``g`` is everything ``_embed_icl_y`` computes (for v3.5
  the affine ``icl_y_layernorm`` of the encoded target too, whose bias would
  otherwise revive a null train row).
* Presence-carrying KV caches: a cache built by ``forward(...,
  return_kv_cache=True)`` is returned as the host's presence cache class
  (:mod:`retrofit.hosts.common.presence_cache`), with the classifier decoder's train
  presence (``decoder_presence``) beside its cached keys; a forward from such a
  cache hands that presence back to the decoder.
* Absent train rows (:func:`~retrofit.hosts.common.row_presence.row_presence`):
  ``_stages_0_to_2`` runs the host's stages on the present rows of each presence
  pattern (absent rows leave them as zero carriers), ``_prepare_y`` imputes the
  targets from the present rows, and ``_embed_icl_y`` gates the target embedding
  by the declared presence in both modes, so an absent row enters the ICL
  blocks as the null carrier.

A classifier (v3 with ``task_type="multiclass"``; every v3.5, whose heads serve
both tasks) also gets its ``ManyClassDecoder`` swapped for an
:class:`~retrofit.hosts.v3.many_class_decoder.OManyClassDecoder` (OAttention over
the train rows, ``n_eff`` in its length scaling), in both modes.

These are the only overrides of tabpfn methods for these hosts, and the only
place they live; ``tests/retrofit/hosts/test_host_overrides.py`` pins the source of every
tabpfn method they override or rely on, so a tabpfn release that changes one
fails that test. The overrides pass every argument through (v3.5's ``forward``,
``_stages_0_to_2`` and ``_embed_icl_y`` take a ``task_type`` that v3's do not).

A class swap (rather than instance attributes) keeps ``deepcopy``, pickling
and ``.to()`` working; :func:`retrofit.unpatch` swaps the class back.

Shape letters: B batch, R rows, N train rows, D ICL width.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import nn

from patches.presence import presence_unchecked
from retrofit.errors import MissingPresenceError
from retrofit.hosts.common.base import (
    HostPatcher,
    ReplacedModule,
    Swap,
    patch_config_of,
    swap_each,
)
from retrofit.hosts.common.model_class import NOT_GIVEN
from retrofit.hosts.common.presence_cache import PresenceCacheMixin
from retrofit.hosts.common.row_presence import (
    ROW_PRESENCE_ATTR,
    active_row_presence,
    on_present_rows,
    refuse_cache,
    suspended,
    train_targets_of,
)
from retrofit.hosts.v3.icl_block import OICLBlock
from retrofit.hosts.v3.many_class_decoder import TRAIN_PRESENCE_ATTR, OManyClassDecoder
from retrofit.settings import PatchConfig

__all__ = [
    "CARRIER_PRESENCE_ATTR",
    "OVERRIDDEN_METHODS",
    "ICLHostPatcher",
    "OICLModelMixin",
]

#: The tabpfn methods :class:`OICLModelMixin` overrides (each calls the host's own).
OVERRIDDEN_METHODS: tuple[str, ...] = ("forward", "_stages_0_to_2", "_prepare_y", "_embed_icl_y")

# Presence of the rows leaving stage 2, read by _embed_icl_y in the same
# forward and dropped when it returns (one forward per model at a time:
# tabpfn gives every device its own model object).
CARRIER_PRESENCE_ATTR = "_retrofit_stage2_presence_BR"


class OICLModelMixin:
    """Overrides mixed into a patched ICL host; only ever installed by :func:`retrofit.patch`.

    A subclass names ``presence_cache_class``, the host cache class with
    :class:`~retrofit.hosts.common.presence_cache.PresenceCacheMixin`.
    """

    presence_cache_class: ClassVar[type[PresenceCacheMixin]]
    #: Where the classifier decoder sits (absent from a v3 regressor).
    decoder_path: ClassVar[str]

    def forward(self, x: Any, y: Any, *args: Any, task_type: Any = NOT_GIVEN, **kwargs: Any) -> Any:
        """The host's ``forward``, returning a presence-carrying KV cache when one is built.

        ``task_type`` is named in the signature because tabpfn's inference engine
        passes it only to a ``forward`` whose signature names it; it is passed on
        only when given (v3 defaults it, v3.5 requires it).
        """
        if task_type is not NOT_GIVEN:
            kwargs["task_type"] = task_type
        decoder = _patched_decoder(self)
        cache_in = kwargs.get("kv_cache")
        if decoder is not None and cache_in is not None and not cache_in.is_empty():
            # The decoder reads the cached keys: their presence comes from the cache.
            decoder_presence = getattr(cache_in, "decoder_presence", None)
            if decoder_presence is not None:
                decoder.__dict__[TRAIN_PRESENCE_ATTR] = decoder_presence
        try:
            result = super().forward(x, y, *args, **kwargs)
            decoder_presence = None if decoder is None else decoder.train_presence_or_none()
        finally:
            self.__dict__.pop(CARRIER_PRESENCE_ATTR, None)
            if decoder is not None:
                decoder.__dict__.pop(TRAIN_PRESENCE_ATTR, None)
        if kwargs.get("return_kv_cache"):
            output, cache = result
            if cache is not None and not isinstance(cache, self.presence_cache_class):
                cache = self.presence_cache_class.from_cache(cache)
            if cache is not None and cache.decoder_keys is not None:
                cache.decoder_presence = decoder_presence
            return output, cache
        return result

    def _stages_0_to_2(self, x_RiBC: torch.Tensor, y: torch.Tensor, *args: Any, **kwargs: Any):
        present_BN = active_row_presence(self, x_RiBC.shape[1], y.shape[0])
        if present_BN is None:
            out = super()._stages_0_to_2(x_RiBC, y, *args, **kwargs)
        else:
            out = _stages_on_present_rows(self, x_RiBC, y, present_BN, args, kwargs)
        config = patch_config_of(self)
        if config.mode == "full-o":
            h_BRiD = out[0].flatten(-2)
            if torch.is_grad_enabled() and h_BRiD.requires_grad:
                # forward() then adds the target embedding into these carriers in
                # place, which autograd refuses for a tensor presence saved.
                h_BRiD = h_BRiD.clone()
            self.__dict__[CARRIER_PRESENCE_ATTR] = presence_unchecked(h_BRiD, config.tau)
        return out

    def _prepare_y(
        self, y: torch.Tensor, num_train: int, batch_size: int, **kwargs: Any
    ) -> torch.Tensor:
        # Under row presence the targets' imputation (of a NaN train target) reads the
        # present train rows only; an absent row's entry is 0 (its embedding is gated).
        present_BN = active_row_presence(self, batch_size, num_train)
        if present_BN is None:
            return super()._prepare_y(y, num_train, batch_size, **kwargs)

        def run(batch_G: torch.Tensor, rows_K: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
            y_K = train_targets_of(y, batch_G, rows_K)
            batch = len(batch_G) if y.dim() > 1 else 1
            return super(OICLModelMixin, self)._prepare_y(y_K, len(rows_K), batch, **kwargs)

        return on_present_rows(run, present_BN, num_train, y.device)

    def _embed_icl_y(self, y_BN: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        emb_BND = super()._embed_icl_y(y_BN, *args, **kwargs)
        # Checked against this forward's (B, N) by _stages_0_to_2, which ran first.
        present_BN = self.__dict__.get(ROW_PRESENCE_ATTR)
        if present_BN is not None and not bool(present_BN.all()):
            # OInject with the declared presence, in both modes: an absent row gets no
            # target, so it enters the ICL blocks as the zero carrier.
            gate_BN1 = present_BN.to(emb_BND.device, emb_BND.dtype).unsqueeze(-1)
            emb_BND = emb_BND * gate_BN1
        if patch_config_of(self).mode != "full-o":
            return emb_BND
        p_BR = self.__dict__.get(CARRIER_PRESENCE_ATTR)
        if p_BR is None:
            raise MissingPresenceError(
                "icl_y_encoder: OInject needs the train carriers' presence, but "
                f"_embed_icl_y was called outside {type(self).__name__}.forward"
            )
        p_BN = p_BR[:, : y_BN.shape[1]]
        # OInject: the host adds h + g(y); gating g by p(h) makes it h + p(h) g(y).
        return emb_BND * p_BN.unsqueeze(-1).to(emb_BND.dtype)


def _stages_on_present_rows(
    model: OICLModelMixin,
    x_RiBC: torch.Tensor,
    y: torch.Tensor,
    present_BN: torch.Tensor,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> tuple[torch.Tensor, None, dict[str, torch.Tensor]]:
    """``model``'s stages 0-2 under :func:`~retrofit.hosts.common.row_presence.row_presence`.

    Every statistic and attention these stages take across rows (the
    imputation means, the standard scaler, v3.5's ECDF ranks, the inducing
    points reading the train rows and their log-n scaling) is taken over the
    present train rows only: the host's own stages run once per presence
    pattern on its present train rows and every test row. Absent rows leave
    as zero carriers; rows are otherwise independent here (the cell
    embedding, the rows reading the inducing states and the column
    aggregator are per row), so this is the host's output on the context
    without the absent rows, in place.
    """
    kv_cache = kwargs.get("kv_cache")
    if kv_cache is not None and not kv_cache.is_empty():
        refuse_cache("a forward from a KV cache")
    if kwargs.get("return_inducing_hidden"):
        refuse_cache("building a KV cache")

    def run(batch_G: torch.Tensor, rows_K: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        x_RGC = x_RiBC[rows][:, batch_G]
        y_K = train_targets_of(y, batch_G, rows_K)
        with suspended(model):
            return super(OICLModelMixin, model)._stages_0_to_2(x_RGC, y_K, *args, **kwargs)[0]

    out_BRiClE = on_present_rows(run, present_BN, x_RiBC.shape[0], x_RiBC.device)
    return out_BRiClE, None, {}


def _patched_decoder(model: nn.Module) -> OManyClassDecoder | None:
    """``model``'s patched classifier decoder, None where the host has none."""
    try:
        decoder = model.get_submodule(model.decoder_path)
    except AttributeError:
        return None
    return decoder if isinstance(decoder, OManyClassDecoder) else None


class ICLHostPatcher(HostPatcher):
    """The patch table of an ICL host: ``icl_blocks.i`` -> :class:`OICLBlock`, plus the class swap.

    A subclass names ``host_class``, ``patched_class`` (the host class with
    :class:`OICLModelMixin` mixed in), ``injection_modules``, the submodules
    ``_embed_icl_y`` runs (gated by OInject in Full-O); the classifier
    ``ManyClassDecoder`` at ``patched_class.decoder_path`` is swapped when present.
    """

    patched_class: ClassVar[type[nn.Module]]
    injection_modules: ClassVar[tuple[str, ...]]
    closes_input_rows = True

    def plan(self, model: nn.Module, config: PatchConfig) -> list[Swap]:
        """One :class:`OICLBlock` per ICL block; nothing is modified.

        Raises:
            UnsupportedArchitectureError: If an ICL block is not exactly one of the
                classes of :data:`~retrofit.hosts.v3.icl_block.SUPPORTED_ICL_BLOCKS` (a
                changed host, or a replacement already), or the decoder is not exactly
                one of :data:`~retrofit.hosts.v3.many_class_decoder.SUPPORTED_DECODERS`.
        """

        def build(block: nn.Module, path: str) -> nn.Module:
            return OICLBlock.from_module(
                block,
                mode=config.mode,
                tau=config.tau,
                support=config.support,
                eps_den=config.eps_den,
                path=path,
            )

        swaps = swap_each(getattr(model, "icl_blocks", []), "icl_blocks", build)
        path = self.patched_class.decoder_path
        try:
            decoder = model.get_submodule(path)
        except AttributeError:  # a v3 regressor has no classifier decoder
            return swaps
        replacement = OManyClassDecoder.from_module(
            decoder,
            tau=config.tau,
            support=config.support,
            eps_den=config.eps_den,
            path=path,
        )
        return [*swaps, Swap(path=path, original=decoder, replacement=replacement)]

    def overrides(self, model: nn.Module, config: PatchConfig) -> list[ReplacedModule]:
        """The class swap, and in Full-O the gated target injection."""
        entries = [
            ReplacedModule(
                path="",
                old_class=type(model).__name__,
                new_class=self.patched_class.retrofit_name,
                shared_parameters=0,
                kind="class",
            )
        ]
        if config.mode == "full-o":
            for name in self.injection_modules:
                module = model.get_submodule(name)
                entries.append(
                    ReplacedModule(
                        path=name,
                        old_class=type(module).__name__,
                        new_class="OInject",
                        shared_parameters=sum(p.numel() for p in module.parameters()),
                        kind="override",
                    )
                )
        return entries

    def frozen_parameters(self, model: nn.Module, config: PatchConfig) -> list[nn.Parameter]:
        """The target embedding's parameters in Full-O."""
        if config.mode != "full-o":
            return []
        return [
            p for name in self.injection_modules for p in model.get_submodule(name).parameters()
        ]

    def attach(self, model: nn.Module, config: PatchConfig) -> None:
        """Swaps in the patched class."""
        model.__class__ = self.patched_class

    def detach(self, model: nn.Module) -> None:
        """Swaps the host class back and drops any transient state."""
        model.__class__ = self.host_class
        model.__dict__.pop(CARRIER_PRESENCE_ATTR, None)
