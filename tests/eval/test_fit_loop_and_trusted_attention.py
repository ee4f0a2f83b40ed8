"""The fit-loop and trusted-attention benchmarks run and report what their callers read."""

from __future__ import annotations

import torch

from eval.benchmarks.fit_loop import FIT_LOOP_TARGETS, bench_fit_loop
from eval.benchmarks.shapes import QUICK_SHAPES
from eval.benchmarks.trusted_attention import bench_trusted_attention


def test_the_fit_loop_times_every_peer_each_round_and_leaves_the_thread_count():
    threads = torch.get_num_threads()
    report = bench_fit_loop(n_datasets=2, max_rows=40, rounds=2, warmup=0, n_estimators=1)
    assert torch.get_num_threads() == threads
    assert set(report["seconds"]) == {"tabpfn", "none", "full-o"}
    assert all(len(s) == 2 and min(s) > 0 for s in report["seconds"].values())
    assert set(report["ratios"]) == set(FIT_LOOP_TARGETS) == set(report["met"])
    assert report["ratios"]["none"]["ci_low"] <= report["ratios"]["none"]["ratio"]


def test_trusted_attention_rows_name_each_ratio_against_the_kernel():
    rows = bench_trusted_attention(QUICK_SHAPES[1:], repeats=2, min_time_s=0.001)
    (row,) = rows
    assert row["shape"] == list(QUICK_SHAPES[1].dims())
    assert set(row["median_ms"]) == {"checked", "trusted", "kernel_with_bias"}
    assert set(row["ratios"]) == {
        "trusted_vs_checked",
        "checked_vs_kernel_with_bias",
        "trusted_vs_kernel_with_bias",
    }
