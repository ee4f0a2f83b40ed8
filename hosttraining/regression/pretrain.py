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
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from hosttraining.common.loop import (
    DEFAULT_MODEL_CONFIG,
    TINY_MODEL_CONFIG,
    TrainConfig,
    add_device_arguments,
    checked_device,
    inference_config_dict,
    rewrite_inference_config,
    train,
)
from hosttraining.priors.regression import PriorConfig
from retrofit.cli.console import OneLineArgumentParser, run_main
from retrofit.errors import CommandError

DEFAULT_STEPS = 7500
"""Planned steps of the shipped checkpoint (the cosine schedule spans them)."""

DEFAULT_PREPROCESSING = "squashing_scaler_default"
DEFAULT_APPEND_ORIGINAL = True
DEFAULT_N_ESTIMATORS = 4
DEFAULT_SOFTMAX_TEMPERATURE = 0.9
"""Inference settings of the shipped checkpoint, chosen on the development suite
(``python -m hosttraining.regression.quality --suite dev``; see MODEL_CARD.md)."""


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
    p.add_argument(
        "--model",
        choices=["default", "tiny"],
        default="default",
        help="architecture preset ('tiny' is for tests)",
    )
    p.add_argument(
        "--max-rows", type=int, default=PriorConfig.max_rows, help="largest table the prior draws"
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
    return run_main(_parser, _run, argv)


def _run(args: argparse.Namespace) -> int:
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
    cfg = TrainConfig(
        steps=args.steps,
        max_minutes=args.minutes,
        lr=args.lr,
        warmup_steps=min(args.warmup_steps, max(1, args.steps // 10)),
        seed=args.seed,
        threads=args.threads,
        device=device,
        workers=workers,
        log_every=args.log_every,
        checkpoint_every_s=args.checkpoint_minutes * 60,
    )
    model_config = DEFAULT_MODEL_CONFIG if args.model == "default" else TINY_MODEL_CONFIG
    summary = train(
        args.out,
        cfg,
        model_config=model_config,
        prior=PriorConfig(max_rows=args.max_rows, p_large=args.p_large),
        inference_config=inference,
        log=lambda line: print(line, file=sys.stderr, flush=True),
        resume=not args.no_resume,
    )
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
