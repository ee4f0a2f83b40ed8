"""The null-padded ICL stages of patched TabPFN v2, v2.5 and v2.6 (blocks :class:`OTabPFNBlockV2`).

``TabPFNV2.forward`` (tabpfn 9.2) runs, for a regressor without a KV cache:
``_pad_and_group_features`` -> ``_embed_targets`` and ``_embed_features`` ->
the per-cell carriers ``(B, R, C, D)`` (feature groups, then the target cell)
-> every block with ``single_eval_pos = num_train`` -> ``_decode`` of the test
rows' target cells. This stage runs the same calls, split after the embedding
(per dataset) and after the blocks (on the padded batch).

Padding v2 is exact because a row whose every cell is zero stays zero and is
invisible: the attention between the features of a row is row-local and its
projections are bias-free (a null row's values are 0, so its output is 0),
the LayerNorms have no affine (``LN(0) = 0``), the MLP is bias-free, and the
patched attention between items gives null sources no mass and null
receivers 0. Datasets share a forward only with the same number of feature
groups (the trailing carrier shape): padding cells inside a row would dilute
the between-features attention, which the retrofit does not close. v2 has no
learned length scaling, so no ``n_eff`` is involved. ``tests/retrofit/batching/test_batched.py``
checks one dataset through this stage against ``forward`` bit for bit.

TabPFN v2.5 and v2.6 (``TabPFNV2p5``, ``TabPFNV2p6``) embed features and
targets in one call each (``_preprocess_and_embed_features``, with the column
embeddings, and ``_preprocess_and_embed_targets``) and prepend ``T`` learned
thinking rows (``add_thinking_rows``) before block 0, so their carriers have
``T + N`` key rows, thinking rows first. The padded layout keeps them there:
padding goes after the train rows, and the patched blocks give the first ``T``
rows presence 1 whatever their carrier, so a zero row is never taken for one.
``_decode`` reads the target cell of the test rows. ``forward``'s one-off
check for NaN in the encoded input is not repeated (tabpfn's preprocessing has
imputed by then; it would only raise). ``tests/retrofit/batching/test_batched_hosts.py`` checks
one dataset through the stage against ``forward`` bit for bit, for both.

Shape letters: R rows, B batch, C columns (feature groups + target), D
embedding, N train rows, M test rows, T thinking rows, O decoder outputs.
"""

from __future__ import annotations

from typing import Any

import torch
from tabpfn.architectures.interface import PerformanceOptions
from tabpfn.architectures.tabpfn_v2 import TabPFNV2
from tabpfn.architectures.tabpfn_v2_5 import TabPFNV2p5
from tabpfn.architectures.tabpfn_v2_6 import TabPFNV2p6

from retrofit.hosts.common.base import register_icl_stage
from retrofit.hosts.v2.model import OTabPFNV2, OTabPFNV2p5, OTabPFNV2p6

__all__ = ["V2ICLStage", "V2p5ICLStage"]


class V2ICLStage:
    """:class:`retrofit.hosts.common.base.ICLStage` of a patched ``TabPFNV2``."""

    def embed(
        self,
        model: TabPFNV2,
        x_RBC: torch.Tensor,
        y_N: torch.Tensor,
        **_: Any,
    ) -> torch.Tensor:
        """Per-cell carriers ``(B, R, C, D)`` of one dataset, as ``forward`` builds them."""
        x_RSF, num_feature_groups, num_rows, batch_size = model._pad_and_group_features(x_RBC)
        num_train = y_N.shape[0]
        y_BRD, _, _ = model._embed_targets(
            y_N, num_rows=num_rows, num_train_labels=num_train, batch_size=batch_size
        )
        x_BRGD, _ = model._embed_features(
            x_RSF,
            num_train_labels=num_train,
            num_feature_groups=num_feature_groups,
            batch_size=batch_size,
        )
        return torch.cat((x_BRGD, y_BRD[:, :, None]), dim=2)

    def run_blocks(
        self,
        model: TabPFNV2,
        x_BRCD: torch.Tensor,
        num_train: int,
        *,
        performance_options: PerformanceOptions | None = None,
        **_: Any,
    ) -> torch.Tensor:
        """Every (patched) block, ``num_train`` key rows, no mask."""
        options = performance_options or model.get_default_performance_options()
        for block in model.blocks:
            x_BRCD, _ = block([x_BRCD], num_train, options.save_peak_memory_factor)
        return x_BRCD

    def decode(self, model: TabPFNV2, x_BMCD: torch.Tensor) -> torch.Tensor:
        """The decoder on the test rows' target cells: ``(M, B, O)`` (bins or class logits)."""
        return model._decode(x_BMCD, 0, only_return_standard_out=True)

    def decode_classes(
        self, model: TabPFNV2, keys_BNCD: torch.Tensor, x_BMCD: torch.Tensor, y_NB: torch.Tensor
    ) -> torch.Tensor:
        """A classifier's ``max_num_classes`` logits ``(M, B, O)``: :meth:`decode`.

        The v2-family decoder reads each test row alone, so neither the key
        rows nor the labels enter.
        """
        return self.decode(model, x_BMCD)


class V2p5ICLStage(V2ICLStage):
    """The :class:`~retrofit.hosts.common.base.ICLStage` of ``TabPFNV2p5`` and ``TabPFNV2p6``."""

    def embed(
        self,
        model: TabPFNV2p5 | TabPFNV2p6,
        x_RBC: torch.Tensor,
        y_N: torch.Tensor,
        **_: Any,
    ) -> torch.Tensor:
        """Carriers ``(B, T + R, C, D)``: thinking rows, then train and test rows.

        The first ``T + N`` rows are the keys.
        """
        num_rows, batch_size = x_RBC.shape[0], x_RBC.shape[1]
        num_train = y_N.shape[0]
        x_BRGD, _, _ = model._preprocess_and_embed_features(
            x_RiBC=x_RBC, num_train_labels=num_train, batch_size=batch_size
        )
        y_BRD = model._preprocess_and_embed_targets(
            y=y_N, num_train_rows=num_rows, num_train_labels=num_train, batch_size=batch_size
        )
        x_BRCD = torch.cat((x_BRGD, y_BRD[:, :, None]), dim=2)
        x_BRCD, _ = model.add_thinking_rows(x_BRCD, single_eval_pos=num_train)
        return x_BRCD

    def decode(self, model: TabPFNV2p5 | TabPFNV2p6, x_BMCD: torch.Tensor) -> torch.Tensor:
        """The decoder on the test rows' target cells: ``(M, B, O)`` (bins or class logits)."""
        return model._decode(
            x_BMCD, test_start=0, train_start=0, train_end=0, only_return_standard_out=True
        )


# Under the host classes too: the patch swaps the class (retrofit.hosts.v2.model), and
# an unpatched host is then told it is not patched rather than that it has no stage.
for _host, _patched, _stage in (
    (TabPFNV2, OTabPFNV2, V2ICLStage()),
    (TabPFNV2p5, OTabPFNV2p5, V2p5ICLStage()),
    (TabPFNV2p6, OTabPFNV2p6, V2p5ICLStage()),
):
    register_icl_stage(_host, _stage)
    register_icl_stage(_patched, _stage)
