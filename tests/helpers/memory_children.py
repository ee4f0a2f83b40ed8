"""A stand-in for the memory benchmark's child processes: each reports a probe that read 0 bytes."""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest

from lab.benchmarks import child


def zero_probe_children(monkeypatch: pytest.MonkeyPatch, seen_env: list[Any] | None = None) -> None:
    """Replace the memory child's subprocess: each child reports a probe that read 0 bytes.

    Args:
        monkeypatch: The test's monkeypatch (the replacement ends with the test).
        seen_env: If given, receives the environment each child was started with.
    """
    real_run = subprocess.run

    def fake_run(cmd, **kwargs):
        if "lab.benchmarks.memory_child" not in " ".join(map(str, cmd)):
            return real_run(cmd, **kwargs)  # git and the rest of provenance
        if seen_env is not None:
            seen_env.append(kwargs["env"])
        args = json.loads(cmd[-1])
        line = {
            "peer": args["peer"],
            "extra_peak_bytes": 0,
            "rss_before_bytes": 1 << 20,
            "output_bytes": 4096,
            "input_bytes": 8192,
            "method": "VmHWM after /proc/self/clear_refs minus VmRSS before",
        }
        return subprocess.CompletedProcess(cmd, 0, stdout=json.dumps(line) + "\n", stderr="")

    monkeypatch.setattr(child.subprocess, "run", fake_run)
