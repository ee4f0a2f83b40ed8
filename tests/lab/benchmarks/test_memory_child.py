"""The memory part's measuring process (lab/benchmarks/memory_child.py)."""

from __future__ import annotations

from lab.benchmarks import memory_child


def test_a_memory_child_whose_probe_reads_no_growth_records_unknown(monkeypatch):
    """VmHWM equal to VmRSS after the reset: nothing was read, not "adds 0 bytes"."""
    monkeypatch.setattr(memory_child, "status_kib", lambda field: 4096)
    child = memory_child.measure_one_call("sdpa", [1, 2, 16, 8, 8], threads=None, seed=0)
    assert child["extra_peak_bytes"] is None
