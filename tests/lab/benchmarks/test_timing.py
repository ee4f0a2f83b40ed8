"""Timing peers against each other: interleaved rounds, paired ratios, the peak probe."""

from __future__ import annotations

import pytest

from lab.benchmarks.timing import paired_ratio, process_rounds, time_interleaved


def test_paired_ratio_median_and_ci_bracket_it():
    den = [1.0] * 30
    num = [1.1] * 10 + [1.2] * 10 + [1.3] * 10
    r = paired_ratio(num, den)
    assert r["ratio"] == pytest.approx(1.2)
    assert r["ci_low"] <= r["ratio"] <= r["ci_high"]
    assert 1.1 <= r["ci_low"] and r["ci_high"] <= 1.3
    with pytest.raises(ValueError):
        paired_ratio([1.0], [1.0, 2.0])


def test_time_interleaved_runs_every_peer_every_round():
    calls = {"a": 0, "b": 0}

    def peer(name):
        def fn():
            calls[name] += 1

        return fn

    times, inner = time_interleaved(
        {"a": peer("a"), "b": peer("b")}, repeats=4, warmup=1, min_time_s=0.0
    )
    assert inner == 1
    assert {k: len(v) for k, v in times.items()} == {"a": 4, "b": 4}
    # warm-up, calibration and the timed rounds
    assert calls == {"a": 1 + 1 + 4, "b": 1 + 1 + 4}


def test_a_batched_timing_whose_probe_reads_no_growth_records_unknown(monkeypatch):
    """The benchmarks share one timed probe and its rule: a probe that read no growth is unknown."""
    from lab.benchmarks import timing

    monkeypatch.setattr(timing, "status_kib", lambda field: 4096)
    monkeypatch.setattr(timing, "reset_peak_rss", lambda: True)
    seconds, peak = timing.timed_with_peak(lambda: None)
    assert seconds >= 0 and peak is None


def test_process_rounds_times_every_peer_once_a_round_and_counts_its_page_faults():
    import random

    import numpy as np

    calls: list[str] = []
    lines: list[str] = []

    def fresh_pages() -> None:
        # 64 MiB written at once: mapped afresh (above any glibc threshold), so it faults.
        calls.append("fresh")
        np.ones(8 * 2**20).sum()

    peers = {"idle": lambda: calls.append("idle"), "fresh": fresh_pages}
    rounds = process_rounds(peers, repeats=3, rng=random.Random(0), progress=lines.append)
    assert sorted(calls) == ["fresh"] * 3 + ["idle"] * 3 and len(lines) == 3
    for got in rounds.values():
        assert {k: len(v) for k, v in got.items()} == {"s": 3, "peak": 3, "faults": 3}
        assert all(s >= 0 for s in got["s"])
    assert min(rounds["fresh"]["faults"]) >= 32  # 64 MiB: 16,384 pages, or 32 huge pages
    assert max(rounds["idle"]["faults"]) < min(rounds["fresh"]["faults"])
