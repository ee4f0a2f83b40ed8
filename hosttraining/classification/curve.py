"""A classifier run's held-out curve: log loss against tables seen, with its baselines.

The anchor (the modded-nanoTabPFN speedrun) reports quality against synthetic
datasets seen; a run of ``hosttraining.classification.train --eval-tasks N`` writes the
same kind of record at every checkpoint (``<out>.evals.jsonl``: the raw and the
averaged weights on fixed held-out tasks of each prior) and the baselines on
those tasks once (``<out>.heldout_baselines.json``; both by
:mod:`hosttraining.common.heldout`). This command reads both and draws one
panel per suite: the host's log loss against tables seen, with class
frequencies, logistic regression and random forest as horizontal lines.

``python -m hosttraining.classification.curve --checkpoint X --png curve.png`` also prints
the series it drew as JSON; ``--versus Y`` draws the runs X and Y (each by its
averaged weights, named by its folder) against each other on the tasks they share.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hosttraining.common import heldout
from retrofit.command_line import run_main

__all__ = ["METRIC", "curve_series", "main", "plot_curve"]

METRIC = "log_loss"
"""The score the classifier's curve follows."""


def curve_series(checkpoint: Path) -> dict[str, Any]:
    """The curve of a run: per suite and weights, ``tasks_seen`` and ``log_loss`` lists.

    Returns:
        ``{"suites": {suite: {"raw": {...}, "lawa": {...}}}, "baselines": {...}}``
        with the baselines' log loss per suite
        (:func:`hosttraining.common.heldout.curve_series`).

    Raises:
        CommandError: If the run wrote no curve (it ran without ``--eval-tasks``).
    """
    return heldout.curve_series(checkpoint, METRIC)


def plot_curve(series: dict[str, Any], png: Path, title: str) -> None:
    """One panel per suite: the host's log loss against tables seen, baselines as lines."""
    heldout.plot_curve(series, png, title, metric=METRIC, ylabel="held-out log loss")


def main(argv: Sequence[str] | None = None) -> int:
    """Draw a classifier run's held-out curve (see the module docstring)."""
    return run_main(_parser, _run, argv)


def _parser() -> argparse.ArgumentParser:
    return heldout.curve_parser(
        prog="python -m hosttraining.classification.curve",
        description="A classifier run's held-out log loss against tables seen.",
    )


def _run(args: argparse.Namespace) -> int:
    return heldout.run_curve_command(args, METRIC, plot_curve)


if __name__ == "__main__":
    raise SystemExit(main())
