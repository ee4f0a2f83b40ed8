r"""Command line: regenerate the embedded host checkpoint from a seed on CPU.

Example (the shipped checkpoint; MODEL_CARD.md records the exact run)::

    python -m hosttraining.regression.pretrain --seed 0 --steps 7500 --minutes 110 \\
        --threads 2 --out retrofit/models/embedded/tabpfn_v3_embedded_regressor.safetensors

``--set-inference-config-only`` rewrites the stored inference config of an
existing checkpoint (weights and training record unchanged).

Progress lines go to stderr every ``--log-every`` steps; a checkpoint (and a
resumable ``<out>.state.pt``) is written atomically every
``--checkpoint-minutes``, so an interrupted run continues where it stopped when
started again with the same arguments.

The speedrun's recipe (issue 37; the classifier's is
``hosttraining.classification.train``, with the same flags from
:mod:`hosttraining.common.flags`): ``--prior tabicl`` trains on TabICL's
graph-SCM regression prior, ``--prior mix`` on it with probability
``--tabicl-share`` and on the project's prior (version 2) otherwise, both in
the speedrun's batch shape (:mod:`hosttraining.priors.mixed`: ``--tables``
tables of ``--min-rows`` to ``--max-rows`` rows, ``--test-rows`` query rows,
up to ``--max-features`` features); ``--optimizer muon`` (Muon on the hidden
matrices plus AdamW), ``--grad-clip``, ``--lawa-every/--lawa-keep``
(``*.lawa.safetensors``), ``--time-aware-schedule``, ``--nlayers/--embed-dim``
for a sweep, and ``--eval-tasks N``: the relative RMSE of the raw and the
averaged weights on ``N`` held-out tasks of each prior at every checkpoint
(``*.evals.jsonl``; ridge, random forest and HGB on the same tasks in
``*.heldout_baselines.json``, :mod:`hosttraining.regression.heldout`), drawn
by ``python -m hosttraining.regression.curve``. A one-thread run of the recipe,
resumable by the same line::

    nice -n 10 env OMP_NUM_THREADS=1 python -m hosttraining.regression.pretrain \\
        --out hostchain/regressor_tabicl/tabpfn_v3_embedded_regressor.safetensors \\
        --prior tabicl --nlayers 8 --optimizer muon --lr 1e-3 --grad-clip 2 \\
        --lawa-every 150 --lawa-keep 3 --steps 100000 --minutes 105 \\
        --time-aware-schedule --warmup-steps 100 --threads 1 --seed 0 \\
        --checkpoint-minutes 10 --eval-tasks 20 --log-every 10

``--prior project`` (the default) is the shipped host's recipe, unchanged: the
project's prior in its own batching (``--max-rows``, ``--p-large``), AdamW.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hosttraining.common.flags import (
    add_recipe_arguments,
    add_table_arguments,
    command_line,
    sized_model_config,
    table_shape,
    train_config,
)
from hosttraining.common.loop import (
    DEFAULT_MODEL_CONFIG,
    TINY_MODEL_CONFIG,
    RegressionObjective,
    add_device_arguments,
    checked_device,
    inference_config_dict,
    rewrite_inference_config,
    train,
)
from hosttraining.priors.batch_stream import Sampler
from hosttraining.priors.mixed import TablePriorConfig, sample_table_batch
from hosttraining.priors.regression import PriorConfig
from hosttraining.priors.tabicl import TabICLPriorConfig
from hosttraining.regression.heldout import RegressionHeldoutCurve
from retrofit.command_line import OneLineArgumentParser, run_main
from retrofit.errors import CommandError

DEFAULT_STEPS = 7500
"""Planned steps of the shipped checkpoint (the cosine schedule spans them)."""

DEFAULT_PREPROCESSING = "squashing_scaler_default"
DEFAULT_APPEND_ORIGINAL = True
DEFAULT_N_ESTIMATORS = 4
DEFAULT_SOFTMAX_TEMPERATURE = 0.9
"""Inference settings of the shipped checkpoint, chosen on the development suite
(``python -m hosttraining.regression.quality --suite dev``; see MODEL_CARD.md)."""

PRIORS = ("project", "tabicl", "mix")
"""``--prior``: the project's prior in its own batching, TabICL's, or the two mixed."""
_MODULE = "hosttraining.regression.pretrain"


@dataclasses.dataclass
class TableRegressionObjective(RegressionObjective):
    """The regressor's objective on speedrun-shaped batches (:mod:`hosttraining.priors.mixed`).

    Attributes:
        prior: Where the batches come from and their shape.
        command: The command line that runs this training (for the card).
    """

    prior: TablePriorConfig = dataclasses.field(default_factory=TablePriorConfig)  # type: ignore[assignment]
    command: str | None = None

    def sampler(self) -> Sampler:
        """:func:`hosttraining.priors.mixed.sample_table_batch` over this prior."""
        return functools.partial(sample_table_batch, cfg=self.prior)

    def describe(self) -> dict[str, Any]:
        """The task, the prior's sources and shape, and the command."""
        return {
            "task": "regression",
            "prior_source": "tabicl" if self.prior.tabicl_share == 1.0 else "mix",
            "prior": dataclasses.asdict(self.prior),
            "command": self.command,
        }


