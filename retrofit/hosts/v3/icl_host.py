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
* Row weights (:func:`~retrofit.hosts.common.row_weights.row_weights`, presence
  its case of 0/1): ``_stages_0_to_2`` runs the host's stages once per pattern
  of nonzero weights on those rows (a row of weight 0 leaves them as the zero
  carrier), and where a run's weights are positive but not all 1 it runs them
  weighted: ``_preprocess_raw`` fits the imputation means, the standard scaler
  and v3.5's ECDF ranks weighted and hands them to the host as its scaler
  cache, and the distribution embedder's inducing points read the rows
  weighted (:mod:`retrofit.hosts.v3.weighted_inducing`); ``_prepare_y`` imputes a
  non-finite train target with the weighted mean; ``_embed_icl_y`` gates the
  target embedding of a row of weight 0 in both modes; ``forward`` hands the
  weights to the ICL blocks and the decoder as their source weights
  (:func:`~retrofit.hosts.common.row_weights.source_weights`) and keeps them
  in a KV cache it builds. A forward from a KV cache takes the cache's weights.

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
from tabpfn.architectures.tabpfn_v3_5 import ECDF_CONTEXT_DTYPE
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
from retrofit.hosts.common.row_weights import (
    ROW_WEIGHTS_ATTR,
    SOURCE_WEIGHTS_ATTR,
    active_row_weights,
    on_supported_rows,
    refuse,
    source_weights,
    support_groups,
    train_targets_of,
)
from retrofit.hosts.common.weighted_stats import (
    weighted_ecdf_context,
    weighted_finite_mean,
    weighted_scaler_fit,
    weighted_target_mean,
)
from retrofit.hosts.v3.icl_block import OICLBlock
from retrofit.hosts.v3.many_class_decoder import TRAIN_PRESENCE_ATTR, OManyClassDecoder
from retrofit.hosts.v3.weighted_inducing import unchunked, weighted_inducing_points
from retrofit.settings import PatchConfig
from retrofit.tabpfn_surface import ecdf_context_key

__all__ = [
    "CARRIER_PRESENCE_ATTR",
    "OVERRIDDEN_METHODS",
    "ICLHostPatcher",
    "OICLModelMixin",
]

#: The tabpfn methods :class:`OICLModelMixin` overrides (each calls the host's own).
OVERRIDDEN_METHODS: tuple[str, ...] = (
    "forward",
    "_stages_0_to_2",
    "_prepare_y",
    "_embed_icl_y",
    "_preprocess_raw",
)

# Presence of the rows leaving stage 2, read by _embed_icl_y in the same
# forward and dropped when it returns (one forward per model at a time:
# tabpfn gives every device its own model object).
CARRIER_PRESENCE_ATTR = "_retrofit_stage2_presence_BR"


