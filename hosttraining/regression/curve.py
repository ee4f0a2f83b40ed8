"""A regressor run's held-out curve: relative RMSE against tables seen, with its baselines.

A run of ``hosttraining.regression.pretrain --eval-tasks N`` scores its raw and
averaged weights at every checkpoint on fixed held-out tasks of the project's
prior and of TabICL's (``<out>.evals.jsonl``) and ridge, random forest and HGB
on the same tasks once (``<out>.heldout_baselines.json``; see
:mod:`hosttraining.regression.heldout`). This command reads both and draws one
panel per suite: the host's relative RMSE (RMSE over the context-mean
predictor's; 1 is predicting the mean) against tables seen, the baselines as
horizontal lines, the same picture as ``hosttraining.classification.curve``;
the y axis ends a little above the host's worst point (at least at 1.2), and a
baseline beyond it is named in the legend with its value.

``python -m hosttraining.regression.curve --checkpoint X --png curve.png`` also prints
the series it drew as JSON; ``--versus Y`` draws the runs X and Y (each by its
averaged weights, named by its folder) against each other on the tasks they share.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hosttraining.common import heldout
from hosttraining.regression.heldout import METRIC
from retrofit.command_line import run_main

__all__ = ["curve_series", "main", "plot_curve"]


def curve_series(checkpoint: Path) -> dict[str, Any]:
    """The curve of a run: per suite and weights, ``tasks_seen`` and ``rel_rmse`` lists.

    Returns:
        ``{"suites": {suite: {"raw": {...}, "lawa": {...}}}, "baselines": {...}}``
        with the baselines' relative RMSE per suite
        (:func:`hosttraining.common.heldout.curve_series`).

    Raises:
        CommandError: If the run wrote no curve (it ran without ``--eval-tasks``).
    """
    return heldout.curve_series(checkpoint, METRIC)


def plot_curve(series: dict[str, Any], png: Path, title: str) -> None:
    """One panel per suite: the host's relative RMSE against tables seen, baselines as lines."""
    top = max(
        [v for s in series["suites"].values() for w in s.values() for v in w[METRIC]] or [1.0]
    )
    heldout.plot_curve(
        series,
        png,
        title,
        metric=METRIC,
        ylabel="held-out relative RMSE",
        ymax=max(1.2, top * 1.05),
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Draw a regressor run's held-out curve (see the module docstring)."""
    return run_main(_parser, _run, argv)


def _parser() -> argparse.ArgumentParser:
    return heldout.curve_parser(
        prog="python -m hosttraining.regression.curve",
        description="A regressor run's held-out relative RMSE against tables seen.",
    )


def _run(args: argparse.Namespace) -> int:
    return heldout.run_curve_command(args, METRIC, plot_curve)


if __name__ == "__main__":
    raise SystemExit(main())
