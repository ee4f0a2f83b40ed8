"""Part 2 of the GPU check: the null-row proof of the patched host on the device.

The patched host in fp32 and forced bf16: a zero row inserted at ICL block 0
by hooks must leave the old rows' final carriers unchanged (within the
rounding of a different shape) and its own final carrier exactly 0; the
unpatched host is the control.

Shape letters: B batch, R rows, N train rows, C features, E ICL width.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import torch

from retrofit import patch
from retrofit.models.loading import load_host

__all__ = ["FP32_HOST_TOL", "host_null_row", "load_host_model"]

FP32_HOST_TOL = 1e-5
"""Relative drift of old rows allowed in fp32 (rounding of a different matmul shape)."""


class _NullRow:
    """Inserts a zero row at ICL block 0's entry; takes it out after the last block."""

    def __init__(self, model: Any, pos: int, *, as_train: bool) -> None:
        self.pos, self.as_train = pos, as_train
        blocks = model.icl_blocks
        self.handles = [
            b.register_forward_pre_hook(self._pre(i), with_kwargs=True)
            for i, b in enumerate(blocks)
        ]
        self.handles.append(blocks[-1].register_forward_hook(self._post))

    def _pre(self, index: int) -> Callable[..., Any]:
        def hook(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
            x_BRE, n_train, *rest = args
            if index == 0:
                zero_B1E = x_BRE.new_zeros(x_BRE.shape[0], 1, x_BRE.shape[2])
                x_BRE = torch.cat([x_BRE[:, : self.pos], zero_B1E, x_BRE[:, self.pos :]], 1)
            if self.as_train:
                n_train = n_train + 1
            return (x_BRE, n_train, *rest), kwargs

        return hook

    def _post(self, module: Any, args: Any, output: Any) -> Any:
        x_BRE, kv = output
        self.null_BE = x_BRE[:, self.pos].clone()
        kept = torch.cat([x_BRE[:, : self.pos], x_BRE[:, self.pos + 1 :]], 1)
        self.final_BRE = kept.clone()
        return kept, kv

    def close(self) -> None:
        for h in self.handles:
            h.remove()


class _Final:
    """Records the carriers leaving the last ICL block."""

    def __init__(self, model: Any) -> None:
        self.handle = model.icl_blocks[-1].register_forward_hook(self._hook)

    def _hook(self, module: Any, args: Any, output: Any) -> None:
        self.final_BRE = output[0].clone()

    def close(self) -> None:
        self.handle.remove()


def load_host_model(model_path: str) -> tuple[Any, str]:
    """The host model; a checkpoint that cannot be loaded raises its typed error."""
    return load_host(model_path).model, f"checkpoint {model_path!r}"


def host_null_row(
    device: str, quick: bool, model_path: str, progress: Callable[[str], None]
) -> dict[str, Any]:
    """Null-row proof of the patched host in fp32 and forced bf16 (see module docstring)."""
    base, source = load_host_model(model_path)
    base = base.eval()
    R, N, B, C = (40, 30, 2, 4) if quick else (600, 450, 2, 8)
    g = torch.Generator().manual_seed(0)
    x_RBC = torch.randn(R, B, C, generator=g)
    y_NB = torch.randn(N, B, generator=g)
    rows = []
    ref32: dict[str, Any] = {}
    for dt in (torch.float32, torch.bfloat16):
        for mode in ("none", "oattention", "full-o"):
            model = copy.deepcopy(base)
            if mode != "none":
                patch(model, mode)
            model = model.to(device=device, dtype=dt)
            x, y = x_RBC.to(device, dt), y_NB.to(device, dt)
            for pos, as_train in ((N // 3, True), (N + 5, False)):
                with torch.inference_mode():
                    rec = _Final(model)
                    try:
                        model(x, y)
                    finally:
                        rec.close()
                    ins = _NullRow(model, pos, as_train=as_train)
                    try:
                        model(x, y)
                    finally:
                        ins.close()
                ref_BRE = rec.final_BRE.double()
                drift = float((ins.final_BRE.double() - ref_BRE).abs().max())
                scale = max(float(ref_BRE.abs().max()), 1e-30)
                if dt == torch.float32:
                    ref32[mode] = ref_BRE
                    tol = FP32_HOST_TOL
                else:  # the dtype's own rounding of the whole model, null row absent
                    tol = float((ref_BRE - ref32[mode]).abs().max()) / scale
                rows.append(
                    {
                        "dtype": str(dt).replace("torch.", ""),
                        "mode": mode,
                        "null_row": "train" if as_train else "test",
                        "position": pos,
                        "old_rows_linf_drift": drift,
                        "old_rows_rel_drift": drift / scale,
                        "tolerance_rel": tol,
                        "null_row_final_max_abs": float(ins.null_BE.double().abs().max()),
                        "null_row_exactly_zero": bool((ins.null_BE == 0).all()),
                    }
                )
            del model
        progress(f"host null-row proof {dt}: done")
    verdicts = []
    for r in rows:
        if r["mode"] == "none":
            continue
        control = next(
            c
            for c in rows
            if c["mode"] == "none" and c["dtype"] == r["dtype"] and c["null_row"] == r["null_row"]
        )
        r["control_rel_drift"] = control["old_rows_rel_drift"]
        r["holds"] = r["null_row_exactly_zero"] and r["old_rows_rel_drift"] <= r["tolerance_rel"]
        verdicts.append(r["holds"])
    return {
        "device": device,
        "host": source,
        "rows_R_train_N_batch_B_features_C": [R, N, B, C],
        "criterion": "null row's final carrier exactly 0, and the old rows' relative drift "
        f"at most {FP32_HOST_TOL:g} in fp32 (rounding of a different shape) or, in bf16, at "
        "most the relative distance of the bf16 model to the fp32 model without the null "
        "row (the dtype's own rounding); the unpatched host is the control",
        "rows": rows,
        "all_hold": all(verdicts),
    }
