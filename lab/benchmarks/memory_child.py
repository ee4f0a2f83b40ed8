"""The measuring process of the memory part: one call of one peer, in a fresh process.

Run by :func:`lab.benchmarks.memory.bench_memory` as
``python -m lab.benchmarks.memory_child '<json arguments>'``; it prints one
JSON line. The inputs are allocated first and one small call pays the one-time
costs (thread pool, kernel tables), so the peak growth is the call's own.
"""

from __future__ import annotations

import json
import resource
import sys
from typing import Any

import torch

from lab.benchmarks.attention import attention_inputs, attention_peers
from lab.benchmarks.memory_probe import known_growth, reset_peak_rss, status_kib
from lab.benchmarks.shapes import Shape

__all__ = ["main", "measure_one_call"]


def measure_one_call(peer: str, dims: list[int], threads: int | None, seed: int) -> dict[str, Any]:
    """Runs one call of ``peer`` in this (fresh) process and reports its peak growth.

    Args:
        peer: A name of :func:`lab.benchmarks.attention.attention_peers`.
        dims: ``(B, H, L, S, D)`` of the call.
        threads: torch threads (None: keep).
        seed: Seed of the inputs.

    Returns:
        ``extra_peak_bytes`` (None where the probe read nothing), the resident
        size before, the output and input sizes, and the method.
    """
    if threads:
        torch.set_num_threads(threads)
    shape = Shape(*dims, group="memory")
    with torch.inference_mode():
        fn = attention_peers(attention_inputs(Shape(1, 2, 64, 32, 8), seed=seed))[peer]
        fn()  # one-time costs (thread pool, kernel tables) outside the measurement
        x = attention_inputs(shape, seed=seed)
        fn = attention_peers(x)[peer]
        rss_before = status_kib("VmRSS")
        if reset_peak_rss():
            method = "VmHWM after /proc/self/clear_refs minus VmRSS before"
            base = rss_before
        else:
            method = "ru_maxrss growth"
            base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        out = fn()
        if method.startswith("VmHWM"):
            peak = status_kib("VmHWM")
        else:
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        out_bytes = out.numel() * out.element_size()
        input_bytes = sum(t.numel() * t.element_size() for t in x.values())
    return {
        "peer": peer,
        "extra_peak_bytes": known_growth(
            (peak - base) * 1024 if peak is not None and base else None
        ),
        "rss_before_bytes": rss_before * 1024 if rss_before else None,
        "output_bytes": out_bytes,
        "input_bytes": input_bytes,
        "method": method,
    }


def main() -> None:
    """JSON arguments (``sys.argv[1]``) in, one JSON line out."""
    args = json.loads(sys.argv[1])
    print(json.dumps(measure_one_call(**args)))


if __name__ == "__main__":
    main()
