"""The patched v2-family model classes: the encoder under row weights and presence.

TabPFN v2, v2.5 and v2.6 embed every row in an encoder before block 0: a
preprocessing whose statistics are fitted across rows (imputation means and
the standard scaler on the train rows; the constant-feature and feature-group
masks over every row; the target's imputation mean, which every test row's
target cell gets, and for v2's classes its label encoding over the train
labels), then per-row linear embeddings. Under
:func:`~retrofit.hosts.common.row_weights.row_weights` (presence: its case of
0/1) the encoder runs on the rows of nonzero weight and every test row, once
per pattern of them, and a row of weight 0 is the zero vector at the
encoder's output (features and target cell alike); from there the patched
blocks keep it null and inert, and v2.5's and v2.6's thinking rows, prepended
before block 0, stay present with weight 1. Where a run's weights are positive
but not all 1, the encoder's statistics are fitted weighted
(:mod:`retrofit.hosts.common.weighted_stats`) and handed to the host as the
cache it applies to test rows: the imputation means, the standard scaler, and
the target's mean (test rows and non-finite train targets take it). The masks
over every row do not change under repetition. ``forward`` hands the weights to
the blocks as their source weights. Outside, or with every weight 1, each
override is the host's method.

The overridden methods call the host's own (``_embed_features`` and
``_embed_targets`` for v2; ``_preprocess_and_embed_features`` and
``_preprocess_and_embed_targets`` for v2.5 and v2.6), and the weighted fit
runs the host's own encoder steps (:mod:`retrofit.tabpfn_surface`) to reach the
layout its statistics live in; their sources are pinned by
``tests/retrofit/hosts/test_host_overrides.py`` and
``tests/retrofit/test_tabpfn_private_api.py``. A KV cache is built under one
pattern of rows of weight 0 at most and carries the weights; a forward from a
cache reads them from it. v2 refuses a non-finite train target under weights
other than 0/1 (its label encoding would count the imputed mean).

Shape letters: R rows, B batch, C features, S batch x feature groups, F
features per group, G feature groups (``...`` after the rows: the host's own),
X embedding, N train rows.
"""

from __future__ import annotations

from typing import Any

import torch
from tabpfn.architectures.tabpfn_v2 import TabPFNV2
from tabpfn.architectures.tabpfn_v2_5 import TabPFNV2p5
from tabpfn.architectures.tabpfn_v2_6 import TabPFNV2p6

from retrofit import tabpfn_surface
from retrofit.hosts.common.model_class import NOT_GIVEN, keeps_host_name
from retrofit.hosts.common.row_weights import (
    ROW_WEIGHTS_ATTR,
    active_row_weights,
    on_supported_rows,
    refuse,
    source_weights,
    support_groups,
    train_targets_of,
)
from retrofit.hosts.common.weighted_stats import (
    weighted_finite_mean,
    weighted_scaler_fit,
    weighted_target_mean,
)

__all__ = [
    "OVERRIDDEN_METHODS_V2",
    "OVERRIDDEN_METHODS_V2P5",
    "OTabPFNV2",
    "OTabPFNV2p5",
    "OTabPFNV2p6",
    "OV2ModelMixin",
]

#: The tabpfn methods each patched class overrides (each calls the host's own).
OVERRIDDEN_METHODS_V2: tuple[str, ...] = ("forward", "_embed_features", "_embed_targets")
OVERRIDDEN_METHODS_V2P5: tuple[str, ...] = (
    "forward",
    "_preprocess_and_embed_features",
    "_preprocess_and_embed_targets",
)


class OV2ModelMixin:
    """``forward`` of a patched v2-family host: the blocks' source weights, the cache rules."""

    def forward(self, x: Any, y: Any, *args: Any, task_type: Any = NOT_GIVEN, **kwargs: Any) -> Any:
        """The host's ``forward``; ``task_type`` passed on only when given."""
        if task_type is not NOT_GIVEN:
            kwargs["task_type"] = task_type
        w_BN = None
        if ROW_WEIGHTS_ATTR in self.__dict__:
            cache = kwargs.get("kv_cache")
            if cache is not None and not cache.is_empty():
                refuse(
                    "a forward from a KV cache reads the weights the cache was built with; "
                    "build it under row_weights instead"
                )
            x_main = x["main"] if isinstance(x, dict) else x
            y_main = y["main"] if isinstance(y, dict) else y
            num_train = 0 if y_main is None else y_main.shape[0]
            w_BN = active_row_weights(self, x_main.shape[1], num_train)
            if w_BN is not None and kwargs.get("return_kv_cache"):
                if len(support_groups(w_BN)) > 1:
                    refuse(
                        "a KV cache is built from one pattern of rows of weight 0; these "
                        "batch elements have several"
                    )
        with source_weights(self, w_BN):
            return super().forward(x, y, *args, **kwargs)


