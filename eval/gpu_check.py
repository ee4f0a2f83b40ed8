"""The GPU check: OAttention's exactness, a null-row proof and its speed on CUDA.

Usage::

    python eval/gpu_check.py OUT_DIR [--device cuda|cpu] [--quick] [--model embedded]

One call on a CUDA machine (about 5 minutes) writes ``gpu_check.json`` and
``gpu_check.md`` to ``OUT_DIR``:

1. ``exactness``: :func:`patches.oattention` in fp32, bf16 and fp16 (and
   fp64, which takes the portable sink route) against a direct float64
   evaluation of the formula on the same (rounded) inputs, and against a
   direct evaluation in the input dtype; the contracts (null receivers exactly
   0, empty support 0 and finite, null-source insertion within rounding). The
   paper's claim for GPU fp32 is L-inf <= 8.94e-8; it is reported, not assumed.
2. ``host``: the patched host (the embedded checkpoint) on the device in fp32
   and forced bf16: a zero row inserted at ICL block 0 by hooks must leave the
   old rows' final carriers unchanged (within the rounding of a different
   shape) and its own final carrier exactly 0; the unpatched host is the
   control.
3. ``bench``: SDPA (default dispatch, and forced memory-efficient, the kernel
   OAttention uses on CUDA) vs OAttention, interleaved, fp32 and bf16; peak
   device memory of one call.
4. ``batched``: ragged ``predict_batched`` (32 datasets of 50-2,000 train rows)
   against per-dataset ``predict`` (log-probability gap), and its time against
   a loop of fit/predict, interleaved.

Without CUDA it exits with status 2 and one line on stderr, writing nothing.
``--device cpu`` is a dry run of the same code on CPU (``--quick`` shrinks
every size), so the script is tested where no GPU is.

Shape letters: B batch, H query heads, Hkv key/value heads, L queries,
S sources, D head dimension, R rows, N train rows, C features, E ICL width.
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
import traceback
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from eval.markdown import markdown_table
from retrofit.console import OneLineArgumentParser, run_main
from retrofit.errors import CommandError
from retrofit.loading import load_host

_ROOT = Path(__file__).resolve().parents[1]

FP32_HOST_TOL = 1e-5
"""Relative drift of old rows allowed in fp32 (rounding of a different matmul shape)."""

#: Padded-share bound of the ragged-batch exactness check: loose, so datasets share forwards.
EXACTNESS_PADDING = 0.9

#: The parts of the check, in the order they run.
PARTS = ("exactness", "host", "bench", "batched")

PAPER_FP32_LINF = 8.94e-8
"""The paper's GPU operator-exactness bound (L-inf, against direct evaluation)."""


def _fix_sys_path() -> None:
    """Puts the repository root, not ``eval/``, on ``sys.path``.

    Run as a script, ``eval/`` itself is ``sys.path[0]``; its module names
    (``datasets``, ``report``, ...) must not shadow installed packages, and the
    repository root must be importable without an installed package.
    """
    here = str(Path(__file__).resolve().parent)
    sys.path[:] = [p for p in sys.path if (Path(p).resolve() if p else Path.cwd()) != Path(here)]
    if str(_ROOT) not in sys.path:
        sys.path.insert(0, str(_ROOT))


def _case_inputs(
    B: int, H: int, Hkv: int, L: int, S: int, D: int, *, device: str, seed: int
) -> dict[str, Any]:
    """Unit-scale float64 inputs with ~5 % null receivers and sources."""
    import torch

    g = torch.Generator().manual_seed(seed)

    def pres(n: int) -> torch.Tensor:
        sq = torch.rand(B, n, generator=g, dtype=torch.float64) * 4
        p = sq / (1 + sq)
        p[torch.rand(B, n, generator=g) < 0.05] = 0.0
        return p

    x = {
        "q": torch.randn(B, H, L, D, generator=g, dtype=torch.float64),
        "k": torch.randn(B, Hkv, S, D, generator=g, dtype=torch.float64),
        "v": torch.randn(B, Hkv, S, D, generator=g, dtype=torch.float64),
        "p_q": pres(L),
        "p_k": pres(S),
    }
    return {name: t.to(device) for name, t in x.items()}


