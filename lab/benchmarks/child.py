"""One measurement in a fresh process: run a ``lab.benchmarks`` child module, read its JSON line.

The memory part of ``bench`` (:mod:`lab.benchmarks.memory_child`) and the
fresh-process part of ``bench --weights`` (:mod:`lab.benchmarks.weights_child`)
measure what a call costs in a process that ran nothing else before it: its
peak memory, or its page faults and CPU time, both of which depend on what
earlier calls left in the allocator.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

__all__ = ["run_child"]


def run_child(module: str, arguments: dict[str, Any], *, timeout_s: float, what: str) -> Any:
    """Runs ``python -m module '<json arguments>'`` and returns its last stdout line, parsed.

    Args:
        module: The child's module (it prints one JSON line).
        arguments: Its keyword arguments, as JSON.
        timeout_s: Seconds before the child is killed.
        what: Names the child in an error.

    Raises:
        RuntimeError: The child failed (its last line of stderr).
    """
    env = dict(os.environ)
    # The repository root (it holds lab/), ahead of the caller's path.
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    proc = subprocess.run(
        [sys.executable, "-m", module, json.dumps(arguments)],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env=env,
        check=False,
    )
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"{what} failed: {tail}")
    return json.loads(proc.stdout.strip().splitlines()[-1])