def _weights_over(w_BN: torch.Tensor, groups: int, like: torch.Tensor) -> torch.Tensor:
    """Row weights ``(N, B * groups, 1)`` for train rows laid out ``(N, S, ...)`` batch-major."""
    return w_BN.t().repeat_interleave(groups, dim=1).unsqueeze(-1).to(like.device, like.dtype)


def _single_pattern_state(w_BN: torch.Tensor, states: dict[str, Any]) -> Any:
    """The state a stage fitted on its one pattern of rows (for a KV cache), else None."""
    return states.get("state") if len(support_groups(w_BN)) == 1 else None


@keeps_host_name
class OTabPFNV2(OV2ModelMixin, TabPFNV2):
    """A patched ``TabPFNV2``; only ever created by :func:`retrofit.patch`."""

    def _embed_features(
        self,
        x_RSF: torch.Tensor,
        *,
        num_train_labels: int,
        num_feature_groups: int,
        batch_size: int,
        feature_cache: dict[str, torch.Tensor] | None = None,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        w_BN = None
        if feature_cache is None:
            w_BN = active_row_weights(self, batch_size, num_train_labels)
        if w_BN is not None and bool((w_BN == 0).any()):
            groups = torch.arange(num_feature_groups, device=x_RSF.device)
            states: dict[str, Any] = {}

            def run(batch_G: torch.Tensor, rows_K: torch.Tensor, rows: torch.Tensor):
                # S runs over batch elements, then their feature groups.
                columns = (batch_G[:, None] * num_feature_groups + groups[None, :]).flatten()
                out, states["state"] = self._embed_features(
                    x_RSF[rows][:, columns],
                    num_train_labels=len(rows_K),
                    num_feature_groups=num_feature_groups,
                    batch_size=len(batch_G),
                )
                return out

            out = on_supported_rows(self, run, w_BN, x_RSF.shape[0], x_RSF.device)
            return out, _single_pattern_state(w_BN, states) or {}
        if w_BN is not None:
            feature_cache = _weighted_feature_cache(self, x_RSF, w_BN, num_feature_groups)
        return super()._embed_features(
            x_RSF,
            num_train_labels=num_train_labels,
            num_feature_groups=num_feature_groups,
            batch_size=batch_size,
            feature_cache=feature_cache,
        )

    def _embed_targets(
        self, y: torch.Tensor, *, num_rows: int, num_train_labels: int, batch_size: int
    ) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
        w_BN = active_row_weights(self, batch_size, num_train_labels)
        if w_BN is None:
            return super()._embed_targets(
                y, num_rows=num_rows, num_train_labels=num_train_labels, batch_size=batch_size
            )
        if bool((w_BN == 0).any()):
            states: dict[str, Any] = {}

            def run(batch_G: torch.Tensor, rows_K: torch.Tensor, rows: torch.Tensor):
                out, means, uniques = self._embed_targets(
                    _targets_for(self, y, batch_G, rows_K),
                    num_rows=len(rows),
                    num_train_labels=len(rows_K),
                    batch_size=len(batch_G),
                )
                states["state"] = (means, uniques)
                return out

            embedded_BRX = on_supported_rows(self, run, w_BN, num_rows, y.device)
            state = _single_pattern_state(w_BN, states)
            if state is None:
                return embedded_BRX, embedded_BRX.new_empty(0), []
            return embedded_BRX, *state
        # Every weight positive: the host's embedding of the train rows; every test
        # row's target cell is the NaN target imputed with the weighted mean.
        y_NB = y.reshape(num_train_labels, -1).expand(num_train_labels, batch_size)
        if not bool(torch.isfinite(y_NB).all()):
            refuse(
                "v2 embeds a non-finite train target from the train labels' encoding; "
                "pass finite targets (or weights in {0, 1})"
            )
        embedded_BRX, _, unique_ys = super()._embed_targets(
            y_NB, num_rows=num_rows, num_train_labels=num_train_labels, batch_size=batch_size
        )
        means_B1 = weighted_target_mean(y_NB, w_BN).unsqueeze(-1)
        nan_target_BX = self._embed_nan_target(means_B1, unique_ys, batch_size)
        embedded_BRX = embedded_BRX.clone()
        embedded_BRX[:, num_train_labels:] = nan_target_BX[:, None].to(embedded_BRX.dtype)
        return embedded_BRX, means_B1, unique_ys


class _V2p5EncoderMixin(OV2ModelMixin):
    """The encoder overrides of v2.5 and v2.6 (the same methods in both)."""

    #: The host module's encoder steps (:mod:`retrofit.tabpfn_surface`).
    remove_constant_features: Any
    pad_and_reshape_feature_groups: Any
    normalize_feature_groups: Any

    def _preprocess_and_embed_features(
        self,
        x_RiBC: torch.Tensor,
        num_train_labels: int,
        batch_size: int,
        *,
        scaler_cache: dict[str, torch.Tensor] | None = None,
        feature_state: dict[str, torch.Tensor] | None = None,
        return_state: bool = False,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor] | None, dict[str, torch.Tensor] | None]:
        w_BN = None
        if scaler_cache is None and feature_state is None:
            w_BN = active_row_weights(self, batch_size, num_train_labels)
        if w_BN is not None and bool((w_BN == 0).any()):
            states: dict[str, Any] = {}

            def run(batch_G: torch.Tensor, rows_K: torch.Tensor, rows: torch.Tensor):
                out, *states["state"] = self._preprocess_and_embed_features(
                    x_RiBC[rows][:, batch_G], len(rows_K), len(batch_G), return_state=return_state
                )
                return out

            out = on_supported_rows(self, run, w_BN, x_RiBC.shape[0], x_RiBC.device)
            state = _single_pattern_state(w_BN, states) if return_state else None
            return (out, None, None) if state is None else (out, *state)
        if w_BN is not None:
            scaler_cache, feature_state = _weighted_encoder_state(self, x_RiBC, w_BN)
        return super()._preprocess_and_embed_features(
            x_RiBC,
            num_train_labels,
            batch_size,
            scaler_cache=scaler_cache,
            feature_state=feature_state,
            return_state=return_state,
        )

    def _preprocess_and_embed_targets(
        self, y: torch.Tensor, num_train_rows: int, num_train_labels: int, batch_size: int
    ) -> torch.Tensor:
        # tabpfn names the forward's row count (train and test) num_train_rows here.
        w_BN = active_row_weights(self, batch_size, num_train_labels)
        if w_BN is None:
            return super()._preprocess_and_embed_targets(
                y, num_train_rows, num_train_labels, batch_size
            )
        if bool((w_BN == 0).any()):

            def run(batch_G: torch.Tensor, rows_K: torch.Tensor, rows: torch.Tensor):
                return self._preprocess_and_embed_targets(
                    _targets_for(self, y, batch_G, rows_K), len(rows), len(rows_K), len(batch_G)
                )

            return on_supported_rows(self, run, w_BN, num_train_rows, y.device)
        # Every weight positive: the host's embedding of the finite train targets; the
        # other rows (test rows, non-finite train targets) from a second call in which
        # the weighted mean is the only finite train target, so the host imputes them
        # with it exactly.
        N = num_train_labels
        y_NB = y.reshape(N, -1).expand(N, batch_size)
        finite_NB = torch.isfinite(y_NB)
        plain_BRX = super()._preprocess_and_embed_targets(y_NB, num_train_rows, N, batch_size)
        mean_B = weighted_target_mean(y_NB, w_BN)
        probe_NB = torch.cat([mean_B[None], torch.where(finite_NB, float("nan"), y_NB)])
        imputed_BRX = super()._preprocess_and_embed_targets(
            probe_NB, num_train_rows + 1, N + 1, batch_size
        )[:, 1:]
        own_BR = torch.zeros(batch_size, num_train_rows, dtype=torch.bool, device=y.device)
        own_BR[:, :N] = finite_NB.t()
        return torch.where(own_BR.unsqueeze(-1), plain_BRX, imputed_BRX)


