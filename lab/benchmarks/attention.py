"""The attention part of ``bench``: OAttention against plain attention on the same inputs.

:func:`patches.oattention` (and its ``validate=False`` entry for trusted
callers) against ``torch.nn.functional.scaled_dot_product_attention`` without
a bias, at fixed shapes and at the ICL shapes of a host, timed interleaved
(:mod:`lab.benchmarks.timing`); on CPU also the flash kernel OAttention calls,
given the same bias and nothing else.

Shape letters: B batch, H query heads, Hkv key/value heads, L queries,
S sources, D head dimension (the layout of ``scaled_dot_product_attention``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from lab.benchmarks import TARGETS
from lab.benchmarks.shapes import Shape
from lab.benchmarks.timing import paired_ratio, time_interleaved
from patches.oattention import oattention

__all__ = ["OWN_WORK_PEERS", "attention_inputs", "attention_peers", "bench_attention"]

#: The peers that measure OAttention's own work over the kernel it calls
#: (:func:`bench_attention`'s ``only``), for the one-thread pass of ``bench``.
OWN_WORK_PEERS: tuple[str, ...] = ("oattention", "oattention_block", "kernel_with_bias")


def attention_inputs(
    shape: Shape, *, device: str = "cpu", dtype: Any = None, seed: int = 0
) -> dict[str, Any]:
    """Random ``q, k, v`` and presence for one shape.

    Presence is that of random carriers (``||h||^2 / (1 + ||h||^2)``) with
    about 2 % null tokens, so the bias holds ``-inf`` entries as in real use.

    Returns:
        ``{"q": (B,H,L,D), "k": (B,H,S,D), "v": (B,H,S,D), "p_q": (B,L), "p_k": (B,S)}``.
    """
    dtype = dtype or torch.float32
    g = torch.Generator().manual_seed(seed)
    B, H, L, S, D = shape.dims()

    def rnd(*size: int) -> torch.Tensor:
        return torch.randn(*size, generator=g).to(device=device, dtype=dtype)

    def pres(n: int) -> torch.Tensor:
        sq = torch.rand(B, n, generator=g) * 4.0
        p = sq / (1.0 + sq)
        p[torch.rand(B, n, generator=g) < 0.02] = 0.0
        return p.to(device)

    return {
        "q": rnd(B, H, L, D),
        "k": rnd(B, H, S, D),
        "v": rnd(B, H, S, D),
        "p_q": pres(L),
        "p_k": pres(S),
    }


def attention_peers(x: dict[str, Any]) -> dict[str, Callable[[], Any]]:
    """The timed calls on one set of inputs: SDPA, OAttention, and on CPU the kernel it calls.

    Args:
        x: Inputs from :func:`attention_inputs`.

    Returns:
        Peer name to a zero-argument callable.
    """
    q, k, v, p_q, p_k = x["q"], x["k"], x["v"], x["p_q"], x["p_k"]
    # What a patched block hands OAttention: null tokens' q, k and v exactly zero.
    null_q, null_k = (p_q == 0)[:, None, :, None], (p_k == 0)[:, None, :, None]
    q0, k0, v0 = q.masked_fill(null_q, 0.0), k.masked_fill(null_k, 0.0), v.masked_fill(null_k, 0.0)
    peers = {
        "sdpa": lambda: F.scaled_dot_product_attention(q, k, v),
        "oattention": lambda: oattention(q, k, v, p_q, p_k),
        "oattention_trusted": lambda: oattention(q, k, v, p_q, p_k, validate=False),
        "oattention_block": lambda: oattention(
            q0, k0, v0, p_q, p_k, validate=False, nulls_are_zero=True
        ),
    }
    if q.device.type == "cpu":
        # The kernel OAttention calls, with the same bias and nothing else: the
        # floor its own post-processing sits on.
        bias = torch.xlogy(1.0, p_k).view(p_k.shape[0], 1, 1, p_k.shape[1])
        kernel = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
        peers["kernel_with_bias"] = lambda: kernel(q, k, v, attn_mask=bias)
    return peers


def bench_attention(
    shapes: Sequence[Shape],
    *,
    repeats: int,
    min_time_s: float,
    device: str = "cpu",
    dtype: Any = None,
    seed: int = 0,
    progress: Callable[[str], None] | None = None,
    only: Sequence[str] | None = None,
) -> list[dict[str, Any]]:
    """Times SDPA and OAttention interleaved at each shape.

    Args:
        shapes: The problem sizes.
        repeats: Timed rounds per shape.
        min_time_s: Shortest measurement (a call is repeated until it lasts this long).
        device: Device of the inputs.
        dtype: Dtype of q, k and v (float32 when None).
        seed: Seed of the inputs and round orders.
        progress: Receives one line per shape.
        only: Time just these peers (for example :data:`OWN_WORK_PEERS`);
            ratios to SDPA and the SDPA target are then left out unless
            ``"sdpa"`` is among them.

    Returns:
        One row per shape: shape, median ms per peer, ratios with CIs, target.
    """
    sync = torch.cuda.synchronize if device.startswith("cuda") else None
    rows = []
    for i, shape in enumerate(shapes):
        x = attention_inputs(shape, device=device, dtype=dtype, seed=seed + i)
        peers = attention_peers(x)
        if only is not None:
            peers = {name: peers[name] for name in only if name in peers}
        with torch.inference_mode():
            times, inner = time_interleaved(
                peers, repeats=repeats, min_time_s=min_time_s, sync=sync, seed=i
            )
        del x, peers
        row: dict[str, Any] = {
            "shape": list(shape.dims()),
            "group": shape.group,
            "label": shape.label,
            "calls_per_measurement": inner,
            "rounds": repeats,
            "median_ms": {n: 1e3 * float(np.median(t)) for n, t in times.items()},
            "ratios": {
                n: paired_ratio(t, times["sdpa"], seed=i)
                for n, t in times.items()
                if n != "sdpa" and "sdpa" in times
            },
        }
        # OAttention's own work on top of the kernel it calls: the checked
        # entry, and the call the patched blocks make.
        for peer, key in (
            ("oattention", "oattention_vs_kernel_with_bias"),
            ("oattention_block", "block_vs_kernel_with_bias"),
        ):
            if peer in times and "kernel_with_bias" in times:
                row[key] = paired_ratio(times[peer], times["kernel_with_bias"], seed=i)
        target = TARGETS.get(shape.group) if "sdpa" in times else None
        row["target"] = target
        if target is not None:
            row["met"] = row["ratios"]["oattention"]["ci_high"] <= target
        rows.append(row)
        if progress:
            progress(f"attention {shape.dims()} {shape.label}: {_progress_line(row)}")
    return rows


def _progress_line(row: dict[str, Any]) -> str:
    """OAttention's ratio to SDPA, or to its kernel where SDPA was not timed."""
    if "oattention" in row["ratios"]:
        r = row["ratios"]["oattention"]
        return (
            f"sdpa {row['median_ms']['sdpa']:.2f} ms, "
            f"oattention x{r['ratio']:.3f} [{r['ci_low']:.3f}, {r['ci_high']:.3f}]"
        )
    r = row.get("block_vs_kernel_with_bias")
    return "block / kernel+bias " + (f"x{r['ratio']:.3f}" if r else "not timed")
