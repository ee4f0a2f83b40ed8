"""OAttention as the patched blocks call it, against its kernel plus bias: what the rows name."""

from __future__ import annotations

from lab.benchmarks.shapes import QUICK_SHAPES
from lab.benchmarks.trusted_attention import bench_trusted_attention


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
