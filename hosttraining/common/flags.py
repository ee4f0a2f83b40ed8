"""The training commands' shared flags: the speedrun recipe, the model's size, the tables' shape.

Both ``hosttraining.regression.pretrain`` and ``hosttraining.classification.train``
train with :func:`hosttraining.common.loop.train`; the flags that set its
recipe (Muon plus AdamW, clip, LAWA, the time-aware cosine, the held-out
curve), the model's width and depth, and the shape of TabICL-style batches
(few tables of one shape a step) are defined here once, with the same
defaults for both, so that a recipe flag means the same in either command.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hosttraining.common.loop import TrainConfig
from hosttraining.common.optim import OPTIMIZERS
from hosttraining.priors.tabicl import TabICLPriorConfig

__all__ = [
    "add_recipe_arguments",
    "add_table_arguments",
    "command_line",
    "sized_model_config",
    "table_shape",
    "train_config",
]


def add_recipe_arguments(p: argparse.ArgumentParser) -> None:
    """The optimiser, clip, averaging, schedule, curve and size flags (:func:`train_config`)."""
    p.add_argument("--optimizer", choices=OPTIMIZERS, default="adamw")
    p.add_argument("--muon-lr", type=float, default=None, help="Muon's peak lr (default: --lr)")
    p.add_argument("--grad-clip", type=float, default=1.0)
    p.add_argument(
        "--lawa-every", type=int, default=0, help="steps between averaged snapshots (0: none)"
    )
    p.add_argument("--lawa-keep", type=int, default=5, help="snapshots in the average")
    p.add_argument(
        "--eval-tasks",
        type=int,
        default=0,
        help="held-out prior tasks per suite scored at every checkpoint (0: none)",
    )
    p.add_argument(
        "--time-aware-schedule",
        action="store_true",
        help="let the wall clock advance the cosine (a run of unknown speed anneals before "
        "--minutes; its weights then depend on the machine's speed)",
    )
    p.add_argument("--embed-dim", type=int, default=None, help="overrides the preset's width")
    p.add_argument("--nlayers", type=int, default=None, help="overrides the preset's ICL depth")


def add_table_arguments(
    p: argparse.ArgumentParser, *, which: str, max_rows: int | None, max_rows_help: str
) -> None:
    """The shape of TabICL-style batches (:func:`table_shape`).

    Args:
        p: The command's parser.
        which: The priors the flags apply to, for the help (``"tabicl"``).
        max_rows: ``--max-rows``' default (None: the command resolves it).
        max_rows_help: ``--max-rows``' help.
    """
    shape = TabICLPriorConfig()
    p.add_argument("--tables", type=int, default=shape.tables, help=f"{which}: tables per step")
    p.add_argument("--min-rows", type=int, default=shape.min_rows, help=f"{which}: fewest rows")
    p.add_argument("--max-rows", type=int, default=max_rows, help=max_rows_help)
    p.add_argument("--test-rows", type=int, default=shape.test_rows, help=f"{which}: query rows")
    p.add_argument(
        "--max-features", type=int, default=shape.max_features, help=f"{which}: most features"
    )


def table_shape(args: argparse.Namespace, max_rows: int) -> TabICLPriorConfig:
    """The batch shape of :func:`add_table_arguments`' flags, ``max_rows`` resolved."""
    return TabICLPriorConfig(
        tables=args.tables,
        min_rows=args.min_rows,
        max_rows=max_rows,
        test_rows=args.test_rows,
        max_features=args.max_features,
    )


def sized_model_config(base: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """A copy of the preset ``base`` with ``--embed-dim`` and ``--nlayers`` applied."""
    model_config = dict(base)
    if args.embed_dim is not None:
        model_config["embed_dim"] = args.embed_dim
    if args.nlayers is not None:
        model_config["nlayers"] = args.nlayers
    return model_config


def train_config(args: argparse.Namespace, device: str, workers: int) -> TrainConfig:
    """The :class:`hosttraining.common.loop.TrainConfig` of a training command's flags.

    The warm-up is cut to a tenth of a short run's steps.
    """
    return TrainConfig(
        steps=args.steps,
        max_minutes=args.minutes,
        lr=args.lr,
        warmup_steps=min(args.warmup_steps, max(1, args.steps // 10)),
        seed=args.seed,
        threads=args.threads,
        device=device,
        workers=workers,
        time_aware_schedule=args.time_aware_schedule,
        log_every=args.log_every,
        checkpoint_every_s=args.checkpoint_minutes * 60,
        optimizer=args.optimizer,
        muon_lr=args.muon_lr,
        grad_clip=args.grad_clip,
        lawa_every=args.lawa_every,
        lawa_keep=args.lawa_keep,
    )


def command_line(module: str, argv: Sequence[str] | None) -> str:
    """A run's command line with the output's file name only (no absolute path).

    Args:
        module: The command's module (``hosttraining.classification.train``).
        argv: The arguments it was given (None: ``sys.argv[1:]``).
    """
    words = list(sys.argv[1:] if argv is None else argv)
    for i, word in enumerate(words[:-1]):
        if word == "--out":
            words[i + 1] = Path(words[i + 1]).name
    return shlex.join(["python", "-m", module, *words])
