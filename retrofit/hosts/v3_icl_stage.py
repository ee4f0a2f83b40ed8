"""The null-padded ICL stages of patched TabPFN v3 and v3.5 (``OTabPFNV3``, ``OTabPFNV3p5``).

``TabPFNV3.forward`` and ``TabPFNV3p5.forward`` (tabpfn 9.2) run, for a
regressor without a KV cache: ``_stages_0_to_2`` -> flatten the CLS tokens to
the ICL width -> add ``_embed_icl_y(_prepare_y(y))`` to the train rows ->
every ICL block with ``single_eval_pos = num_train`` -> ``output_norm`` -> the
regression head of the test rows -> ``nan_to_num`` when the model is NaN-safe.
The stage runs the same calls, split after the injection (per dataset) and
after the blocks (on the padded batch), so that
:func:`retrofit.batching.padding.run_padded_icl` can pad in between.

The two hosts differ in three places, each a class attribute or method here:

* v3.5's ``_stages_0_to_2``, ``_prepare_y`` and ``_embed_icl_y`` take a
  ``task_type`` (always ``"regression"``: the batched path is the regressor's);
* v3.5's head is ``heads`` (a pre-head MLP and the projection, row-local),
  v3's is ``output_projection``;
* v3.5 can run its ICL blocks and ``output_norm`` in bfloat16
  (``enable_icl_bf16``): the carriers are cast after the flatten and the ICL
  part runs with autocast off, as in its ``forward``, and the head gets float32.

The split calls tabpfn's own methods; ``tests/retrofit/batching/test_batched_hosts.py`` checks
that one dataset through each stage equals ``forward`` bit for bit, so a change
of tabpfn's forward shows up there. ``output_norm`` (RMSNorm) and the heads are
row-local, so they run after the padding is dropped.

Shape letters: R rows (train then test), B batch, C features, N train rows,
M test rows, D ICL width, Cl CLS tokens, E embedding, O decoder outputs.
"""

from __future__ import annotations

import contextlib
from typing import Any, ClassVar

import torch
from tabpfn.architectures.interface import PerformanceOptions

from retrofit.hosts.base import register_icl_stage
from retrofit.hosts.icl_host import CARRIER_PRESENCE_ATTR
from retrofit.hosts.v3 import OTabPFNV3
from retrofit.hosts.v3_5 import OTabPFNV3p5

__all__ = ["V3ICLStage", "V3p5ICLStage"]


def _icl_precision(model: torch.nn.Module) -> contextlib.AbstractContextManager:
    """Autocast off around the ICL part when it runs in bfloat16 (v3.5's ``forward`` does)."""
    if getattr(model, "_icl_bf16", False):
        return torch.autocast(next(model.icl_blocks.parameters()).device.type, enabled=False)
    return contextlib.nullcontext()


class V3ICLStage:
    """:class:`retrofit.hosts.base.ICLStage` of :class:`~retrofit.hosts.OTabPFNV3`."""

    #: Extra positional arguments of ``_stages_0_to_2`` after ``(x, y)``.
    stage_args: ClassVar[tuple[Any, ...]] = ()
    #: Extra keyword arguments of ``_prepare_y`` and ``_embed_icl_y``.
    target_kwargs: ClassVar[dict[str, Any]] = {}

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
            ICL carriers ``(B, R, D)`` with the (gated, in Full-O) target added;
            the first ``N`` rows are the keys.
        """
        options = performance_options or model.get_default_performance_options()
        if y_N.dim() == 3 and y_N.shape[-1] == 1:
            y_N = y_N.squeeze(-1)
        num_train = y_N.shape[0]
        try:
            x_BRClE, _, _ = model._stages_0_to_2(
                x_RBC,
                y_N,
                *self.stage_args,
                performance_options=options,
                return_inducing_hidden=False,
                kv_cache=None,
                x_is_test_only=False,
            )
            x_BRD = x_BRClE.flatten(-2)
            if getattr(model, "_icl_bf16", False):
                x_BRD = x_BRD.to(torch.bfloat16)
            with _icl_precision(model):
                y_icl_BN = model._prepare_y(y_N, num_train, x_RBC.shape[1], **self.target_kwargs)
                y_emb_BND = model._embed_icl_y(y_icl_BN, **self.target_kwargs)
                x_BRD[:, :num_train] = x_BRD[:, :num_train] + y_emb_BND
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
        with _icl_precision(model):
            for block in model.icl_blocks:
                x_BRD, _ = block(x_BRD, num_train, options.save_peak_memory_factor)
        return x_BRD

    def decode(self, model: OTabPFNV3, x_BMD: torch.Tensor) -> torch.Tensor:
        """``output_norm`` and the regression head of the test rows: ``(M, B, O)``."""
        with _icl_precision(model):
            x_BMD = model.output_norm(x_BMD)
        if getattr(model, "_icl_bf16", False):
            x_BMD = x_BMD.float()  # the heads stay float32, as in forward
        out_MBO = self.head(model, x_BMD)
        if model._nan_safe_output:
            out_MBO = torch.nan_to_num(out_MBO, nan=0.0)
        return out_MBO

    def head(self, model: OTabPFNV3, x_BMD: torch.Tensor) -> torch.Tensor:
        """The host's regression head on normed test carriers: ``(M, B, O)``."""
        return model.output_projection(x_BMD.transpose(0, 1))


class V3p5ICLStage(V3ICLStage):
    """:class:`retrofit.hosts.base.ICLStage` of :class:`~retrofit.hosts.OTabPFNV3p5`."""

    stage_args: ClassVar[tuple[Any, ...]] = ("regression",)
    target_kwargs: ClassVar[dict[str, Any]] = {"task_type": "regression"}

    def head(self, model: OTabPFNV3p5, x_BMD: torch.Tensor) -> torch.Tensor:
        """``heads`` for regression (pre-head MLP, projection); it reads no train rows."""
        no_train_BN = x_BMD.new_zeros((x_BMD.shape[0], 0))
        return model.heads(
            None, x_BMD, no_train_BN, task_type="regression", num_present_classes=None
        )


register_icl_stage(OTabPFNV3, V3ICLStage())
register_icl_stage(OTabPFNV3p5, V3p5ICLStage())
