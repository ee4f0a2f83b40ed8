"""Timing peers against each other: interleaved rounds and paired ratios.

Peers are timed interleaved in one process, in a fresh random order each
round, so load drift on a shared machine hits every peer alike; each
measurement repeats a call until it lasts ``min_time_s`` (scheduler ticks on a
loaded machine are several ms). A ratio is the median over rounds of the
per-round ratio, with a percentile bootstrap confidence interval over rounds.
A call that is long enough on its own is timed once in CPU seconds with the
peak memory it adds (:func:`timed_with_peak`), and its minor page faults (the
kernel's time for them counts in the CPU seconds; how many a call takes
depends on what the allocator kept from the calls before), round after round
(:func:`process_rounds`).
"""

from __future__ import annotations

import math
import random
import resource
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from lab.benchmarks.memory_probe import known_growth, reset_peak_rss, status_kib

__all__ = ["measured_here", "paired_ratio", "process_rounds", "time_interleaved", "timed_with_peak"]


def time_interleaved(
    peers: dict[str, Callable[[], Any]],
    *,
    repeats: int,
    warmup: int = 2,
    min_time_s: float = 0.05,
    sync: Callable[[], None] | None = None,
    seed: int = 0,
) -> tuple[dict[str, list[float]], int]:
    """Times peers interleaved: each round runs every peer once, in a random order.

    Args:
        peers: Name to a zero-argument callable.
        repeats: Number of timed rounds.
        warmup: Untimed rounds first (kernel selection, allocator warm-up).
        min_time_s: Each measurement repeats a call ``n`` times, ``n`` chosen
            once so that the fastest peer's measurement lasts about this long.
        sync: Called before and after each measurement (``torch.cuda.synchronize``
            on a GPU).
        seed: Seed of the round orders.

    Returns:
        ``(seconds per call per round for each peer, n calls per measurement)``.
    """
    sync = sync or (lambda: None)
    names = list(peers)
    for _ in range(warmup):
        for name in names:
            peers[name]()
    sync()
    fastest = math.inf
    for name in names:
        t0 = time.perf_counter()
        peers[name]()
        sync()
        fastest = min(fastest, time.perf_counter() - t0)
    inner = max(1, math.ceil(min_time_s / max(fastest, 1e-9)))
    rng = random.Random(seed)
    times: dict[str, list[float]] = {name: [] for name in names}
    for _ in range(repeats):
        order = names[:]
        rng.shuffle(order)
        for name in order:
            fn = peers[name]
            sync()
            t0 = time.perf_counter()
            for _ in range(inner):
                fn()
            sync()
            times[name].append((time.perf_counter() - t0) / inner)
    return times, inner


def paired_ratio(
    num: Sequence[float],
    den: Sequence[float],
    *,
    n_boot: int = 2000,
    level: float = 0.95,
    seed: int = 0,
) -> dict[str, float]:
    """Median of per-round ratios ``num / den`` with a percentile bootstrap CI.

    Rounds are resampled with replacement (pairs stay together), so load that
    hits both peers of a round cancels.

    Args:
        num: Times of the peer, one per round.
        den: Times of the baseline, same rounds.
        n_boot: Bootstrap resamples.
        level: Confidence level of the interval.
        seed: Seed of the resampling.

    Returns:
        ``{"ratio", "ci_low", "ci_high", "ratio_of_medians"}``.
    """
    a, b = np.asarray(num, dtype=float), np.asarray(den, dtype=float)
    if a.shape != b.shape or a.size == 0:
        raise ValueError(f"need equal, non-empty samples, got {a.shape} and {b.shape}")
    r = a / b
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, r.size, size=(n_boot, r.size))
    boot = np.median(r[idx], axis=1)
    lo, hi = np.quantile(boot, [(1 - level) / 2, 1 - (1 - level) / 2])
    return {
        "ratio": float(np.median(r)),
        "ci_low": float(lo),
        "ci_high": float(hi),
        "ratio_of_medians": float(np.median(a) / np.median(b)),
    }


def timed_with_peak(fn: Callable[[], Any]) -> tuple[float, int | None]:
    """CPU seconds of one call of ``fn`` and the peak resident memory it adds.

    CPU time of the process (every torch thread counts; other jobs on a shared
    machine do not), so peers compare by the work they do.

    The peak is Linux's ``VmHWM`` after a reset through ``/proc/self/clear_refs``
    (None where that is unavailable, or where it read no growth); the reset
    happens before the clock starts.
    """
    before = status_kib("VmRSS")
    resettable = reset_peak_rss()
    t0 = time.process_time()
    fn()
    seconds = time.process_time() - t0
    peak = status_kib("VmHWM") if resettable else None
    return seconds, known_growth(None if peak is None or before is None else (peak - before) * 1024)


def measured_here(fn: Callable[[], Any]) -> tuple[float, int | None, int]:
    """One call of ``fn`` in this process: CPU seconds, peak added memory, minor page faults."""
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    spent, peak = timed_with_peak(fn)
    return spent, peak, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before


def process_rounds(
    peers: dict[str, Callable[[], Any]],
    *,
    repeats: int,
    rng: random.Random,
    progress: Callable[[str], None] | None = None,
    measure: Callable[[Callable[[], Any]], tuple[float, int | None, int]] = measured_here,
) -> dict[str, dict[str, list]]:
    """Each peer called once a round, in a fresh random order each round.

    Args:
        peers: The calls, by name.
        repeats: Rounds.
        rng: Draws the round orders.
        progress: Receives one line per round.
        measure: Times one call of a peer: ``(seconds, peak added bytes or
            None, minor page faults)``. By default the call runs here
            (:func:`measured_here`); a peer that runs elsewhere (a fresh
            process) reports its own figures through a ``measure`` that
            returns them.

    Returns:
        Per peer, one entry a round: ``"s"`` (CPU seconds), ``"peak"`` (peak
        added memory) and ``"faults"`` (minor page faults during the call).
    """
    names = list(peers)
    rounds: dict[str, dict[str, list]] = {n: {"s": [], "peak": [], "faults": []} for n in names}
    for r in range(repeats):
        order = names[:]
        rng.shuffle(order)
        for name in order:
            for key, value in zip(("s", "peak", "faults"), measure(peers[name]), strict=True):
                rounds[name][key].append(value)
        if progress:
            progress(
                f"  round {r + 1}/{repeats}: "
                + ", ".join(f"{n} {rounds[n]['s'][-1]:.2f} s" for n in names)
            )
    return rounds