def _parser() -> argparse.ArgumentParser:
    p = OneLineArgumentParser(
        prog="python -m hosttraining.regression.pretrain",
        description="Pretrain the embedded TabPFN-v3 regressor on the synthetic prior.",
    )
    p.add_argument(
        "--out",
        type=Path,
        required=True,
        help="checkpoint path (.safetensors, name must contain 'v3')",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of init and prior")
    p.add_argument(
        "--steps",
        type=int,
        default=DEFAULT_STEPS,
        help="planned optimiser steps (cosine schedule length)",
    )
    p.add_argument(
        "--minutes",
        type=float,
        default=110.0,
        help="wall-clock cap; stops early (schedule not finished)",
    )
    p.add_argument(
        "--threads",
        type=int,
        default=2,
        help="torch threads (a run is bit-reproducible at the same count)",
    )
    p.add_argument("--lr", type=float, default=1e-3, help="peak learning rate")
    p.add_argument("--warmup-steps", type=int, default=300)
    add_recipe_arguments(p)
    p.add_argument(
        "--model",
        choices=["default", "tiny"],
        default="default",
        help="architecture preset ('tiny' is for tests)",
    )
    p.add_argument(
        "--prior",
        choices=PRIORS,
        default="project",
        help="the project's prior in its own batching, TabICL's graph-SCM regression prior, "
        "or a mix of the two in TabICL's batch shape (needs the training extra)",
    )
    p.add_argument(
        "--tabicl-share",
        type=float,
        default=0.5,
        help="mix: share of steps whose batch is TabICL's (the rest the project's, version 2)",
    )
    add_table_arguments(
        p,
        which="tabicl/mix",
        max_rows=None,
        max_rows_help=f"largest table the prior draws (default: project {PriorConfig.max_rows}, "
        f"tabicl/mix {TabICLPriorConfig.max_rows})",
    )
    p.add_argument(
        "--p-large",
        type=float,
        default=PriorConfig.p_large,
        help="share of batches drawn from the large tables",
    )
    p.add_argument(
        "--n-estimators",
        type=int,
        default=DEFAULT_N_ESTIMATORS,
        help="N_ESTIMATORS stored in the inference config",
    )
    p.add_argument(
        "--preprocessing",
        default=DEFAULT_PREPROCESSING,
        help="PreprocessorConfig name stored in the inference config",
    )
    p.add_argument(
        "--append-original",
        action=argparse.BooleanOptionalAction,
        default=DEFAULT_APPEND_ORIGINAL,
        help="also give the model the untransformed features (inference config)",
    )
    p.add_argument(
        "--softmax-temperature",
        type=float,
        default=DEFAULT_SOFTMAX_TEMPERATURE,
        help="SOFTMAX_TEMPERATURE stored in the inference config",
    )
    p.add_argument(
        "--set-inference-config-only",
        action="store_true",
        help="do not train: rewrite the inference config of the existing --out checkpoint "
        "from the flags above, keeping its weights and training record",
    )
    p.add_argument("--log-every", type=int, default=50)
    p.add_argument("--checkpoint-minutes", type=float, default=5.0)
    p.add_argument("--no-resume", action="store_true", help="ignore an existing <out>.state.pt")
    add_device_arguments(p)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command; returns the exit status (2 and one line on stderr on an error)."""
    return run_main(_parser, lambda args: _run(args, argv), argv)


def _run(args: argparse.Namespace, argv: Sequence[str] | None = None) -> int:
    if "v3" not in args.out.name or args.out.suffix != ".safetensors":
        raise CommandError("--out must be a .safetensors file whose name contains 'v3'")
    inference = inference_config_dict(
        n_estimators=args.n_estimators,
        preprocessing=args.preprocessing,
        append_original=args.append_original,
        softmax_temperature=args.softmax_temperature,
    )
    if args.set_inference_config_only:
        digest = rewrite_inference_config(args.out, inference)
        print(json.dumps({"rewrote": str(args.out), "sha256": digest}))
        return 0
    device, workers = checked_device(args)
    cfg = train_config(args, device, workers)
    model_config = sized_model_config(
        DEFAULT_MODEL_CONFIG if args.model == "default" else TINY_MODEL_CONFIG, args
    )
    default_rows = PriorConfig.max_rows if args.prior == "project" else TabICLPriorConfig.max_rows
    shape = table_shape(args, default_rows if args.max_rows is None else args.max_rows)
    curve = None
    if args.eval_tasks > 0:
        curve = RegressionHeldoutCurve.for_shape(shape, args.eval_tasks)
        curve.write_baselines(args.out, args.eval_tasks)
    summary = train(
        args.out,
        cfg,
        model_config=model_config,
        prior=PriorConfig(max_rows=shape.max_rows, p_large=args.p_large),
        inference_config=inference,
        log=lambda line: print(line, file=sys.stderr, flush=True),
        resume=not args.no_resume,
        objective=_objective(args, shape, argv),
        evaluate=curve,
    )
    print(json.dumps(summary))
    return 0


def _objective(
    args: argparse.Namespace, shape: TabICLPriorConfig, argv: Sequence[str] | None
) -> TableRegressionObjective | None:
    """The recipe's objective, or None for the project's prior in its own batching."""
    if args.prior == "project":
        return None
    if not 0.0 <= args.tabicl_share <= 1.0:
        raise CommandError(f"--tabicl-share must be in [0, 1], got {args.tabicl_share}")
    share = 1.0 if args.prior == "tabicl" else args.tabicl_share
    return TableRegressionObjective(
        prior=TablePriorConfig(shape=shape, tabicl_share=share),
        command=command_line(_MODULE, argv),
    )


if __name__ == "__main__":
    raise SystemExit(main())
