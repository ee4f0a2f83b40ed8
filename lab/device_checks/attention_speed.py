"""Part 3 of the GPU check: SDPA against OAttention on the device, time and peak memory.

SDPA (default dispatch, and forced memory-efficient, the kernel OAttention
uses on CUDA) against OAttention, timed interleaved in fp32 and bf16
(:mod:`lab.benchmarks.timing`) at the benchmark's shapes; the peak device
memory one call adds, from the CUDA allocator's statistics.

Shape letters: B batch, H query heads, Hkv key/value heads, L queries,
S sources, D head dimension.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from lab.benchmarks.attention import attention_inputs
from lab.benchmarks.shapes import (
    LARGE_SHAPES,
    MEMORY_SHAPE,
    QUICK_MEMORY_SHAPE,
    QUICK_SHAPES,
    SMALL_SHAPES,
    Shape,
    icl_shapes,
)
from lab.benchmarks.timing import paired_ratio, time_interleaved
from patches.oattention import oattention

__all__ = ["device_bench"]


def _device_peers(x: dict[str, Any]) -> dict[str, Callable[[], Any]]:
    """SDPA (default and, on CUDA, forced memory-efficient) and OAttention on ``x``."""
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


def _device_memory(device: str, quick: bool) -> dict[str, Any]:
    """Peak device memory one call adds (CUDA allocator statistics)."""
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
