"""``bench``'s fit loop: every peer timed each round, the thread count left as it was."""

from __future__ import annotations

import torch

from lab.benchmarks.fit_loop import FIT_LOOP_TARGETS, bench_fit_loop


def test_the_fit_loop_times_every_peer_each_round_and_leaves_the_thread_count():
    threads = torch.get_num_threads()
    report = bench_fit_loop(n_datasets=2, max_rows=40, rounds=2, warmup=0, n_estimators=1)
    assert torch.get_num_threads() == threads
    assert set(report["seconds"]) == {"tabpfn", "none", "full-o"}
    assert all(len(s) == 2 and min(s) > 0 for s in report["seconds"].values())
    assert set(report["ratios"]) == set(FIT_LOOP_TARGETS) == set(report["met"])
    assert report["ratios"]["none"]["ci_low"] <= report["ratios"]["none"]["ratio"]
