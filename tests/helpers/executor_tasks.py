"""Task functions the live executor tests send to cluster workers.

They live in an importable module (not a test file) so that worker processes
unpickle them by reference; each wraps the runner's real task function.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from eval.paper.record import RunRecord
    from eval.paper.spec import Task


def marked_run_task(marker_dir: str, task: Task) -> RunRecord:
    """``run_task``, after leaving a file naming the case and the process that runs it."""
    from eval.paper.execution import run_task

    Path(marker_dir, f"{task.spec.key}.{os.getpid()}.{uuid.uuid4().hex}").touch()
    return run_task(task)


def exit_on_mode(mode: str, task: Task) -> RunRecord:
    """``run_task``, except that a case of ``mode`` ends its worker process on every try."""
    from eval.paper.execution import run_task

    if task.spec.mode == mode:
        os._exit(13)
    return run_task(task)


def raise_on_mode(mode: str, task: Task) -> RunRecord:
    """``run_task``, except that a case of ``mode`` raises out of the task function."""
    if task.spec.mode == mode:
        raise RuntimeError(f"task function raised on {task.spec.dataset}/{mode}")
    from eval.paper.execution import run_task

    return run_task(task)