def _targets_for(model: Any, y: torch.Tensor, batch_G: torch.Tensor, rows_K: torch.Tensor):
    """The targets of a group's run: one row per element where its weights differ."""
    y_K = train_targets_of(y, batch_G, rows_K)
    if y.dim() == 1 and ROW_WEIGHTS_ATTR in model.__dict__:
        return y_K[:, None].expand(-1, len(batch_G))
    return y_K


@keeps_host_name
class OTabPFNV2p5(_V2p5EncoderMixin, TabPFNV2p5):
    """A patched ``TabPFNV2p5``; only ever created by :func:`retrofit.patch`."""

    remove_constant_features = staticmethod(tabpfn_surface.v2p5_remove_constant_features)
    pad_and_reshape_feature_groups = staticmethod(
        tabpfn_surface.v2p5_pad_and_reshape_feature_groups
    )
    normalize_feature_groups = staticmethod(tabpfn_surface.v2p5_normalize_feature_groups)


@keeps_host_name
class OTabPFNV2p6(_V2p5EncoderMixin, TabPFNV2p6):
    """A patched ``TabPFNV2p6``; only ever created by :func:`retrofit.patch`."""

    remove_constant_features = staticmethod(tabpfn_surface.v2p6_remove_constant_features)
    pad_and_reshape_feature_groups = staticmethod(
        tabpfn_surface.v2p6_pad_and_reshape_feature_groups
    )
    normalize_feature_groups = staticmethod(tabpfn_surface.v2p6_normalize_feature_groups)


