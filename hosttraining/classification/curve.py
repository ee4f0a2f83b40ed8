"""A classifier run's held-out curve: log loss against tables seen, with its baselines.

The anchor (the modded-nanoTabPFN speedrun) reports quality against synthetic
datasets seen; a run of ``hosttraining.classification.train --eval-tasks N`` writes the
same kind of record at every checkpoint (``<out>.evals.jsonl``: the raw and the
averaged weights on fixed held-out tasks of each prior) and the baselines on
those tasks once (``<out>.heldout_baselines.json``). This command reads both
and draws one panel per suite: the host's log loss against tables seen, with
class frequencies, logistic regression and random forest as horizontal lines.

``python -m hosttraining.classification.curve --checkpoint X --png curve.png`` also prints
the series it drew as JSON.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from retrofit.cli.console import OneLineArgumentParser, run_main
from retrofit.errors import CommandError

__all__ = ["curve_series", "main", "plot_curve"]


def curve_series(checkpoint: Path) -> dict[str, Any]:
    """The curve of a run: per suite and weights, ``tasks_seen`` and ``log_loss`` lists.

    Returns:
        ``{"suites": {suite: {"raw": {...}, "lawa": {...}}}, "baselines": {...}}``
        with the baselines' log loss per suite.

    Raises:
        CommandError: If the run wrote no curve (it ran without ``--eval-tasks``).
    """
    evals_path = checkpoint.with_name(checkpoint.name + ".evals.jsonl")
    base_path = checkpoint.with_name(checkpoint.name + ".heldout_baselines.json")
    if not evals_path.is_file() or not base_path.is_file():
        raise CommandError(
            f"{checkpoint.name}: no {evals_path.name} or {base_path.name}; "
            "train with --eval-tasks N to record a curve"
        )
    records = [json.loads(line) for line in evals_path.read_text().splitlines() if line.strip()]
    baselines = json.loads(base_path.read_text())
    suites: dict[str, dict[str, dict[str, list[float]]]] = {}
    for record in records:
        for suite in (k for k in record if k in baselines):
            series = suites.setdefault(suite, {}).setdefault(
                record["weights"], {"tasks_seen": [], "log_loss": []}
            )
            series["tasks_seen"].append(record["tasks_seen"])
            series["log_loss"].append(record[suite]["log_loss"])
    return {
        "suites": suites,
        "baselines": {
            suite: {name: scores["log_loss"] for name, scores in baselines[suite].items()}
            for suite in suites
        },
    }


def plot_curve(series: dict[str, Any], png: Path, title: str) -> None:
    """One panel per suite: the host's log loss against tables seen, baselines as lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    suites = list(series["suites"])
    fig, axes = plt.subplots(1, len(suites), figsize=(5.2 * len(suites), 3.6), dpi=110)
    for ax, suite in zip([axes] if len(suites) == 1 else axes, suites, strict=True):
        for weights, points in series["suites"][suite].items():
            ax.plot(points["tasks_seen"], points["log_loss"], marker="o", label=f"host ({weights})")
        for i, (name, value) in enumerate(series["baselines"][suite].items()):
            ax.axhline(value, linestyle="--", color=f"C{i + 2}", label=name)
        ax.set_xlabel("synthetic tables seen")
        ax.set_ylabel("held-out log loss")
        ax.set_title(f"{suite} prior's held-out tasks")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(png)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> int:
    """Draw a classifier run's held-out curve (see the module docstring)."""
    return run_main(_parser, _run, argv)


def _parser() -> argparse.ArgumentParser:
    p = OneLineArgumentParser(
        prog="python -m hosttraining.classification.curve",
        description="A classifier run's held-out log loss against tables seen.",
    )
    p.add_argument("--checkpoint", type=Path, required=True, help="the run's --out checkpoint")
    p.add_argument("--png", type=Path, required=True, help="the image to write")
    return p


def _run(args: argparse.Namespace) -> int:
    series = curve_series(args.checkpoint)
    plot_curve(series, args.png, title=args.checkpoint.name)
    print(json.dumps(series))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