class OICLModelMixin:
    """Overrides mixed into a patched ICL host; only ever installed by :func:`retrofit.patch`.

    A subclass names ``presence_cache_class``, the host cache class with
    :class:`~retrofit.hosts.common.presence_cache.PresenceCacheMixin`, and
    whether its in-model preprocessing ranks cells (v3.5's ECDF).
    """

    presence_cache_class: ClassVar[type[PresenceCacheMixin]]
    #: Where the classifier decoder sits (absent from a v3 regressor).
    decoder_path: ClassVar[str]
    #: Whether ``_preprocess_raw`` also fits an ECDF ranking context (v3.5).
    ranks_cells: ClassVar[bool] = False

    def forward(self, x: Any, y: Any, *args: Any, task_type: Any = NOT_GIVEN, **kwargs: Any) -> Any:
        """The host's ``forward``, returning a presence-carrying KV cache when one is built.

        ``task_type`` is named in the signature because tabpfn's inference engine
        passes it only to a ``forward`` whose signature names it; it is passed on
        only when given (v3 defaults it, v3.5 requires it). Under row weights the
        ICL blocks and the decoder weight the train rows as sources.
        """
        if task_type is not NOT_GIVEN:
            kwargs["task_type"] = task_type
        decoder = _patched_decoder(self)
        cache_in = kwargs.get("kv_cache")
        from_cache = cache_in is not None and not cache_in.is_empty()
        w_BN = _forward_weights(self, x, y)
        if from_cache and w_BN is not None:
            refuse(
                "a forward from a KV cache reads the weights the cache was built with; "
                "build it under row_weights instead"
            )
        if decoder is not None and from_cache:
            # The decoder reads the cached keys: their presence and weights come from the cache.
            decoder_presence = getattr(cache_in, "decoder_presence", None)
            if decoder_presence is not None:
                decoder.__dict__[TRAIN_PRESENCE_ATTR] = decoder_presence
            decoder_weights = getattr(cache_in, "decoder_weights", None)
            if decoder_weights is not None:
                decoder.__dict__[SOURCE_WEIGHTS_ATTR] = decoder_weights
        try:
            with source_weights(self, w_BN):
                result = super().forward(x, y, *args, **kwargs)
                decoder_presence = None if decoder is None else decoder.train_presence_or_none()
                decoder_weights = None if decoder is None else decoder.source_weights_or_none()
        finally:
            self.__dict__.pop(CARRIER_PRESENCE_ATTR, None)
            if decoder is not None:
                decoder.__dict__.pop(TRAIN_PRESENCE_ATTR, None)
                decoder.__dict__.pop(SOURCE_WEIGHTS_ATTR, None)
        if kwargs.get("return_kv_cache"):
            output, cache = result
            if cache is not None and not isinstance(cache, self.presence_cache_class):
                cache = self.presence_cache_class.from_cache(cache)
            if cache is not None and cache.decoder_keys is not None and not from_cache:
                cache.decoder_presence = decoder_presence
                cache.decoder_weights = decoder_weights
            return output, cache
        return result

    def _stages_0_to_2(self, x_RiBC: torch.Tensor, y: torch.Tensor, *args: Any, **kwargs: Any):
        w_BN = active_row_weights(self, x_RiBC.shape[1], y.shape[0])
        if w_BN is None:
            out = super()._stages_0_to_2(x_RiBC, y, *args, **kwargs)
        elif bool((w_BN == 0).any()):
            out = _stages_on_supported_rows(self, x_RiBC, y, w_BN, args, kwargs)
        else:
            # Every weight positive: the host's stages with weighted statistics and
            # inducing points (the scaler and ECDF in _preprocess_raw, the targets'
            # imputation in _prepare_y, both reading this forward's weights).
            with weighted_inducing_points(self, w_BN):
                out = super()._stages_0_to_2(x_RiBC, y, *args, **unchunked(kwargs))
        config = patch_config_of(self)
        if config.mode == "full-o":
            h_BRiD = out[0].flatten(-2)
            if torch.is_grad_enabled() and h_BRiD.requires_grad:
                # forward() then adds the target embedding into these carriers in
                # place, which autograd refuses for a tensor presence saved.
                h_BRiD = h_BRiD.clone()
            self.__dict__[CARRIER_PRESENCE_ATTR] = presence_unchecked(h_BRiD, config.tau)
        return out

    def _preprocess_raw(
        self, x_RiBC: torch.Tensor, num_train: int, scaler_cache: dict | None = None
    ) -> Any:
        # Under positive row weights the host's statistics are fitted weighted and
        # handed to it as its scaler cache, which it then applies as fitted.
        w_BN = None
        if scaler_cache is None and num_train > 0:
            w_BN = active_row_weights(self, x_RiBC.shape[1], num_train)
        if w_BN is not None:
            scaler_cache = _weighted_scaler_cache(self, x_RiBC[:num_train], w_BN)
        return super()._preprocess_raw(x_RiBC, num_train, scaler_cache)

    def _prepare_y(
        self, y: torch.Tensor, num_train: int, batch_size: int, **kwargs: Any
    ) -> torch.Tensor:
        # Under row weights a non-finite train target is imputed with the weighted
        # mean of the finite ones; a row of weight 0 gets 0 (its embedding is gated).
        w_BN = active_row_weights(self, batch_size, num_train)
        if w_BN is None:
            return super()._prepare_y(y, num_train, batch_size, **kwargs)
        if bool((w_BN == 0).any()):

            def run(batch_G: torch.Tensor, rows_K: torch.Tensor, rows: torch.Tensor):
                y_K = train_targets_of(y, batch_G, rows_K)
                batch = len(batch_G) if y.dim() > 1 else 1
                if y.dim() == 1 and ROW_WEIGHTS_ATTR in self.__dict__:
                    # The group's weights differ per element: one target row each.
                    y_K, batch = y_K[:, None].expand(-1, len(batch_G)), len(batch_G)
                return self._prepare_y(y_K, len(rows_K), batch, **kwargs)

            return on_supported_rows(self, run, w_BN, num_train, y.device)
        return _imputed_with_weighted_mean(
            lambda y_in, n: super(OICLModelMixin, self)._prepare_y(y_in, n, batch_size, **kwargs),
            y,
            w_BN,
        )

    def _embed_icl_y(self, y_BN: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        emb_BND = super()._embed_icl_y(y_BN, *args, **kwargs)
        # Checked against this forward's (B, N) by _stages_0_to_2, which ran first.
        w_BN = self.__dict__.get(ROW_WEIGHTS_ATTR)
        if w_BN is not None and bool((w_BN == 0).any()):
            # OInject with the row's presence (weight > 0), in both modes: a row of
            # weight 0 gets no target, so it enters the ICL blocks as the zero carrier.
            gate_BN1 = (w_BN > 0).to(emb_BND.device, emb_BND.dtype).unsqueeze(-1)
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


def _weighted_scaler_cache(model: OICLModelMixin, x_NBC: torch.Tensor, w_BN: torch.Tensor) -> dict:
    """The host's scaler cache fitted on train rows ``x_NBC`` counted ``w_BN`` times.

    The imputation means (finite cells), then the standard scaler on the
    imputed rows; v3.5 also ranks against a weighted ECDF context of the rows
    imputed with the scaler's mean (the value the host fills every row with
    when given a cache).
    """
    w_NB1 = w_BN.t().unsqueeze(-1).to(device=x_NBC.device, dtype=x_NBC.dtype)
    finite_NBC = torch.isfinite(x_NBC)
    mean_BC = weighted_finite_mean(x_NBC, w_NB1)
    cache = weighted_scaler_fit(torch.where(finite_NBC, x_NBC, mean_BC), w_NB1)
    if model.ranks_cells:
        filled_BNC = torch.where(finite_NBC, x_NBC, cache["mean"]).transpose(0, 1)
        cache[ecdf_context_key] = weighted_ecdf_context(
            filled_BNC, w_BN, model.ecdf_num_buckets, ECDF_CONTEXT_DTYPE
        )
    return cache


def _forward_weights(model: nn.Module, x: Any, y: Any) -> torch.Tensor | None:
    """The row weights ``(B, N)`` of a ``forward(x, y)`` of ``model``, None if none or all 1."""
    if ROW_WEIGHTS_ATTR not in model.__dict__:
        return None
    x_main = x["main"] if isinstance(x, dict) else x
    y_main = y["main"] if isinstance(y, dict) else y
    return active_row_weights(model, x_main.shape[1], 0 if y_main is None else y_main.shape[0])


def _imputed_with_weighted_mean(prepare, y: torch.Tensor, w_BN: torch.Tensor) -> torch.Tensor:
    """The host's ``_prepare_y`` with non-finite train targets imputed by their weighted mean.

    ``prepare(y, n)`` is the host's method on ``n`` train targets. Finite
    targets are the host's own; the others come from a second call on the
    weighted mean as the only finite target, followed by the non-finite ones,
    so the host imputes them (with its rounding of classes) from that mean
    exactly.
    """
    finite = torch.isfinite(y)
    if bool(finite.all()):
        return prepare(y, y.shape[0])  # the mean is read nowhere
    B, N = w_BN.shape
    y_NB = y.reshape(N, -1).expand(N, B)
    mean_B = weighted_target_mean(y_NB, w_BN)
    probe_NB = torch.cat([mean_B[None], torch.where(torch.isfinite(y_NB), float("nan"), y_NB)])
    imputed_BN = prepare(probe_NB, N + 1)[:, 1:]
    return torch.where(torch.isfinite(y_NB).t(), prepare(y_NB, N), imputed_BN)


def _stages_on_supported_rows(
    model: OICLModelMixin,
    x_RiBC: torch.Tensor,
    y: torch.Tensor,
    w_BN: torch.Tensor,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> tuple[torch.Tensor, list[torch.Tensor] | None, dict[str, torch.Tensor]]:
    """``model``'s stages 0-2 on the rows of nonzero weight of each pattern.

    Every statistic and attention these stages take across rows (the
    imputation means, the standard scaler, v3.5's ECDF ranks, the inducing
    points reading the train rows and their log-n scaling) reads those rows
    only: the stages run once per pattern on its rows and every test row,
    under the pattern's weights (positive). Rows of weight 0 leave as zero
    carriers; rows are otherwise independent here (the cell embedding, the
    rows reading the inducing states and the column aggregator are per row),
    so this is the host's output on the context without them, in place. A KV
    cache is built from one pattern only (its statistics and inducing states
    are the pattern's).
    """
    kv_cache = kwargs.get("kv_cache")
    if kv_cache is not None and not kv_cache.is_empty():
        refuse("a forward from a KV cache reads the weights the cache was built with")
    building = bool(kwargs.get("return_inducing_hidden"))
    if building and len(support_groups(w_BN)) > 1:
        refuse(
            "a KV cache is built from one pattern of rows of weight 0; these batch "
            "elements have several"
        )
    built: dict[str, Any] = {}

    def run(batch_G: torch.Tensor, rows_K: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        x_RGC = x_RiBC[rows][:, batch_G]
        y_K = train_targets_of(y, batch_G, rows_K)
        out, built["hidden"], built["stats"] = model._stages_0_to_2(x_RGC, y_K, *args, **kwargs)
        return out

    out_BRiClE = on_supported_rows(model, run, w_BN, x_RiBC.shape[0], x_RiBC.device)
    if building:
        return out_BRiClE, built["hidden"], built["stats"]
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
