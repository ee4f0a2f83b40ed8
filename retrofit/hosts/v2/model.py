"""The patched v2-family model classes: the encoder under row presence.

TabPFN v2, v2.5 and v2.6 embed every row in an encoder before block 0: a
preprocessing whose statistics are fitted across rows (imputation means and
the standard scaler on the train rows; the constant-feature and feature-group
masks over every row; the target's imputation mean and, for classes, its
label encoding over the train labels), then per-row linear embeddings. Under
:func:`~retrofit.hosts.common.row_presence.row_presence` the encoder runs on
the present train rows and every test row, once per presence pattern, and an
absent row's carrier is the zero vector at the encoder's output (features and
target cell alike); from there the patched blocks keep it null and inert, and
v2.5's and v2.6's thinking rows, prepended before block 0, stay present.
Outside it, or with every row present, each override is the host's method.

The overridden methods call the host's own (``_embed_features`` and
``_embed_targets`` for v2; ``_preprocess_and_embed_features`` and
``_preprocess_and_embed_targets`` for v2.5 and v2.6); their sources are pinned
by ``tests/retrofit/hosts/test_host_overrides.py``. A KV cache under row
presence is refused (its train rows are fixed when it is built).

Shape letters: R rows, B batch, C features, S batch x feature groups, F
features per group, G feature groups (``...`` after the rows: the host's own),
X embedding.
"""

from __future__ import annotations

from typing import Any

import torch
from tabpfn.architectures.tabpfn_v2 import TabPFNV2
from tabpfn.architectures.tabpfn_v2_5 import TabPFNV2p5
from tabpfn.architectures.tabpfn_v2_6 import TabPFNV2p6

from retrofit.hosts.common.model_class import NOT_GIVEN, keeps_host_name
from retrofit.hosts.common.row_presence import (
    ROW_PRESENCE_ATTR,
    active_row_presence,
    on_present_rows,
    refuse_cache,
    train_targets_of,
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
    """``forward`` of a patched v2-family host: refuses a KV cache under row presence."""

    def forward(self, x: Any, y: Any, *args: Any, task_type: Any = NOT_GIVEN, **kwargs: Any) -> Any:
        """The host's ``forward``; ``task_type`` passed on only when given."""
        if task_type is not NOT_GIVEN:
            kwargs["task_type"] = task_type
        if self.__dict__.get(ROW_PRESENCE_ATTR) is not None:
            cache = kwargs.get("kv_cache")
            if kwargs.get("return_kv_cache"):
                refuse_cache("building a KV cache")
            if cache is not None and not cache.is_empty():
                refuse_cache("a forward from a KV cache")
        return super().forward(x, y, *args, **kwargs)


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
        present_BN = active_row_presence(self, batch_size, num_train_labels)
        if present_BN is None or feature_cache is not None:
            return super()._embed_features(
                x_RSF,
                num_train_labels=num_train_labels,
                num_feature_groups=num_feature_groups,
                batch_size=batch_size,
                feature_cache=feature_cache,
            )
        groups = torch.arange(num_feature_groups, device=x_RSF.device)

        def run(batch_G: torch.Tensor, rows_K: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
            # S runs over batch elements, then their feature groups.
            columns = (batch_G[:, None] * num_feature_groups + groups[None, :]).flatten()
            return super(OTabPFNV2, self)._embed_features(
                x_RSF[rows][:, columns],
                num_train_labels=len(rows_K),
                num_feature_groups=num_feature_groups,
                batch_size=len(batch_G),
            )[0]

        # The fitted statistics are returned for a KV cache only, refused under presence.
        return on_present_rows(run, present_BN, x_RSF.shape[0], x_RSF.device), {}

    def _embed_targets(
        self, y: torch.Tensor, *, num_rows: int, num_train_labels: int, batch_size: int
    ) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
        present_BN = active_row_presence(self, batch_size, num_train_labels)
        if present_BN is None:
            return super()._embed_targets(
                y, num_rows=num_rows, num_train_labels=num_train_labels, batch_size=batch_size
            )

        def run(batch_G: torch.Tensor, rows_K: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
            return super(OTabPFNV2, self)._embed_targets(
                train_targets_of(y, batch_G, rows_K),
                num_rows=len(rows),
                num_train_labels=len(rows_K),
                batch_size=len(batch_G),
            )[0]

        embedded_BRX = on_present_rows(run, present_BN, num_rows, y.device)
        return embedded_BRX, embedded_BRX.new_empty(0), []


class _V2p5EncoderMixin(OV2ModelMixin):
    """The encoder overrides of v2.5 and v2.6 (the same methods in both)."""

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
        present_BN = active_row_presence(self, batch_size, num_train_labels)
        if present_BN is None or scaler_cache is not None:
            return super()._preprocess_and_embed_features(
                x_RiBC,
                num_train_labels,
                batch_size,
                scaler_cache=scaler_cache,
                feature_state=feature_state,
                return_state=return_state,
            )

        def run(batch_G: torch.Tensor, rows_K: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
            return super(_V2p5EncoderMixin, self)._preprocess_and_embed_features(
                x_RiBC[rows][:, batch_G], len(rows_K), len(batch_G)
            )[0]

        return on_present_rows(run, present_BN, x_RiBC.shape[0], x_RiBC.device), None, None

    def _preprocess_and_embed_targets(
        self, y: torch.Tensor, num_train_rows: int, num_train_labels: int, batch_size: int
    ) -> torch.Tensor:
        # tabpfn names the forward's row count (train and test) num_train_rows here.
        present_BN = active_row_presence(self, batch_size, num_train_labels)
        if present_BN is None:
            return super()._preprocess_and_embed_targets(
                y, num_train_rows, num_train_labels, batch_size
            )

        def run(batch_G: torch.Tensor, rows_K: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
            return super(_V2p5EncoderMixin, self)._preprocess_and_embed_targets(
                train_targets_of(y, batch_G, rows_K), len(rows), len(rows_K), len(batch_G)
            )

        return on_present_rows(run, present_BN, num_train_rows, y.device)


@keeps_host_name
class OTabPFNV2p5(_V2p5EncoderMixin, TabPFNV2p5):
    """A patched ``TabPFNV2p5``; only ever created by :func:`retrofit.patch`."""


@keeps_host_name
class OTabPFNV2p6(_V2p5EncoderMixin, TabPFNV2p6):
    """A patched ``TabPFNV2p6``; only ever created by :func:`retrofit.patch`."""