def _exactness_cases(quick: bool) -> list[dict[str, Any]]:
    if quick:
        B, H, L, S, D = 2, 4, 96, 80, 16
    else:
        B, H, L, S, D = 2, 8, 1024, 768, 64
    return [
        {"name": "base", "dims": (B, H, H, L, S, D), "mask": None, "eps_den": 1e-6},
        {"name": "gqa", "dims": (B, H, H // 4, L, S, D), "mask": None, "eps_den": 1e-6},
        {"name": "key_mask", "dims": (B, H, H, L, S, D), "mask": "key", "eps_den": 1e-6},
        {"name": "full_mask", "dims": (B, H, H, L, S, D), "mask": "full", "eps_den": 1e-6},
        {"name": "eps0_empty_batch", "dims": (B, H, H, L, S, D), "mask": None, "eps_den": 0.0},
        {"name": "odd_lengths", "dims": (1, 2, 2, 77, 33, 32), "mask": None, "eps_den": 1e-6},
    ]


def _mask_for(kind: str | None, x: dict[str, Any], seed: int) -> Any:
    import torch

    if kind is None:
        return None
    g = torch.Generator().manual_seed(seed + 99)
    B, H, L, S = x["q"].shape[0], x["q"].shape[1], x["q"].shape[2], x["k"].shape[2]
    if kind == "key":
        m = torch.rand(B, 1, 1, S, generator=g) > 0.3
    else:
        m = torch.rand(B, H, L, S, generator=g) > 0.3
        m[:, :, :5] = False  # some rows see nothing
    return m.to(x["q"].device)


def exactness(device: str, quick: bool, progress: Callable[[str], None]) -> dict[str, Any]:
    """Operator exactness and contracts per dtype (see the module docstring)."""
    import torch

    from patches.oattention import (
        oattention,
        oattention_direct,
        oattention_reference,
        oattention_route,
    )

    # The vectorised oracle agrees with the per-row float64 reference.
    small = _case_inputs(2, 2, 1, 9, 7, 8, device="cpu", seed=5)
    small_mask = torch.rand(2, 2, 9, 7, generator=torch.Generator().manual_seed(3)) > 0.4
    ref = oattention_reference(**small, mask=small_mask)
    direct = oattention_direct(**small, mask=small_mask, dtype=torch.float64)
    oracle_gap = float((ref - direct).abs().max())

    dtypes = [torch.float32, torch.bfloat16, torch.float16, torch.float64]
    rows = []
    for ci, case in enumerate(_exactness_cases(quick)):
        B, H, Hkv, L, S, D = case["dims"]
        x64 = _case_inputs(B, H, Hkv, L, S, D, device=device, seed=ci)
        if case["name"] == "eps0_empty_batch":
            x64["p_k"][1] = 0.0  # batch element 1 has no live source
        mask = _mask_for(case["mask"], x64, ci)
        for dt in dtypes:
            x = {n: (t.to(dt) if n in ("q", "k", "v") else t.float()) for n, t in x64.items()}
            if dt == torch.float64:
                x = {n: t.double() for n, t in x.items()}
            eps = case["eps_den"]
            with torch.inference_mode():
                out = oattention(**x, mask=mask, eps_den=eps)
                ref64 = oattention_direct(**x, mask=mask, eps_den=eps, dtype=torch.float64)
                same = oattention_direct(**x, mask=mask, eps_den=eps, dtype=dt)
                null_rows = x["p_q"] == 0  # (B, L)
                out_n = out.double()
                null_zero = bool((out_n.transpose(1, 2)[null_rows] == 0).all())
                empty_rows = ref64.abs().amax(dim=-1) == 0  # rows the oracle sets to 0
                empty_zero = bool((out_n.abs().amax(dim=-1)[empty_rows] == 0).all())
                # Null-source insertion: 8 null keys with random K/V at random places.
                ins = _insert_null_sources(x, mask, n_new=8, seed=ci)
                out_ins = oattention(**ins["x"], mask=ins["mask"], eps_den=eps)
                ins_diff = float((out_ins.double() - out_n).abs().max())
            scale = float(ref64.abs().max())
            rows.append(
                {
                    "case": case["name"],
                    "dims_B_H_Hkv_L_S_D": list(case["dims"]),
                    "mask": case["mask"],
                    "eps_den": eps,
                    "dtype": str(dt).replace("torch.", ""),
                    "route": oattention_route(x["q"]),
                    "linf_vs_float64": float((out_n - ref64).abs().max()),
                    "rel_linf_vs_float64": float((out_n - ref64).abs().max()) / max(scale, 1e-300),
                    "linf_vs_same_dtype_direct": float((out_n - same.double()).abs().max()),
                    "linf_same_dtype_direct_vs_float64": float((same.double() - ref64).abs().max()),
                    "max_abs_output": scale,
                    "finite": bool(torch.isfinite(out_n).all()),
                    "null_receivers_exactly_zero": null_zero,
                    "empty_support_rows_exactly_zero": empty_zero,
                    "n_empty_rows": int(empty_rows.sum()),
                    "null_source_insertion_linf": ins_diff,
                    "null_source_insertion_bit_identical": ins_diff == 0.0,
                }
            )
        progress(f"exactness {case['name']}: done")
    fp32 = [r for r in rows if r["dtype"] == "float32"]
    worst_fp32 = max(r["linf_vs_float64"] for r in fp32)
    return {
        "device": device,
        "oracle_check_linf_direct_vs_reference": oracle_gap,
        "rows": rows,
        "worst_fp32_linf_vs_float64": worst_fp32,
        "paper_fp32_linf": PAPER_FP32_LINF,
        "meets_paper_fp32_claim": worst_fp32 <= PAPER_FP32_LINF,
        "all_contracts": all(
            r["finite"]
            and r["null_receivers_exactly_zero"]
            and r["empty_support_rows_exactly_zero"]
            for r in rows
        ),
    }


def _insert_null_sources(x: dict[str, Any], mask: Any, *, n_new: int, seed: int) -> dict[str, Any]:
    """Adds ``n_new`` sources with presence 0 (random K/V) at random positions."""
    import torch

    S = x["k"].shape[2]
    g = torch.Generator().manual_seed(seed + 7)
    pos = torch.randperm(S + n_new, generator=g)[:n_new].sort().values
    keep = torch.ones(S + n_new, dtype=torch.bool)
    keep[pos] = False
    old_idx = keep.nonzero().flatten().to(x["k"].device)
    new_idx = pos.to(x["k"].device)

    def widen(t: Any, dim: int, fill: Any) -> Any:
        shape = list(t.shape)
        shape[dim] = S + n_new
        out = fill(shape, t)
        out.index_copy_(dim, old_idx, t)
        return out

    def rand_like(shape: list[int], t: Any) -> Any:
        return torch.randn(shape, generator=g).to(device=t.device, dtype=t.dtype)

    def zeros_like(shape: list[int], t: Any) -> Any:
        return torch.zeros(shape, device=t.device, dtype=t.dtype)

    y = dict(x)
    y["k"] = widen(x["k"], 2, rand_like)
    y["v"] = widen(x["v"], 2, rand_like)
    y["p_k"] = widen(x["p_k"], 1, zeros_like)
    new_mask = None
    if mask is not None:
        m = mask.expand(*mask.shape[:-1], S)
        new_mask = torch.ones(*m.shape[:-1], S + n_new, dtype=torch.bool, device=m.device)
        new_mask.index_copy_(m.dim() - 1, old_idx, m)
    del new_idx
    return {"x": y, "mask": new_mask}


# --------------------------------------------------------------------------- #
# The patched host: null-row proof on the device
# --------------------------------------------------------------------------- #


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
        import torch

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
        import torch

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


def _load_host_model(model_path: str) -> tuple[Any, str]:
    """The host model; a checkpoint that cannot be loaded raises its typed error."""
    return load_host(model_path).model, f"checkpoint {model_path!r}"


def host_null_row(
    device: str, quick: bool, model_path: str, progress: Callable[[str], None]
) -> dict[str, Any]:
    """Null-row proof of the patched host in fp32 and forced bf16 (see module docstring)."""
    import torch

    import retrofit

    base, source = _load_host_model(model_path)
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
                retrofit.patch(model, mode)
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


# --------------------------------------------------------------------------- #
# Benchmark on the device
# --------------------------------------------------------------------------- #


def _device_peers(x: dict[str, Any]) -> dict[str, Callable[[], Any]]:
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from patches.oattention import oattention

    q, k, v, p_q, p_k = x["q"], x["k"], x["v"], x["p_q"], x["p_k"]

    def sdpa_efficient() -> Any:
        with sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION]):
            return F.scaled_dot_product_attention(q, k, v)

    peers: dict[str, Callable[[], Any]] = {
        "sdpa": lambda: F.scaled_dot_product_attention(q, k, v),
        "oattention": lambda: oattention(q, k, v, p_q, p_k),
        "oattention_trusted": lambda: oattention(q, k, v, p_q, p_k, validate=False),
    }
    if q.device.type == "cuda":
        peers["sdpa_efficient"] = sdpa_efficient
    return peers