def _weighted_feature_cache(
    model: OTabPFNV2, x_RSF: torch.Tensor, w_BN: torch.Tensor, num_feature_groups: int
) -> dict[str, torch.Tensor]:
    """The encoder's fitted statistics with train row ``j`` counted ``w_j`` times.

    The host's steps in its order: the constant-feature mask over every row,
    the imputation means and the standard scaler on the train rows
    (weighted), then the feature-group masks over every scaled row.
    """
    N = w_BN.shape[1]
    mask = tabpfn_surface.v2_constant_feature_mask(x_RSF)
    x_RSF = tabpfn_surface.v2_remove_constant_features(x_RSF, mask)
    w_NS1 = _weights_over(w_BN, num_feature_groups, x_RSF)
    means_SF = weighted_finite_mean(x_RSF[:N], w_NS1)
    imputed_RSF = torch.where(torch.isfinite(x_RSF), x_RSF, means_SF)
    scaler = weighted_scaler_fit(imputed_RSF[:N], w_NS1)
    scaled_RSF = model.standard_scaler.transform(imputed_RSF, fitted_cache=scaler)
    ng_mask, ng_used = tabpfn_surface.v2_fit_feature_group_scaling(scaled_RSF)
    return {
        "column_selection_mask": mask,
        "feature_means": means_SF,
        "scaler_mean": scaler["mean"],
        "scaler_std": scaler["std"],
        "ng_non_constant_mask": ng_mask,
        "ng_num_used_features": ng_used,
    }


def _weighted_encoder_state(
    model: _V2p5EncoderMixin, x_RiBC: torch.Tensor, w_BN: torch.Tensor
) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """The encoder's fitted ``(scaler_cache, feature_state)``, row ``j`` counted ``w_j`` times.

    The host's steps in its order: the constant-column mask over every row,
    the feature groups, the imputation means and the standard scaler on the
    train rows (weighted), then the group normalisation's masks over every
    row imputed and scaled as the host will (with the scaler's mean).
    """
    N = w_BN.shape[1]
    x_RiBC, column_mask = model.remove_constant_features(x_RiBC)
    x_RiSF, groups = model.pad_and_reshape_feature_groups(x_RiBC, model.features_per_group)
    w_NS1 = _weights_over(w_BN, groups, x_RiSF)
    finite_RiSF = torch.isfinite(x_RiSF)
    means_SF = weighted_finite_mean(x_RiSF[:N], w_NS1)
    scaler = weighted_scaler_fit(torch.where(finite_RiSF, x_RiSF, means_SF)[:N], w_NS1)
    imputed_RiSF = torch.where(finite_RiSF, x_RiSF, scaler["mean"])
    scaled_RiSF = model.standard_scaler.transform(imputed_RiSF, fitted_cache=scaler)
    _, (normalize_mask, normalize_used) = model.normalize_feature_groups(
        scaled_RiSF, model.features_per_group
    )
    state = {
        "column_mask": column_mask,
        "normalize_mask": normalize_mask,
        "normalize_used": normalize_used,
    }
    return scaler, state
