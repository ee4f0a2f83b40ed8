"""OAttention as the patched blocks call it, checked and trusted, against its kernel plus bias.

A patched block calls :func:`patches.oattention` with ``validate=False``;
where its maps keep a null row exactly zero it also passes
``nulls_are_zero=True``, which skips the null-source check
(:mod:`retrofit.hosts.common.row_attention`). Three peers per shape, timed
interleaved (:mod:`lab.benchmarks.timing`) on the same inputs, whose null
sources' keys and values are zero as a block's are: ``checked`` (the
validating public call), ``trusted`` (the call a block makes) and, on CPU,
``kernel_with_bias`` (the fused kernel OAttention calls, given the same log-presence bias
and nothing else: the floor OAttention's own work sits on).

Shapes: ``bench``'s fixed and ICL shapes, and the small many-batch shapes of
ragged batching (:data:`RAGGED_SHAPES`). ``python -m lab.benchmarks.trusted_attention``
prints the rows as JSON.

Shape letters: B batch, H query heads, L queries, S sources, D head dimension.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from lab.benchmarks.attention import attention_inputs
from lab.benchmarks.shapes import LARGE_SHAPES, SMALL_SHAPES, Shape, icl_shapes
from lab.benchmarks.timing import paired_ratio, time_interleaved
from patches.oattention import oattention

__all__ = ["RAGGED_SHAPES", "bench_trusted_attention", "default_shapes"]

#: ICL attention of ragged buckets on the embedded host (4 heads of 32): a
#: bucket's datasets times their ensemble members as the batch, 30-250 rows.
RAGGED_SHAPES: tuple[Shape, ...] = (
    Shape(128, 4, 48, 36, 32, "ragged", "bucket of 30-60 rows"),
    Shape(64, 4, 128, 96, 32, "ragged", "bucket of 100-130 rows"),
    Shape(32, 4, 256, 192, 32, "ragged", "bucket of 200-250 rows"),
)


def default_shapes(model_path: str = "embedded") -> list[Shape]:
    """``bench``'s large, small and ICL shapes of ``model_path``, then :data:`RAGGED_SHAPES`."""
    return [*LARGE_SHAPES, *SMALL_SHAPES, *icl_shapes(model_path)[0], *RAGGED_SHAPES]


def _peers(x: dict[str, Any]) -> dict[str, Callable[[], Any]]:
    q, k, v, p_q, p_k = x["q"], x["k"], x["v"], x["p_q"], x["p_k"]
    peers = {
        "checked": lambda: oattention(q, k, v, p_q, p_k, validate=False),
        "trusted": lambda: oattention(q, k, v, p_q, p_k, validate=False, nulls_are_zero=True),
    }
    if q.device.type == "cpu":
        bias = torch.xlogy(1.0, p_k).view(p_k.shape[0], 1, 1, p_k.shape[1])
        kernel = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
        peers["kernel_with_bias"] = lambda: kernel(q, k, v, attn_mask=bias)
    return peers


def bench_trusted_attention(
    shapes: Sequence[Shape] | None = None,
    *,
    repeats: int = 15,
    min_time_s: float = 0.05,
    device: str = "cpu",
    seed: int = 0,
) -> list[dict[str, Any]]:
    """Times the checked and trusted calls and the kernel plus bias at each shape.

    Args:
        shapes: The shapes; :func:`default_shapes` when None.
        repeats: Timed rounds per shape.
        min_time_s: Each measurement repeats a call until it lasts about this long.
        device: Where the inputs live.
        seed: Seed of the inputs and round orders.

    Returns:
        One row per shape: ``shape``, ``group``, ``label``, ``median_ms`` per
        peer, and ``ratios``: ``trusted_vs_checked`` and, on CPU,
        ``checked_vs_kernel_with_bias`` and ``trusted_vs_kernel_with_bias``
        (paired ratios with CIs).
    """
    sync = torch.cuda.synchronize if device.startswith("cuda") else None
    rows = []
    for i, shape in enumerate(shapes if shapes is not None else default_shapes()):
        x = attention_inputs(shape, device=device, seed=seed + i)
        # As a patched block hands them over: null sources' keys and values are zero.
        null_B1S1 = (x["p_k"] == 0)[:, None, :, None]
        x["k"] = x["k"].masked_fill(null_B1S1, 0.0)
        x["v"] = x["v"].masked_fill(null_B1S1, 0.0)
        with torch.inference_mode():
            times, inner = time_interleaved(
                _peers(x), repeats=repeats, min_time_s=min_time_s, sync=sync, seed=seed + i
            )
        pairs = {"trusted_vs_checked": ("trusted", "checked")}
        if "kernel_with_bias" in times:
            pairs["checked_vs_kernel_with_bias"] = ("checked", "kernel_with_bias")
            pairs["trusted_vs_kernel_with_bias"] = ("trusted", "kernel_with_bias")
        rows.append(
            {
                "shape": list(shape.dims()),
                "group": shape.group,
                "label": shape.label,
                "calls_per_measurement": inner,
                "rounds": repeats,
                "median_ms": {n: 1e3 * float(np.median(t)) for n, t in times.items()},
                "ratios": {
                    name: paired_ratio(times[a], times[b], seed=seed + i)
                    for name, (a, b) in pairs.items()
                },
            }
        )
    return rows


if __name__ == "__main__":
    torch.set_num_threads(1)
    print(json.dumps(bench_trusted_attention(), indent=2))
