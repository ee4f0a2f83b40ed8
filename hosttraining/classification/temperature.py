"""A classifier host's softmax temperature, fitted on held-out prior tasks.

tabpfn divides a classifier's logits by the stored ``SOFTMAX_TEMPERATURE``
before the softmax. A host underconfident on clean data (a high log loss at a
high accuracy) is corrected by a temperature below 1; the hosts' figures are in
``docs/classifiers.md``. It is fitted here on held-out tasks of the prior the host trained on
(never on an evaluation suite): the scalar ``T`` that minimises the mean over
tasks of the query rows' log loss under ``softmax(logits / T)``, with the host
run as trained (raw features, one forward pass). For TabICL's prior the tasks
come from their own held-out stream
(:data:`hosttraining.priors.tabicl.CALIBRATION_STREAM`), none of them a task of the
run's curve; for the project's prior they are its held-out in-prior tasks.

``python -m hosttraining.classification.temperature --checkpoint X`` prints the fitted temperature
and the log loss before and after; ``--write`` stores it in the checkpoint's
inference config (weights unchanged, see :func:`hosttraining.common.loop.rewrite_inference_config`).
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from scipy.optimize import minimize_scalar
from tabpfn.checkpoint import Checkpoint

from hosttraining.classification.quality import Task, heldout_class_tasks, host_logits
from hosttraining.common.in_prior import HELDOUT_KEY, load_model
from hosttraining.common.loop import rewrite_inference_config
from hosttraining.priors.tabicl import CALIBRATION_STREAM, TabICLPriorConfig, heldout_tabicl_tasks
from retrofit.command_line import OneLineArgumentParser, run_main
from retrofit.errors import CommandError

__all__ = ["calibration_tasks", "fit_temperature", "main", "mean_log_loss"]

_LOG_T_BOUNDS = (math.log(0.05), math.log(20.0))


def mean_log_loss(logits: Sequence[tuple[torch.Tensor, np.ndarray]], temperature: float) -> float:
    """Mean over tasks of the mean query-row log loss under ``softmax(logits / temperature)``."""
    losses = []
    for logits_TK, y_T in logits:
        log_p_TK = torch.log_softmax(logits_TK.double() / temperature, dim=-1)
        losses.append(float(-log_p_TK[torch.arange(len(y_T)), torch.from_numpy(y_T)].mean()))
    return float(np.mean(losses))


def fit_temperature(logits: Sequence[tuple[torch.Tensor, np.ndarray]]) -> float:
    """The temperature in [0.05, 20] that minimises :func:`mean_log_loss` (bounded 1-D search)."""
    if not logits:
        raise ValueError("no task to fit a temperature on")
    found = minimize_scalar(
        lambda log_t: mean_log_loss(logits, math.exp(log_t)),
        bounds=_LOG_T_BOUNDS,
        method="bounded",
        options={"xatol": 1e-4},
    )
    return float(math.exp(found.x))


def calibration_tasks(training: dict[str, Any], count: int) -> list[Task]:
    """Held-out tasks of the prior a checkpoint's training record names (module docstring)."""
    if training.get("prior_source") == "tabicl":
        cfg = TabICLPriorConfig(**training["prior"])
        return heldout_tabicl_tasks(count, cfg, HELDOUT_KEY, stream=CALIBRATION_STREAM)
    return heldout_class_tasks(count)


def main(argv: Sequence[str] | None = None) -> int:
    """Fit (and optionally store) a classifier host's temperature."""
    return run_main(_parser, _run, argv)


def _parser() -> argparse.ArgumentParser:
    p = OneLineArgumentParser(
        prog="python -m hosttraining.classification.temperature",
        description="Fit a classifier host's softmax temperature on held-out prior tasks.",
    )
    p.add_argument("--checkpoint", type=Path, required=True, help="a v3 classifier checkpoint")
    p.add_argument("--count", type=int, default=40, help="held-out tasks to fit on")
    p.add_argument("--write", action="store_true", help="store it as SOFTMAX_TEMPERATURE")
    return p


def _run(args: argparse.Namespace) -> int:
    if not args.checkpoint.is_file():
        raise CommandError(f"--checkpoint {args.checkpoint}: no such file")
    header = Checkpoint(args.checkpoint).load()
    if int(header["config"].get("max_num_classes", -1)) <= 0:
        raise CommandError(f"{args.checkpoint.name} is not a classifier (max_num_classes <= 0)")
    tasks = calibration_tasks(header.get("training", {}), args.count)
    logits = host_logits(load_model(checkpoint=args.checkpoint), tasks)
    temperature = fit_temperature(logits)
    result = {
        "checkpoint": args.checkpoint.name,
        "tasks": len(tasks),
        "temperature": round(temperature, 4),
        "log_loss_at_1": mean_log_loss(logits, 1.0),
        "log_loss_fitted": mean_log_loss(logits, temperature),
    }
    if args.write:
        inference = dict(header["inference_config"])
        inference["SOFTMAX_TEMPERATURE"] = result["temperature"]
        result["sha256"] = rewrite_inference_config(args.checkpoint, inference)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
