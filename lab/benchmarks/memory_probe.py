"""Reading the peak resident memory a call adds, from Linux's ``/proc/self``.

The peak (``VmHWM``) is reset to the current resident size (``VmRSS``) by
writing ``5`` to ``/proc/self/clear_refs`` where Linux allows it; the growth
of the peak over the size before the call is what the call added. A probe
that reads no growth read nothing (the allocator reused freed pages, or the
counter did not move): it is recorded as unknown, never as 0 bytes.
"""

from __future__ import annotations

__all__ = ["known_growth", "reset_peak_rss", "status_kib"]


def status_kib(field: str) -> int | None:
    """A ``kB`` field of ``/proc/self/status`` (``VmRSS``, ``VmHWM``), None if unreadable."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def reset_peak_rss() -> bool:
    """Resets the peak resident size (``VmHWM``) to the current one; False where not allowed."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
            f.write("5")
    except OSError:
        return False
    return True


def known_growth(n_bytes: int | None) -> int | None:
    """A probe's reading, or None where it read nothing (no growth at all)."""
    return n_bytes if n_bytes is not None and n_bytes > 0 else None