def device_bench(
    device: str, quick: bool, model_path: str, progress: Callable[[str], None]
) -> dict[str, Any]:
    """Interleaved timing and peak memory of SDPA vs OAttention on the device."""
    import numpy as np
    import torch

    from eval.benchmarks.attention import attention_inputs
    from eval.benchmarks.shapes import (
        LARGE_SHAPES,
        QUICK_SHAPES,
        SMALL_SHAPES,
        Shape,
        icl_shapes,
    )
    from eval.benchmarks.timing import paired_ratio, time_interleaved

    if quick:
        shapes = list(QUICK_SHAPES)
        icl_source: Any = "quick"
    else:
        icl, icl_source = icl_shapes(model_path)
        shapes = [
            *LARGE_SHAPES,
            *SMALL_SHAPES,
            *icl,
            Shape(4, 8, 8192, 8192, 64, "xl"),
        ]
    sync = torch.cuda.synchronize if device.startswith("cuda") else None
    repeats = 5 if quick else 30
    rows = []
    for dt in (torch.float32, torch.bfloat16):
        for i, shape in enumerate(shapes):
            x = attention_inputs(shape, device=device, dtype=dt, seed=i)
            with torch.inference_mode():
                times, inner = time_interleaved(
                    _device_peers(x),
                    repeats=repeats,
                    min_time_s=0.002 if quick else 0.02,
                    sync=sync,
                    seed=i,
                )
            rows.append(
                {
                    "dtype": str(dt).replace("torch.", ""),
                    "shape": list(shape.dims()),
                    "group": shape.group,
                    "label": shape.label,
                    "calls_per_measurement": inner,
                    "median_ms": {n: 1e3 * float(np.median(t)) for n, t in times.items()},
                    "ratios_vs_sdpa": {
                        n: paired_ratio(t, times["sdpa"], seed=i)
                        for n, t in times.items()
                        if n != "sdpa"
                    },
                }
            )
            del x
        progress(f"device bench {dt}: done")
    memory = _device_memory(device, quick)
    return {
        "device": device,
        "repeats": repeats,
        "icl_source": icl_source,
        "rows": rows,
        "memory": memory,
    }


