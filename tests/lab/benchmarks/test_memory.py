"""The memory part of ``bench`` (lab/benchmarks/memory.py): how it starts its measuring child."""

from __future__ import annotations

import os
from pathlib import Path

from lab.benchmarks import memory
from lab.benchmarks.shapes import Shape
from tests.helpers.memory_children import zero_probe_children


def test_the_memory_child_finds_the_repository_root_first_on_its_path(tmp_path, monkeypatch):
    """The child's first PYTHONPATH entry held ``eval/`` itself, whose modules shadow packages."""
    envs = []
    zero_probe_children(monkeypatch, envs)
    memory.bench_memory(Shape(1, 2, 16, 8, 8, "memory"), runs=1)
    first = Path(envs[0]["PYTHONPATH"].split(os.pathsep)[0])
    assert (first / "lab" / "benchmarks" / "memory_child.py").is_file(), first
