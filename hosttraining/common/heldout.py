"""A run's held-out curve: its score on fixed held-out prior tasks against tables seen.

The anchor (the modded-nanoTabPFN speedrun) reports quality against synthetic
datasets seen. A training run given a :class:`HeldoutCurve` scores its raw and
its averaged weights on fixed held-out tasks of each prior at every checkpoint
(``<out>.evals.jsonl``, written by :func:`hosttraining.common.loop.train`) and
its baselines on the same tasks once (``<out>.heldout_baselines.json``,
:meth:`HeldoutCurve.write_baselines`, with a fingerprint of each suite's tasks
so that a resumed process that would draw other tasks is refused instead of
scoring them against the first tasks' baselines). :func:`curve_series` reads both back and
:func:`plot_curve` draws one panel per suite, the baselines as horizontal lines;
:func:`compare_series` puts several runs scored on the same tasks in one picture
(a recipe against another, a width against another, at equal tables seen).
Each task says what its curve scores (the classifier: log loss; the regressor:
relative RMSE); this module only knows a metric's name.
"""

from __future__ import annotations

import abc
import argparse
import hashlib
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from hosttraining.common.errors import RunFileError
from hosttraining.common.run_files import read_log
from retrofit.command_line import OneLineArgumentParser
from retrofit.errors import CommandError
from retrofit.files import write_text_atomic

__all__ = [
    "BASELINE_RTOL",
    "TASKS_KEY",
    "HeldoutCurve",
    "baselines_path",
    "compare_series",
    "curve_parser",
    "curve_series",
    "evals_path",
    "plot_curve",
    "run_curve_command",
]

#: The baselines file's key for its tasks' fingerprints (suite -> digest).
TASKS_KEY = "tasks"


def evals_path(checkpoint: str | Path) -> Path:
    """Where a run writes its curve (one JSON line per checkpoint and weights)."""
    checkpoint = Path(checkpoint)
    return checkpoint.with_name(checkpoint.name + ".evals.jsonl")


def baselines_path(checkpoint: str | Path) -> Path:
    """Where a run writes its baselines on the curve's tasks."""
    checkpoint = Path(checkpoint)
    return checkpoint.with_name(checkpoint.name + ".heldout_baselines.json")


class HeldoutCurve(abc.ABC):
    """Held-out prior tasks a run scores itself on at every checkpoint (its curve).

    Attributes:
        suites: Name -> fixed held-out tasks (seed keys at
            :data:`hosttraining.common.in_prior.HELDOUT_KEY`, which no training
            seed reaches).
    """

    def __init__(self, suites: dict[str, list[Any]]) -> None:
        self.suites = suites

    def fingerprints(self) -> dict[str, str]:
        """Per suite, a digest of its tasks' values (equal digests: the same tasks)."""
        return {name: _digest(tasks) for name, tasks in self.suites.items()}

    @abc.abstractmethod
    def score(self, model: torch.nn.Module, tasks: Sequence[Any]) -> dict[str, float]:
        """The host's mean scores on ``tasks``; must leave the model as it found it."""

    @abc.abstractmethod
    def baseline(self, tasks: Sequence[Any]) -> dict[str, dict[str, float]]:
        """Each baseline's mean scores on ``tasks``."""

    def __call__(self, model: torch.nn.Module) -> dict[str, Any]:
        """The host's scores per suite."""
        return {name: self.score(model, tasks) for name, tasks in self.suites.items()}

    def baselines(self) -> dict[str, Any]:
        """The baselines' scores per suite."""
        return {name: self.baseline(tasks) for name, tasks in self.suites.items()}

    def write_baselines(self, checkpoint: str | Path, tasks_per_suite: int) -> None:
        """Write :func:`baselines_path` unless it exists (a resumed run keeps the first).

        The file records each suite's :meth:`fingerprints`. A resumed process
        whose tasks differ (another table shape or ``--eval-tasks`` than the
        run's first process drew them with) would put points of other tasks on
        the curve beside the first tasks' baselines, so it is refused. A file
        written before fingerprints were recorded is kept as it is.

        Raises:
            CommandError: If the file holds other tasks' fingerprints.
        """
        path = baselines_path(checkpoint)
        fingerprints = self.fingerprints()
        if path.exists():
            recorded = _read_baselines(path).get(TASKS_KEY, fingerprints)
            changed = sorted(s for s in recorded.keys() | fingerprints.keys()
                             if recorded.get(s) != fingerprints.get(s))  # fmt: skip
            if changed:
                raise CommandError(
                    f"{path.name}: the held-out tasks of {', '.join(changed)} differ from the "
                    "run's first process; resume with its table shape and --eval-tasks, "
                    "or train into a new --out"
                )
            return
        record = {"tasks_per_suite": tasks_per_suite, TASKS_KEY: fingerprints, **self.baselines()}
        write_text_atomic(path, json.dumps(record, indent=2) + "\n")