def ragged_batches(
    device: str, quick: bool, model_path: str, progress: Callable[[str], None]
) -> dict[str, Any]:
    """Ragged ``predict_batched`` on the device: equal to per-dataset ``predict``, and its speed.

    Every dataset's batched log-probabilities against its own ``predict`` (gap
    relative to ``max(1, |log p|)``, the test suite's measure), with a loose
    padded-share bound so that datasets really share padded forwards (the
    padding is what is checked); then the batched benchmark's case
    (:func:`eval.benchmarks.batched.bench_case`: loop and batched at the
    device's default bound, interleaved).
    """
    import numpy as np
    import torch
    from tabpfn import TabPFNRegressor

    from eval.benchmarks.batched import bench_case, ragged_datasets
    from retrofit import OTabPFNRegressor
    from retrofit.batched import predict_batched

    n, max_rows = (3, 60) if quick else (32, 2000)
    data = ragged_datasets(n, min_rows=20 if quick else 50, max_rows=max_rows, seed=n)
    est = OTabPFNRegressor(
        model_path=model_path,
        device=device,
        n_estimators=1 if quick else "auto",
        inference_precision=torch.float32,
        ignore_pretraining_limits=True,
    ).fit(data[0][0], data[0][1])
    template = est.batched_host()
    lists = [[d[k] for d in data] for k in range(3)]
    batched = predict_batched(
        template, *lists, padded=True, output_type="full", max_padded_fraction=EXACTNESS_PADDING
    )
    gaps = []
    for (X, y, X_test), got in zip(data, batched.results, strict=True):
        alone = TabPFNRegressor(**template.get_params(deep=False)).fit(X, y)
        want = alone.predict(X_test, output_type="full")["logits"].numpy()
        have = got["logits"].numpy()
        gaps.append(float((np.abs(want - have) / np.maximum(1.0, np.abs(want))).max()))
    progress(f"ragged batches: max log-prob gap {max(gaps):.3g} over {n} datasets")
    case = bench_case(
        template,
        data,
        same_shape=False,
        device=est.devices_[0],
        repeats=1 if quick else 3,
        seed=0,
        warmup=True,
        progress=progress,
    )
    return {
        "n_datasets": n,
        "rows": [int(min(len(d[0]) for d in data)), int(max(len(d[0]) for d in data))],
        "max_logprob_gap": max(gaps),
        "logprob_gaps": gaps,
        "padding": batched.stats.to_dict(),
        "case": case,
    }


