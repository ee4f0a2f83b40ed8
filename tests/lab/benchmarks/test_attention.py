"""The attention part of ``bench``: its inputs and its one-thread pass."""

from __future__ import annotations

import torch

from lab.benchmarks import speed
from lab.benchmarks.attention import attention_inputs
from lab.benchmarks.shapes import QUICK_SHAPES, Shape


def test_attention_inputs_have_sdpa_layout_and_null_tokens():
    shape = Shape(2, 3, 40, 300, 8)
    x = attention_inputs(shape, seed=1)
    assert x["q"].shape == (2, 3, 40, 8) and x["k"].shape == (2, 3, 300, 8)
    assert x["p_q"].shape == (2, 40) and x["p_k"].shape == (2, 300)
    assert float(x["p_k"].min()) == 0.0 and float(x["p_k"].max()) < 1.0


def test_attention_with_two_threads_times_own_work_at_one_thread_too(tmp_path):
    threads = torch.get_num_threads()
    try:
        report = speed.run(tmp_path / "bench", quick=True, threads=2, parts=("attention",))
        assert torch.get_num_threads() == 2  # the one-thread pass restores the setting
    finally:
        torch.set_num_threads(threads)
    one = report["attention"]["one_thread"]
    assert one["threads"] == 1 and len(one["rows"]) == len(QUICK_SHAPES)
    for row in one["rows"]:
        assert set(row["median_ms"]) == {"oattention", "oattention_block", "kernel_with_bias"}
        assert row["ratios"] == {} and row["target"] is None  # no SDPA in this pass
        for key in ("oattention_vs_kernel_with_bias", "block_vs_kernel_with_bias"):
            assert 0 < row[key]["ci_low"] <= row[key]["ratio"] <= row[key]["ci_high"]
    md = (tmp_path / "bench" / "bench.md").read_text()
    assert "### OAttention's own work at one torch thread" in md
    assert "checked entry, 1 thread: medians" in md
