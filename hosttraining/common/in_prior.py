"""Leak-free progress metric of the host chain: held-out prior tasks, never real data.

Two numbers, both computed on draws of the version-2 prior that no training
run ever sees (their seed keys begin with :data:`HELDOUT_KEY`, and training
seeds are kept below it):

* the *in-prior gap*: on a fixed set of low-noise prior tasks, the host's RMSE
  relative to the train-mean predictor, next to random forest's and
  histogram gradient boosting's on the same tasks; the gap is host minus
  baseline (negative: the host is better);
* the *prior NLL*: the bar-distribution loss of the model on held-out batches
  drawn exactly as training batches are.

Checkpoints and settings of the chain are chosen on these and on the
development suite of ``hosttraining.regression.quality``, never on the evaluation datasets.
The host is run as it is trained: features as the prior gives them, straight
into ``TabPFNV3.forward`` (no tabpfn preprocessing), prediction = the mean of
the predicted bar distribution.

``python -m hosttraining.common.in_prior --state hostchain/state.pt`` evaluates a chain
state (its averaged weights); ``--checkpoint x.safetensors`` a tabpfn
checkpoint.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from sklearn.ensemble import HistGradientBoostingRegressor, RandomForestRegressor
from tabpfn.architectures import tabpfn_v3
from tabpfn.architectures.shared.bar_distribution import FullSupportBarDistribution
from tabpfn.checkpoint import Checkpoint

from hosttraining.common.loop import build_model
from hosttraining.common.run_files import load_state
from hosttraining.priors.regression import (
    PRIOR_V2,
    HeldoutTask,
    PriorConfig,
    sample_batch,
    sample_task,
)
from retrofit.command_line import OneLineArgumentParser, run_main

__all__ = [
    "HELDOUT_KEY",
    "HeldoutTask",
    "evaluate",
    "heldout_batches",
    "heldout_tasks",
    "host_predict",
    "main",
    "model_from_state",
    "prior_nll",
    "relative_rmse",
]

HELDOUT_KEY = 2**31 - 26
"""First seed word of every held-out draw; training seeds must be smaller."""


def heldout_tasks(count: int = 40) -> list[HeldoutTask]:
    """The fixed set of low-noise held-out prior tasks.

    Task ``i`` depends only on ``i``: 200-1,500 rows, 2-10 features, 70-85 % context.

    Args:
        count: How many tasks (the first ``count`` of one fixed sequence).

    Returns:
        The tasks.
    """
    tasks = []
    for i in range(count):
        rng = np.random.default_rng([HELDOUT_KEY, 0, i])
        n = int(np.exp(rng.uniform(np.log(200), np.log(1500))))
        d = int(rng.integers(2, 11))
        num_train = round(n * rng.uniform(0.7, 0.85))
        x_ND, y_N = sample_task(rng, n, d, num_train, version=2, low_noise=True)
        # The model sees float32 features; the baselines get the same values.
        x_ND = np.clip(np.nan_to_num(x_ND.astype(np.float32)), -1e8, 1e8)
        tasks.append(HeldoutTask(x_ND, y_N, num_train))
    return tasks


def heldout_batches(count: int = 8, prior: PriorConfig = PRIOR_V2) -> list[Any]:
    """Held-out batches drawn like training batches (for the prior NLL)."""
    return [sample_batch(np.random.default_rng([HELDOUT_KEY, 1, i]), prior) for i in range(count)]


def relative_rmse(pred_T: np.ndarray, task: HeldoutTask) -> float:
    """RMSE of ``pred_T`` on the task's query rows over the context-mean predictor's RMSE."""
    y_test = task.y_N[task.num_train :]
    # The context mean is 0 after normalisation, so this is RMSE / RMSE(mean).
    base = float(np.sqrt(np.mean((y_test - task.y_N[: task.num_train].mean()) ** 2)))
    return float(np.sqrt(np.mean((pred_T - y_test) ** 2))) / max(base, 1e-12)


@torch.no_grad()
def host_predict(model: tabpfn_v3.TabPFNV3, task: HeldoutTask) -> np.ndarray:
    """The mean of the host's bar distribution on the task's query rows (features as given)."""
    criterion = FullSupportBarDistribution(model.regression_borders.clone())
    x_RBC = torch.from_numpy(task.x_ND[:, None, :])
    y_NB = torch.from_numpy(task.y_N[: task.num_train, None].astype(np.float32))
    logits_TBK = model(x_RBC, y_NB)
    return criterion.mean(logits_TBK.float())[:, 0].double().numpy()


def _baselines(task: HeldoutTask, seed: int) -> dict[str, float]:
    x_tr, x_te = task.x_ND[: task.num_train], task.x_ND[task.num_train :]
    y_tr = task.y_N[: task.num_train]
    rf = RandomForestRegressor(n_estimators=100, random_state=seed, n_jobs=1)
    hgb = HistGradientBoostingRegressor(random_state=seed)
    return {
        "rf": relative_rmse(rf.fit(x_tr, y_tr).predict(x_te), task),
        "hgb": relative_rmse(hgb.fit(x_tr, y_tr).predict(x_te), task),
    }


_BASELINE_CACHE: dict[int, dict[str, float]] = {}


def prior_nll(model: tabpfn_v3.TabPFNV3, batches: Sequence[Any]) -> float:
    """Mean bar-distribution loss of ``model`` on the query rows of ``batches``."""
    criterion = FullSupportBarDistribution(model.regression_borders.clone())
    losses = []
    with torch.no_grad():
        for batch in batches:
            logits_TBK = model(batch.x_RBC, batch.y_train_NB)
            losses.append(float(criterion(logits_TBK, batch.y_test_TB).mean()))
    return float(np.mean(losses))


def evaluate(
    model: tabpfn_v3.TabPFNV3, *, num_tasks: int = 40, num_batches: int = 8
) -> dict[str, Any]:
    """The in-prior gap and the prior NLL of a model.

    Args:
        model: A ``TabPFNV3`` regressor (put in eval mode here, restored after).
        num_tasks: Held-out low-noise tasks (:func:`heldout_tasks`).
        num_batches: Held-out batches for the NLL (:func:`heldout_batches`).

    Returns:
        Mean relative RMSE of host, rf and hgb over the tasks, the gaps
        ``host - rf`` and ``host - hgb``, the share of tasks where the host
        beats rf, and the prior NLL.
    """
    was_training = model.training
    model.eval()
    try:
        tasks = heldout_tasks(num_tasks)
        host, rf, hgb = [], [], []
        for i, task in enumerate(tasks):
            host.append(relative_rmse(host_predict(model, task), task))
            if i not in _BASELINE_CACHE:  # baselines do not depend on the host
                _BASELINE_CACHE[i] = _baselines(task, seed=i)
            rf.append(_BASELINE_CACHE[i]["rf"])
            hgb.append(_BASELINE_CACHE[i]["hgb"])
        nll = prior_nll(model, heldout_batches(num_batches))
    finally:
        model.train(was_training)
    host_a, rf_a, hgb_a = np.array(host), np.array(rf), np.array(hgb)
    return {
        "num_tasks": num_tasks,
        "host": round(float(host_a.mean()), 5),
        "rf": round(float(rf_a.mean()), 5),
        "hgb": round(float(hgb_a.mean()), 5),
        "gap_rf": round(float((host_a - rf_a).mean()), 5),
        "gap_hgb": round(float((host_a - hgb_a).mean()), 5),
        "host_beats_rf_share": round(float((host_a < rf_a).mean()), 4),
        "num_batches": num_batches,
        "prior_nll": round(nll, 5),
    }


def model_from_state(path: str | Path, *, averaged: bool = True) -> tabpfn_v3.TabPFNV3:
    """The chain's model with its averaged (or raw) weights, in eval mode."""
    state = load_state(path, keys=("config", "model_config", "model", "ema"))
    model = build_model(state["model_config"], seed=0)
    weights = dict(state["model"])
    if averaged and state["config"].get("ema_decay", 0) > 0:
        # Parameters from the average, buffers from the raw model: a state
        # whose average also holds buffers is read the same way.
        trained = [name for name, p in model.named_parameters() if p.requires_grad]
        weights.update({name: state["ema"][name] for name in trained})
    model.load_state_dict(weights)
    return model.eval()