def _device_memory(device: str, quick: bool) -> dict[str, Any]:
    """Peak device memory one call adds (CUDA allocator statistics)."""
    import torch

    from eval.benchmarks.attention import attention_inputs
    from eval.benchmarks.shapes import (
        MEMORY_SHAPE,
        QUICK_MEMORY_SHAPE,
    )

    if not device.startswith("cuda"):
        return {"skipped": "peak device memory needs CUDA allocator statistics"}
    shape = QUICK_MEMORY_SHAPE if quick else MEMORY_SHAPE
    result: dict[str, Any] = {"shape": list(shape.dims()), "dtypes": {}}
    for dt in (torch.float32, torch.bfloat16):
        x = attention_inputs(shape, device=device, dtype=dt)
        peers = _device_peers(x)
        per: dict[str, int] = {}
        with torch.inference_mode():
            for name, fn in peers.items():
                fn()  # warm-up (workspace, kernel selection)
                torch.cuda.synchronize()
                torch.cuda.empty_cache()
                torch.cuda.reset_peak_memory_stats()
                base = torch.cuda.memory_allocated()
                out = fn()
                torch.cuda.synchronize()
                per[name] = int(torch.cuda.max_memory_allocated() - base)
                del out
        result["dtypes"][str(dt).replace("torch.", "")] = {
            "extra_peak_bytes": per,
            "ratio_oattention_vs_sdpa": per["oattention"] / per["sdpa"] if per["sdpa"] else None,
        }
        del x, peers
    return result


# --------------------------------------------------------------------------- #
# Report
# --------------------------------------------------------------------------- #


_EXACTNESS_HEADER = (
    "case",
    "dtype",
    "route",
    "L-inf vs f64",
    "vs same-dtype direct",
    "same-dtype floor",
    "null rows 0",
    "empty rows 0",
    "null-source insertion L-inf",
)
_HOST_HEADER = (
    "dtype",
    "mode",
    "null row",
    "old rows rel. drift",
    "tolerance",
    "null row final max",
    "holds",
)


def _exactness_rows(rows: list[dict[str, Any]]) -> list[list[object]]:
    """One table row per (case, dtype): errors against float64 and the contracts."""
    return [
        [
            r["case"],
            r["dtype"],
            r["route"],
            f"{r['linf_vs_float64']:.3g}",
            f"{r['linf_vs_same_dtype_direct']:.3g}",
            f"{r['linf_same_dtype_direct_vs_float64']:.3g}",
            r["null_receivers_exactly_zero"],
            f"{r['empty_support_rows_exactly_zero']} ({r['n_empty_rows']})",
            f"{r['null_source_insertion_linf']:.3g}",
        ]
        for r in rows
    ]


