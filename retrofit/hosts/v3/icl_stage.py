"""The null-padded ICL stages of patched TabPFN v3 and v3.5 (``OTabPFNV3``, ``OTabPFNV3p5``).

``TabPFNV3.forward`` and ``TabPFNV3p5.forward`` (tabpfn 9.2) run, without a
KV cache: ``_stages_0_to_2`` -> flatten the CLS tokens to the ICL width ->
add ``_embed_icl_y(_prepare_y(y))`` to the train rows -> every ICL block with
``single_eval_pos = num_train`` -> ``output_norm`` -> the head -> ``nan_to_num``
when the model is NaN-safe. The stage runs the same calls, split after the
injection (per dataset) and after the blocks (on the padded batch), so that
:func:`retrofit.batching.padding.run_padded_icl` can pad in between.

The head of a regressor reads the test rows alone (:meth:`V3ICLStage.decode`).
A classifier's (``ManyClassDecoder``, v3.5's ``heads`` for ``"multiclass"``)
is a retrieval attention from the test rows over the train rows' keys with
one-hot labels as values: :meth:`V3ICLStage.decode_classes` gets the
dataset's own train rows, cut from the padded batch, so no padding row is
ever a key there, and the decoder runs as in ``forward`` (no closure of the
decoder is needed for padding to be exact).

The two hosts differ in three places, each a method here:

* v3.5's ``_stages_0_to_2``, ``_prepare_y`` and ``_embed_icl_y`` take a
  ``task_type``; v3 knows its task itself;
* v3.5's head is ``heads`` (a pre-head MLP and the projection or the
  many-class decoder), v3's are ``output_projection`` and
  ``many_class_decoder``;
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
from typing import Any

import torch
from tabpfn.architectures.interface import PerformanceOptions

from retrofit.hosts.common.base import register_icl_stage
from retrofit.hosts.v3.icl_host import CARRIER_PRESENCE_ATTR
from retrofit.hosts.v3.many_class_decoder import TRAIN_PRESENCE_ATTR
from retrofit.hosts.v3.v3 import OTabPFNV3
from retrofit.hosts.v3.v3_5 import OTabPFNV3p5

__all__ = ["V3ICLStage", "V3p5ICLStage"]


def _icl_precision(model: torch.nn.Module) -> contextlib.AbstractContextManager:
    """Autocast off around the ICL part when it runs in bfloat16 (v3.5's ``forward`` does)."""
    if getattr(model, "_icl_bf16", False):
        return torch.autocast(next(model.icl_blocks.parameters()).device.type, enabled=False)
    return contextlib.nullcontext()


class V3ICLStage:
    """:class:`retrofit.hosts.common.base.ICLStage` of :class:`~retrofit.hosts.OTabPFNV3`."""

    def stage_args(self, task_type: str) -> tuple[Any, ...]:
        """Extra positional arguments of ``_stages_0_to_2`` after ``(x, y)``."""
        return ()

    def target_kwargs(self, task_type: str) -> dict[str, Any]:
        """Extra keyword arguments of ``_prepare_y`` and ``_embed_icl_y``."""
        return {}

    def embed(
        self,
        model: OTabPFNV3,
        x_RBC: torch.Tensor,
        y_N: torch.Tensor,
        *,
        performance_options: PerformanceOptions | None = None,
        task_type: str = "regression",
        **_: Any,
    ) -> torch.Tensor:
        """Stages 0-2 and the target injection of one dataset, as ``forward`` does.

        Args:
            model: The patched host.
            x_RBC: Train then test rows of ``B`` ensemble members.
            y_N: Train targets ``(N,)`` or ``(N, B)``.
            performance_options: As passed to ``forward``.
            task_type: ``"regression"`` or ``"multiclass"`` (read by v3.5;
                v3's model has its own).

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
                *self.stage_args(task_type),
                performance_options=options,
                return_inducing_hidden=False,
                kv_cache=None,
                x_is_test_only=False,
            )
            x_BRD = x_BRClE.flatten(-2)
            if getattr(model, "_icl_bf16", False):
                x_BRD = x_BRD.to(torch.bfloat16)
            with _icl_precision(model):
                kwargs = self.target_kwargs(task_type)
                y_icl_BN = model._prepare_y(y_N, num_train, x_RBC.shape[1], **kwargs)
                y_emb_BND = model._embed_icl_y(y_icl_BN, **kwargs)
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
        return self._blocks(model, x_BRD, num_train, performance_options, test_rows_only=False)

    def run_blocks_to_test_rows(
        self,
        model: OTabPFNV3,
        x_BRD: torch.Tensor,
        num_train: int,
        *,
        performance_options: PerformanceOptions | None = None,
        **_: Any,
    ) -> torch.Tensor:
        """The test rows ``(B, R - N, D)`` after every block, the last one run for them alone.

        What :meth:`run_blocks` gives the test rows when only they are decoded:
        the last block's train rows are its sources but receive nothing
        (:meth:`~retrofit.hosts.v3.icl_block.OICLBlock.forward_test_rows`).
        """
        return self._blocks(model, x_BRD, num_train, performance_options, test_rows_only=True)

    def _blocks(
        self,
        model: OTabPFNV3,
        x_BRD: torch.Tensor,
        num_train: int,
        performance_options: PerformanceOptions | None,
        *,
        test_rows_only: bool,
    ) -> torch.Tensor:
        options = performance_options or model.get_default_performance_options()
        peak_factor = options.save_peak_memory_factor
        *blocks, last = model.icl_blocks
        with _icl_precision(model):
            for block in blocks:
                x_BRD, _ = block(x_BRD, num_train, peak_factor)
            if test_rows_only:
                return last.forward_test_rows(x_BRD, num_train, peak_factor)
            return last(x_BRD, num_train, peak_factor)[0]

    def decode(self, model: OTabPFNV3, x_BMD: torch.Tensor) -> torch.Tensor:
        """``output_norm`` and the regression head of the test rows: ``(M, B, O)``."""
        return self._nan_safe(model, self.head(model, self._normed(model, x_BMD)))

    def decode_classes(
        self, model: OTabPFNV3, keys_BND: torch.Tensor, x_BMD: torch.Tensor, y_NB: torch.Tensor
    ) -> torch.Tensor:
        """The classifier's logits ``(M, B, O)`` of one dataset, as ``forward`` decodes them.

        Args:
            model: The patched classifier host.
            keys_BND: The dataset's own train rows after the ICL blocks.
            x_BMD: Its test rows after the ICL blocks.
            y_NB: Its train labels (class indices), ``(N,)`` or ``(N, B)``.
        """
        if y_NB.dim() == 3 and y_NB.shape[-1] == 1:
            y_NB = y_NB.squeeze(-1)
        y_BN = y_NB.transpose(0, 1) if y_NB.dim() == 2 else y_NB.unsqueeze(0)
        # One (B, N + M, D) tensor cut into views, as forward has them: the decoder's
        # projections of a strided view may round otherwise than of a compact copy.
        num_train = keys_BND.shape[1]
        x_BRD = self._normed(model, torch.cat((keys_BND, x_BMD), dim=1))
        decoder = model.get_submodule(model.decoder_path)
        try:
            out_MBO = self.class_head(model, x_BRD[:, :num_train], x_BRD[:, num_train:], y_BN)
        finally:
            # The train presence the patched decoder's project_keys left for its
            # forward; the host's forward drops it the same way.
            decoder.__dict__.pop(TRAIN_PRESENCE_ATTR, None)
        return self._nan_safe(model, out_MBO)

    def _normed(self, model: OTabPFNV3, x_BRD: torch.Tensor) -> torch.Tensor:
        # output_norm is an RMSNorm, row-local: train and test rows may be normed apart.
        with _icl_precision(model):
            x_BRD = model.output_norm(x_BRD)
        if getattr(model, "_icl_bf16", False):
            x_BRD = x_BRD.float()  # the heads stay float32, as in forward
        return x_BRD

    def _nan_safe(self, model: OTabPFNV3, out_MBO: torch.Tensor) -> torch.Tensor:
        if model._nan_safe_output:
            out_MBO = torch.nan_to_num(out_MBO, nan=0.0)
        return out_MBO

    def class_head(
        self, model: OTabPFNV3, train_BND: torch.Tensor, x_BMD: torch.Tensor, y_BN: torch.Tensor
    ) -> torch.Tensor:
        """v3's ``ManyClassDecoder`` over the dataset's train rows: ``(M, B, O)``."""
        decoder = model.many_class_decoder
        keys = decoder.project_keys(train_BND)
        return decoder(keys, x_BMD, y_BN, highest_target=int(y_BN.max()))

    def head(self, model: OTabPFNV3, x_BMD: torch.Tensor) -> torch.Tensor:
        """The host's regression head on normed test carriers: ``(M, B, O)``."""
        return model.output_projection(x_BMD.transpose(0, 1))


class V3p5ICLStage(V3ICLStage):
    """:class:`retrofit.hosts.common.base.ICLStage` of :class:`~retrofit.hosts.OTabPFNV3p5`."""

    def stage_args(self, task_type: str) -> tuple[Any, ...]:
        """v3.5's ``_stages_0_to_2`` takes the task after ``(x, y)``."""
        return (task_type,)

    def target_kwargs(self, task_type: str) -> dict[str, Any]:
        """v3.5's ``_prepare_y`` and ``_embed_icl_y`` take the task."""
        return {"task_type": task_type}

    def head(self, model: OTabPFNV3p5, x_BMD: torch.Tensor) -> torch.Tensor:
        """``heads`` for regression (pre-head MLP, projection); it reads no train rows."""
        no_train_BN = x_BMD.new_zeros((x_BMD.shape[0], 0))
        return model.heads(
            None, x_BMD, no_train_BN, task_type="regression", num_present_classes=None
        )

    def class_head(
        self, model: OTabPFNV3p5, train_BND: torch.Tensor, x_BMD: torch.Tensor, y_BN: torch.Tensor
    ) -> torch.Tensor:
        """``heads`` for ``"multiclass"`` over the dataset's train rows: ``(M, B, O)``.

        The present classes are counted as v3.5's ``forward`` counts them.
        """
        num_present_classes = int(torch.nan_to_num(y_BN, nan=0.0).max().item() + 1)
        return model.heads(
            model.heads.project_decoder_keys(train_BND),
            x_BMD,
            y_BN,
            task_type="multiclass",
            num_present_classes=num_present_classes,
        )


register_icl_stage(OTabPFNV3, V3ICLStage())
register_icl_stage(OTabPFNV3p5, V3p5ICLStage())