def load_model(*, state: Path | None = None, checkpoint: Path | None = None) -> Any:
    """A model from a chain state (its averaged weights) or a safetensors checkpoint."""
    if state is not None:
        return model_from_state(state)
    ckpt = Checkpoint(checkpoint).load()
    parsed, _ = tabpfn_v3.parse_config(dict(ckpt["config"]))
    model = tabpfn_v3.get_architecture(parsed)
    model.load_state_dict(ckpt["state_dict"])
    return model


def _parser() -> argparse.ArgumentParser:
    p = OneLineArgumentParser(
        prog="python -m hosttraining.common.in_prior",
        description="In-prior gap (host vs RF and HGB on held-out low-noise prior tasks) "
        "and prior NLL of a host.",
    )
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--state", type=Path, help="chain state file (its averaged weights)")
    src.add_argument("--checkpoint", type=Path, help="tabpfn safetensors checkpoint")
    p.add_argument("--tasks", type=int, default=40)
    p.add_argument("--batches", type=int, default=8)
    p.add_argument("--threads", type=int, default=1)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command; prints one JSON object."""
    return run_main(_parser, _run, argv)


def _run(args: argparse.Namespace) -> int:
    torch.set_num_threads(args.threads)
    model = load_model(state=args.state, checkpoint=args.checkpoint)
    result = evaluate(model, num_tasks=args.tasks, num_batches=args.batches)
    print(json.dumps(result), file=sys.stdout)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
