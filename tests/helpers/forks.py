"""Second processes forked from the test's: one killed with SIGKILL, or one holding on, alive.

A test of what a killed or a concurrent process leaves behind needs another
process, not another interpreter: a fork has every module the test has imported,
where a new interpreter importing tabpfn costs 3 to 4 CPU seconds. A forked child
runs the project's file and store code (json, zipfile, numpy) and never torch:
the parent's OpenMP workers are not forked, and a torch op could wait for them.
The child never returns into pytest: it leaves by ``os._exit`` or by its signal.
"""

from __future__ import annotations

import contextlib
import os
import signal
import traceback
import warnings
from collections.abc import Callable, Iterator

__all__ = ["fork", "holding", "killed_by_sigkill", "wait"]


def fork(target: Callable[[], object]) -> int:
    """Runs ``target()`` in a forked child; returns the child's pid.

    The child exits 0 when ``target`` returns and 1 when it raises (the
    traceback printed to stderr), unless ``target`` kills it first.
    """
    with warnings.catch_warnings():  # Python 3.12+ warns that this process has threads
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        target()
        code = 0
    except BaseException:
        traceback.print_exc()
    finally:
        os._exit(code)


def wait(pid: int) -> int:
    """The wait status of the child ``pid``, once it has ended."""
    return os.waitpid(pid, 0)[1]


def killed_by_sigkill(status: int) -> bool:
    """Whether a wait status is that of a process killed by SIGKILL (kill -9)."""
    return os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL


@contextlib.contextmanager
def holding(target: Callable[[], object]) -> Iterator[int]:
    """A forked child that runs ``target()`` (a claim, say), then stays alive until the block ends.

    Yields the child's pid once ``target`` has returned in it; at the end of the
    block the child is killed with SIGKILL and waited for, so what it held is
    left as a killed process leaves it. The child also ends if the test process
    dies first (its pipe closes).
    """
    ready_read, ready_write = os.pipe()
    release_read, release_write = os.pipe()

    def hold() -> None:
        os.close(ready_read)
        os.close(release_write)
        target()
        os.write(ready_write, b"held")
        os.read(release_read, 1)  # blocks until killed, or the test process is gone

    pid = fork(hold)
    os.close(ready_write)
    os.close(release_read)
    try:
        assert os.read(ready_read, 4) == b"held", "the holding child failed (its stderr above)"
        yield pid
    finally:
        os.kill(pid, signal.SIGKILL)
        wait(pid)
        os.close(ready_read)
        os.close(release_write)