def _digest(value: Any) -> str:
    """SHA-256 (16 hex digits) of a value made of arrays, numbers, sequences and plain objects."""
    sha = hashlib.sha256()

    def feed(v: Any) -> None:
        if isinstance(v, np.ndarray):
            sha.update(f"array{v.dtype.str}{v.shape}".encode())
            sha.update(np.ascontiguousarray(v).tobytes())
        elif isinstance(v, list | tuple):
            sha.update(f"seq{len(v)}".encode())
            for item in v:
                feed(item)
        elif hasattr(v, "__dict__"):
            for key, item in sorted(vars(v).items()):
                sha.update(key.encode())
                feed(item)
        else:
            sha.update(repr(v).encode())

    feed(value)
    return sha.hexdigest()[:16]


def curve_series(checkpoint: Path, metric: str) -> dict[str, Any]:
    """The curve of a run: per suite and weights, ``tasks_seen`` and ``metric`` lists.

    Args:
        checkpoint: The run's ``--out`` checkpoint.
        metric: The score key the curve follows (``"log_loss"``, ``"rel_rmse"``).

    Returns:
        ``{"suites": {suite: {"raw": {...}, "lawa": {...}}}, "baselines": {...}}``
        with the baselines' ``metric`` per suite.

    The curve is an append-only log, read as the training log is
    (:func:`hosttraining.common.run_files.read_log`): a last line cut by a
    crash mid-write (inside a record or a UTF-8 character) is dropped with a
    :class:`~hosttraining.common.errors.RunFileWarning` naming the file and the
    line, as a resumed run drops it; any other unreadable line is refused.

    Raises:
        CommandError: If the run wrote no curve (it ran without ``--eval-tasks``).
        RunFileError: A line of the curve other than a cut last one is not a
            JSON record, or a record lacks the curve's fields; or the baselines
            file is not JSON (each names the file, and the line).
    """
    evals, base = evals_path(checkpoint), baselines_path(checkpoint)
    if not evals.is_file() or not base.is_file():
        raise CommandError(
            f"{checkpoint.name}: no {evals.name} or {base.name}; "
            "train with --eval-tasks N to record a curve"
        )
    records = read_log(evals)
    baselines = _read_baselines(base)
    suites: dict[str, dict[str, dict[str, list[float]]]] = {}
    for number, record in enumerate(records, start=1):
        try:
            for suite in (k for k in record if k in baselines):
                series = suites.setdefault(suite, {}).setdefault(
                    record["weights"], {"tasks_seen": [], metric: []}
                )
                series["tasks_seen"].append(record["tasks_seen"])
                series[metric].append(record[suite][metric])
        except (KeyError, TypeError) as err:
            raise RunFileError(
                f"{evals} record {number} is not a curve record (no {err}): remove that line"
            ) from None
    return {
        "suites": suites,
        "baselines": {
            suite: {name: scores[metric] for name, scores in baselines[suite].items()}
            for suite in suites
        },
    }


def _read_baselines(path: Path) -> dict[str, Any]:
    """The baselines file, or one line naming it (written atomically: damaged from outside)."""
    try:
        baselines = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise RunFileError(
            f"{path} is not a JSON baselines file ({type(err).__name__}: {err}): restore it, "
            "or remove it and resume the run (which writes it again)"
        ) from None
    if not isinstance(baselines, dict):
        raise RunFileError(f"{path} is not a JSON object of baselines")
    return baselines


