"""The case loop of the leave-out measurements on a suite (``intervals``, ``oof-gap``).

Each measurement picks cases of a suite, measures each case's split on its
own and records a case that raises with its error, never dropping it
(:func:`measure_cases`); then it writes its report as JSON and Markdown
(:func:`write_report`).
"""

from __future__ import annotations

import os
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from eval.paper.datasets import Case, load_dataset, split, suite_cases
from eval.paper.protocol import SUITE_SOURCE
from retrofit.files import write_json_atomic, write_text_atomic

__all__ = ["CaseSplit", "measure_cases", "selected_cases", "write_report"]

#: ``(X_train, X_test, y_train, y_test)`` of a case, as :func:`eval.paper.datasets.split` gives.
CaseSplit = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def selected_cases(
    suite: str,
    datasets: Sequence[str] | None = None,
    seeds: Sequence[int] | None = None,
    max_cases: int | None = None,
) -> list[Case]:
    """The suite's cases of ``datasets`` under ``seeds`` (None: all), the first ``max_cases``."""
    cases = [
        c
        for c in suite_cases(suite)
        if (datasets is None or c.dataset in datasets) and (seeds is None or c.seed in seeds)
    ]
    return cases[:max_cases]


def measure_cases(
    suite: str,
    cases: Sequence[Case],
    measure: Callable[[Case, CaseSplit], dict[str, Any]],
    *,
    progress_line: Callable[[dict[str, Any]], str],
    progress: Callable[[str], None] | None = None,
) -> list[dict[str, Any]]:
    """One row per case: ``dataset``, ``seed``, ``status`` and what ``measure`` returns.

    Args:
        suite: The suite (its data source).
        cases: The cases, measured in order.
        measure: Measures a case from its split.
        progress_line: What a measured row's progress line says after
            ``"<dataset> seed <seed>: "`` (a failed row's says ``failed (<error>)``).
        progress: Receives one line per case.

    Returns:
        The rows; a case that raised has ``status="failed"``, its ``error``
        and a short ``traceback``.
    """
    rows = []
    for case in cases:
        row: dict[str, Any] = {"dataset": case.dataset, "seed": case.seed, "status": "ok"}
        try:
            row.update(
                measure(case, split(load_dataset(case.dataset, SUITE_SOURCE[suite]), case.seed))
            )
        except Exception as exc:  # recorded, never dropped
            row.update(status="failed", error=f"{type(exc).__name__}: {exc}")
            row["traceback"] = traceback.format_exc(limit=5)
        rows.append(row)
        if progress:
            said = progress_line(row) if row["status"] == "ok" else f"failed ({row['error']})"
            progress(f"{case.dataset} seed {case.seed}: {said}")
    return rows


def write_report(
    out_dir: str | os.PathLike[str],
    name: str,
    report: dict[str, Any],
    render: Callable[[dict[str, Any]], str],
) -> None:
    """Writes ``name.json`` (the report) and ``name.md`` (``render(report)``) to ``out_dir``."""
    out = Path(out_dir)
    write_json_atomic(out / f"{name}.json", report)
    write_text_atomic(out / f"{name}.md", render(report))
