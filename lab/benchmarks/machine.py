"""The state of the machine a benchmark ran on: load, thread variables, busy processes.

Speed is a property of the machine at the time of the run, so every report
records this at its start and end.
"""

from __future__ import annotations

import os
import time
from typing import Any

__all__ = ["busy_processes", "environment"]


def _cpu_ticks() -> dict[int, tuple[int, str]]:
    ticks = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as f:
                stat = f.read()
            fields = stat[stat.rindex(")") + 2 :].split()
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().decode(errors="replace").split("\0")
            # Program names only: a result must not hold this machine's paths.
            cmd = " ".join(os.path.basename(a) if os.sep in a else a for a in argv if a)
            ticks[int(entry)] = (int(fields[11]) + int(fields[12]), cmd[:120])
        except (OSError, ValueError, IndexError):
            continue
    return ticks


def busy_processes(window_s: float = 1.0, min_percent: float = 5.0) -> list[dict[str, Any]]:
    """Other processes using the CPU now (sampled over ``window_s``), busiest first.

    Returns:
        ``[{"pid", "cpu_percent", "command"}]``, this process excluded; empty
        where ``/proc`` is unavailable.
    """
    if not os.path.isdir("/proc"):
        return []
    hz = os.sysconf("SC_CLK_TCK")
    first = _cpu_ticks()
    time.sleep(window_s)
    second = _cpu_ticks()
    me = os.getpid()
    busy = []
    for pid, (t1, cmd) in second.items():
        if pid == me or pid not in first:
            continue
        pct = 100.0 * (t1 - first[pid][0]) / hz / window_s
        if pct >= min_percent:
            busy.append({"pid": pid, "cpu_percent": round(pct, 1), "command": cmd})
    return sorted(busy, key=lambda r: -r["cpu_percent"])


#: The allocator's variables: glibc's thresholds and a preloaded malloc decide
#: how many page faults a forward takes (docs/cpu_chunks.md).
ALLOCATOR_VARIABLES = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "LD_PRELOAD")


def environment() -> dict[str, Any]:
    """Load average, the thread and allocator variables and the busy processes, now."""
    env = {
        k: os.environ.get(k)
        for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OMP_WAIT_POLICY", "KMP_BLOCKTIME")
    }
    allocator = {k: os.environ.get(k) for k in ALLOCATOR_VARIABLES}
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    return {
        "loadavg_1_5_15": load,
        "thread_env": env,
        "allocator_env": allocator,
        "busy_processes": busy_processes(),
    }