def compare_series(checkpoints: Sequence[Path], metric: str) -> dict[str, Any]:
    """Several runs' curves in :func:`curve_series`' shape, one line per run.

    Each run is named by its folder and drawn by its averaged weights (its raw
    ones where it kept no average), so that :func:`plot_curve` draws the runs
    against each other with the baselines they share. A suite is drawn only
    where every run scored the same tasks: the same fingerprints where both
    runs recorded them, else baselines equal to within
    :data:`BASELINE_RTOL` (the same fits on another CPU).

    Args:
        checkpoints: The runs' ``--out`` checkpoints, in different folders.
        metric: The score key the curves follow.

    Returns:
        ``{"suites": {suite: {run: {...}}}, "baselines": {...}, "left_out":
        {suite: why}}``.

    Raises:
        CommandError: If two runs share a folder name, or no suite is left
            that every run scored on the same tasks.
    """
    runs, tasks = {}, {}
    for checkpoint in checkpoints:
        name = checkpoint.parent.name
        if name in runs:
            raise CommandError(f"two runs in folders named {name!r}: a curve names runs by folder")
        runs[name] = curve_series(checkpoint, metric)
        tasks[name] = _read_baselines(baselines_path(checkpoint)).get(TASKS_KEY, {})
    first, reference = next(iter(runs.items()))
    shared, left_out = [], {}
    for suite in reference["suites"]:
        other = next(
            (
                name
                for name, series in runs.items()
                if suite not in series["suites"]
                or not _same_tasks(
                    (tasks[first].get(suite), reference["baselines"][suite]),
                    (tasks[name].get(suite), series["baselines"][suite]),
                )
            ),
            None,
        )
        if other is None:
            shared.append(suite)
        else:
            left_out[suite] = f"{other} scored other tasks than {first}"
    if not shared:
        raise CommandError(
            f"no held-out suite that every run scored on the same tasks ({left_out}): "
            "their curves cannot share an axis"
        )
    return {
        "suites": {
            suite: {
                name: series["suites"][suite].get("lawa", series["suites"][suite].get("raw"))
                for name, series in runs.items()
            }
            for suite in shared
        },
        "baselines": {suite: reference["baselines"][suite] for suite in shared},
        "left_out": left_out,
    }


BASELINE_RTOL = 1e-4
"""Baselines of the same tasks fitted on two CPUs agree to this (relative); other tasks do not."""


def _same_tasks(
    a: tuple[str | None, dict[str, float]], b: tuple[str | None, dict[str, float]]
) -> bool:
    """Whether two runs' ``(fingerprint, baselines)`` of one suite are the same tasks."""
    if a[0] is not None and b[0] is not None:
        return a[0] == b[0]
    return a[1].keys() == b[1].keys() and all(
        abs(a[1][k] - b[1][k]) <= BASELINE_RTOL * abs(a[1][k]) for k in a[1]
    )


def plot_curve(
    series: dict[str, Any],
    png: Path,
    title: str,
    *,
    metric: str,
    ylabel: str,
    ymax: float | None = None,
) -> None:
    """One panel per suite: the host's ``metric`` against tables seen, baselines as lines.

    Args:
        series: :func:`curve_series`' result.
        png: The image to write.
        title: The figure's title.
        metric: The score drawn.
        ylabel: The y axis' label.
        ymax: Top of the y axis (None: matplotlib's choice); a baseline above it
            is named in the legend with its value instead of drawn.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    suites = list(series["suites"])
    fig, axes = plt.subplots(1, len(suites), figsize=(5.2 * len(suites), 3.6), dpi=110)
    for ax, suite in zip([axes] if len(suites) == 1 else axes, suites, strict=True):
        for weights, points in series["suites"][suite].items():
            ax.plot(points["tasks_seen"], points[metric], marker="o", label=f"host ({weights})")
        for i, (name, value) in enumerate(series["baselines"][suite].items()):
            if ymax is not None and value > ymax:
                ax.plot([], [], linestyle="--", color=f"C{i + 2}", label=f"{name} ({value:.3g})")
            else:
                ax.axhline(value, linestyle="--", color=f"C{i + 2}", label=name)
        if ymax is not None:
            ax.set_ylim(0.0, ymax)
        ax.set_xlabel("synthetic tables seen")
        ax.set_ylabel(ylabel)
        ax.set_title(f"{suite} prior's held-out tasks")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(png)
    plt.close(fig)


def curve_parser(prog: str, description: str) -> argparse.ArgumentParser:
    """The flags of a task's curve command: a run, the image, and the runs to set beside it."""
    p = OneLineArgumentParser(prog=prog, description=description)
    p.add_argument("--checkpoint", type=Path, required=True, help="the run's --out checkpoint")
    p.add_argument("--png", type=Path, required=True, help="the image to write")
    p.add_argument(
        "--versus",
        type=Path,
        action="append",
        default=[],
        metavar="CHECKPOINT",
        help="another run scored on the same held-out tasks: each run's averaged weights "
        "in one picture, named by folder (repeatable)",
    )
    return p


def run_curve_command(
    args: argparse.Namespace, metric: str, plot: Callable[[dict[str, Any], Path, str], None]
) -> int:
    """Draw :func:`curve_parser`'s run (or runs, with ``--versus``) and print the series as JSON."""
    if args.versus:
        runs = [args.checkpoint, *args.versus]
        series = compare_series(runs, metric)
        title = " vs ".join(path.parent.name for path in runs)
        for suite, why in series["left_out"].items():
            print(f"{suite} prior's tasks left out: {why}", file=sys.stderr)
    else:
        series = curve_series(args.checkpoint, metric)
        title = args.checkpoint.name
    plot(series, args.png, title)
    print(json.dumps(series))
    return 0
