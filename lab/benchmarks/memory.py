"""The memory part of ``bench``: the peak resident memory one attention call adds.

Each peer runs in its own fresh process (:mod:`lab.benchmarks.memory_child`),
its inputs allocated first; the peak is read through
:mod:`lab.benchmarks.memory_probe`. A probe that read nothing is recorded as
unknown, and so is a ratio without both medians.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from lab.benchmarks import TARGETS
from lab.benchmarks.child import run_child
from lab.benchmarks.memory_probe import known_growth
from lab.benchmarks.shapes import Shape

__all__ = ["bench_memory"]


def bench_memory(
    shape: Shape,
    *,
    runs: int = 3,
    threads: int | None = None,
    seed: int = 0,
    timeout_s: float = 600.0,
) -> dict[str, Any]:
    """Peak memory one call adds, SDPA vs OAttention, each in a fresh process.

    Returns:
        Per peer the measured extra peak bytes of each run (None where the
        probe read nothing) and the median of the known ones (None if none is
        known), and the ratio ``oattention / sdpa`` of the medians (None, and
        ``met`` None, unless both are known).
    """
    peers = ("sdpa", "oattention")
    samples: dict[str, list[dict[str, Any]]] = {p: [] for p in peers}
    for _ in range(runs):
        for peer in peers:
            arguments = {"peer": peer, "dims": list(shape.dims()), "threads": threads, "seed": seed}
            samples[peer].append(
                run_child(
                    "lab.benchmarks.memory_child",
                    arguments,
                    timeout_s=timeout_s,
                    what=f"memory child for {peer}",
                )
            )
    result: dict[str, Any] = {"shape": list(shape.dims()), "runs": runs, "peers": {}}
    for peer, rows in samples.items():
        extra = [known_growth(r["extra_peak_bytes"]) for r in rows]
        known = [b for b in extra if b is not None]
        result["peers"][peer] = {
            "extra_peak_bytes": extra,
            "median_extra_peak_bytes": float(np.median(known)) if known else None,
            "output_bytes": rows[0]["output_bytes"],
            "input_bytes": rows[0]["input_bytes"],
        }
        result["method"] = rows[0]["method"]
    med = {p: result["peers"][p]["median_extra_peak_bytes"] for p in peers}
    ratio = med["oattention"] / med["sdpa"] if None not in med.values() else None
    result["ratio"] = ratio
    result["target"] = TARGETS["memory"]
    result["met"] = ratio <= TARGETS["memory"] if ratio is not None else None
    return result