def _host_rows(rows: list[dict[str, Any]]) -> list[list[object]]:
    """One table row per (dtype, mode, null row): drift of the old rows and the verdict."""
    return [
        [
            r["dtype"],
            r["mode"],
            r["null_row"],
            f"{r['old_rows_rel_drift']:.3g}",
            f"{r['tolerance_rel']:.3g}",
            f"{r['null_row_final_max_abs']:.3g}",
            r.get("holds", "control"),
        ]
        for r in rows
    ]


def _speed_rows(rows: list[dict[str, Any]]) -> list[list[object]]:
    """One table row per benchmarked (dtype, shape): SDPA ms and each peer's ratio to it."""

    def cell(r: dict[str, Any], name: str) -> str:
        x = r["ratios_vs_sdpa"].get(name)
        return "—" if x is None else f"{x['ratio']:.3f} [{x['ci_low']:.3f}, {x['ci_high']:.3f}]"

    return [
        [
            r["dtype"],
            tuple(r["shape"]),
            f"{r['group']} {r['label']}",
            f"{r['median_ms']['sdpa']:.3f}",
            cell(r, "oattention"),
            cell(r, "oattention_trusted"),
            cell(r, "sdpa_efficient"),
        ]
        for r in rows
    ]


def _render(report: dict[str, Any]) -> str:
    lines = [
        "# GPU check: OAttention on the device",
        "",
        f"Device `{report['device_name']}`, torch {report['torch']} (CUDA {report['cuda']}), "
        f"commit `{report['provenance'].get('git_commit')}`, {report['provenance']['date_utc']}"
        + (", quick dry run" if report["quick"] else "")
        + f"; {report['wall_s']:.0f} s in all.",
        "",
    ]
    ex = report.get("exactness")
    if ex and "error" not in ex:
        lines += [
            "## Operator exactness",
            "",
            "Worst fp32 L-inf vs float64 direct evaluation: "
            f"{ex['worst_fp32_linf_vs_float64']:.3g} "
            f"(paper: <= {ex['paper_fp32_linf']:.3g}; met: {ex['meets_paper_fp32_claim']}). "
            f"All contracts: {ex['all_contracts']}. Vectorised oracle vs per-row reference: "
            f"{ex['oracle_check_linf_direct_vs_reference']:.3g}.",
            "",
            *markdown_table(_EXACTNESS_HEADER, _exactness_rows(ex["rows"]), align="lllrrrllr"),
            "",
        ]
    host = report.get("host")
    if host and "error" not in host:
        lines += [
            "## Patched host: zero row inserted at ICL block 0",
            "",
            f"Host: {host['host']}. Criterion: {host['criterion']}. All hold: {host['all_hold']}.",
            "",
            *markdown_table(_HOST_HEADER, _host_rows(host["rows"]), align="lllrrrl"),
            "",
        ]
    b = report.get("bench")
    if b and "error" not in b:
        lines += [
            "## Speed (interleaved, median ratio to SDPA [95% CI])",
            "",
            *markdown_table(
                ("dtype", "shape", "case", "SDPA ms", "OAttention", "trusted", "SDPA efficient"),
                _speed_rows(b["rows"]),
                align="lllrlll",
            ),
            "",
        ]
        mem = b["memory"]
        if "skipped" in mem:
            lines += [f"Peak memory: not measured ({mem['skipped']}).", ""]
        else:
            lines += [f"Peak device memory one call adds, shape {tuple(mem['shape'])}:", ""]
            for dt, m in mem["dtypes"].items():
                per = ", ".join(
                    f"{n} {v / 2**20:.1f} MiB" for n, v in m["extra_peak_bytes"].items()
                )
                ratio = m["ratio_oattention_vs_sdpa"]
                lines.append(
                    f"- {dt}: {per}; OAttention / SDPA "
                    + (f"{ratio:.3f}" if ratio is not None else "—")
                )
            lines.append("")
    rb = report.get("batched")
    if rb and "error" not in rb:
        lines += [
            "## Ragged batches: null-padded predict_batched vs per-dataset predict",
            "",
            f"{rb['n_datasets']} datasets of {rb['rows'][0]}-{rb['rows'][1]} train rows; "
            f"max log-probability gap to predict {rb['max_logprob_gap']:.3g} (relative to "
            f"max(1, |log p|)); padded cells {rb['padding']['padded_cell_fraction']:.1%} "
            f"in {rb['padding']['forwards']} forwards.",
            "",
            *markdown_table(
                ("peer", "ms / dataset", "ratio to loop"),
                [
                    [
                        name,
                        f"{row['median_s_per_dataset'] * 1e3:.1f}",
                        "1"
                        if row["ratio_to_loop"] is None
                        else f"{row['ratio_to_loop']['ratio']:.2f} "
                        f"[{row['ratio_to_loop']['ci_low']:.2f}, "
                        f"{row['ratio_to_loop']['ci_high']:.2f}]",
                    ]
                    for name, row in rb["case"]["peers"].items()
                ],
                align="lrl",
            ),
            "",
        ]
    for part in PARTS:
        if report.get(part, {}).get("warnings"):
            lines += [f"Warnings in {part}:", ""]
            lines += [f"- {w}" for w in report[part]["warnings"][:20]]
            lines.append("")
        if report.get(part, {}).get("error"):
            lines += [f"## {part}: failed", "", "```", report[part]["error"], "```", ""]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the GPU check; returns the exit status (2: no CUDA or bad usage)."""
    return run_main(_parser, _run, argv)


def _parser() -> argparse.ArgumentParser:
    parser = OneLineArgumentParser(
        prog="gpu_check", description="OAttention exactness, null-row proof and speed on CUDA."
    )
    parser.add_argument("out_dir", help="folder for gpu_check.json and gpu_check.md")
    parser.add_argument("--device", default="cuda", help="cuda (default) or cpu for a dry run")
    parser.add_argument("--quick", action="store_true", help="small sizes (dry runs)")
    parser.add_argument("--model", default="embedded", help="host checkpoint (default embedded)")
    parser.add_argument(
        "--parts",
        nargs="+",
        choices=PARTS,
        default=list(PARTS),
    )
    return parser


def _run(args: argparse.Namespace) -> int:
    _fix_sys_path()
    import torch

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise CommandError(
            f"CUDA is not available (torch {torch.__version__}, built for "
            f"CUDA {torch.version.cuda}); run it on a CUDA machine, or pass --device cpu "
            "for a dry run"
        )
    from eval.provenance import provenance_dict
    from retrofit.files import write_json_atomic, write_text_atomic

    def progress(line: str) -> None:
        print(f"[{time.time() - t0:6.1f}s] {line}", flush=True)

    t0 = time.time()
    torch.manual_seed(0)
    if args.device.startswith("cuda"):
        # Direct comparisons in fp32 must not use TF32 matmuls.
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    report: dict[str, Any] = {
        "quick": args.quick,
        "device": args.device,
        "device_name": torch.cuda.get_device_name(0)
        if args.device.startswith("cuda")
        else "cpu (dry run)",
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
    }
    runners = {
        "exactness": lambda: exactness(args.device, args.quick, progress),
        "host": lambda: host_null_row(args.device, args.quick, args.model, progress),
        "bench": lambda: device_bench(args.device, args.quick, args.model, progress),
        "batched": lambda: ragged_batches(args.device, args.quick, args.model, progress),
    }
    for part in args.parts:
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                report[part] = runners[part]()
            report[part]["warnings"] = sorted({str(w.message)[:300] for w in caught})
        except Exception:  # record and go on: one failing part must not lose the others
            report[part] = {"error": traceback.format_exc(limit=8)[-4000:]}
            progress(f"{part}: FAILED\n{report[part]['error']}")
    report["wall_s"] = time.time() - t0
    report["provenance"] = provenance_dict(check="eval/gpu_check.py", parts=list(args.parts))
    out = Path(args.out_dir)
    write_json_atomic(out / "gpu_check.json", report)
    write_text_atomic(out / "gpu_check.md", _render(report))
    print(f"wrote {out}/gpu_check.json and gpu_check.md")
    failed = [p for p in args.parts if "error" in report[p]]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
