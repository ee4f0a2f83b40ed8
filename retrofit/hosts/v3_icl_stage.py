"""The null-padded ICL stage of patched TabPFN v3 (:class:`~retrofit.hosts.OTabPFNV3`).

``TabPFNV3.forward`` (tabpfn 9.2) runs, for a regressor without a KV cache:
``_stages_0_to_2`` -> flatten the CLS tokens to the ICL width -> add
``_embed_icl_y(_prepare_y(y))`` to the train rows -> every ICL block with
``single_eval_pos = num_train`` -> ``output_norm`` -> ``output_projection`` of
the test rows (rows moved to the front) -> ``nan_to_num`` when the model is
NaN-safe. This stage runs the same calls, split after the injection (per
dataset) and after the blocks (on the padded batch), so that
:func:`retrofit.icl_batch.run_padded_icl` can pad in between. The split calls
tabpfn's own methods; ``tests/test_batched.py`` checks that one dataset through
this stage equals ``forward`` bit for bit, so a change of tabpfn's forward
shows up there. ``output_norm`` (RMSNorm) is row-local, so it runs after the
padding is dropped.

Shape letters: R rows (train then test), B batch, C features, N train rows,
M test rows, D ICL width, Cl CLS tokens, E embedding, O decoder outputs.
"""

from __future__ import annotations

from typing import Any

import torch
from tabpfn.architectures.interface import PerformanceOptions

from retrofit.hosts.icl_host import CARRIER_PRESENCE_ATTR
from retrofit.hosts.v3 import OTabPFNV3
from retrofit.icl_batch import register_icl_stage

__all__ = ["V3ICLStage"]


class V3ICLStage:
    """:class:`retrofit.icl_batch.ICLStage` of :class:`~retrofit.hosts.OTabPFNV3`."""

    def embed(
        self,
        model: OTabPFNV3,
        x_RBC: torch.Tensor,
        y_N: torch.Tensor,
        *,
        performance_options: PerformanceOptions | None = None,
        **_: Any,
    ) -> torch.Tensor:
        """Stages 0-2 and the target injection of one dataset, as ``forward`` does.

        Args:
            model: The patched host (regression).
            x_RBC: Train then test rows of ``B`` ensemble members.
            y_N: Train targets ``(N,)`` or ``(N, B)``.
            performance_options: As passed to ``forward``.

        Returns:
            ICL carriers ``(B, R, D)`` with the (gated, in Full-O) target added.
        """
        options = performance_options or model.get_default_performance_options()
        if y_N.dim() == 3 and y_N.shape[-1] == 1:
            y_N = y_N.squeeze(-1)
        num_train = y_N.shape[0]
        try:
            x_BRClE, _, _ = model._stages_0_to_2(
                x_RBC,
                y_N,
                performance_options=options,
                return_inducing_hidden=False,
                kv_cache=None,
                x_is_test_only=False,
            )
            x_BRD = x_BRClE.flatten(-2)
            y_icl_BN = model._prepare_y(y_N, num_train, x_RBC.shape[1])
            x_BRD[:, :num_train] = x_BRD[:, :num_train] + model._embed_icl_y(y_icl_BN)
        finally:
            # The presence the Full-O injection read; forward drops it the same way.
            model.__dict__.pop(CARRIER_PRESENCE_ATTR, None)
        return x_BRD

    def run_blocks(
        self,
        model: OTabPFNV3,
        x_BRD: torch.Tensor,
        num_train: int,
        *,
        performance_options: PerformanceOptions | None = None,
        **_: Any,
    ) -> torch.Tensor:
        """Every (patched) ICL block, ``num_train`` key rows, no mask."""
        options = performance_options or model.get_default_performance_options()
        for block in model.icl_blocks:
            x_BRD, _ = block(x_BRD, num_train, options.save_peak_memory_factor)
        return x_BRD

    def decode(self, model: OTabPFNV3, x_BMD: torch.Tensor) -> torch.Tensor:
        """``output_norm`` and the regression head of the test rows: ``(M, B, O)``."""
        out_MBO = model.output_projection(model.output_norm(x_BMD).transpose(0, 1))
        if model._nan_safe_output:
            out_MBO = torch.nan_to_num(out_MBO, nan=0.0)
        return out_MBO


register_icl_stage(OTabPFNV3, V3ICLStage())
