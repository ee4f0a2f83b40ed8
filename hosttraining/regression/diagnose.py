"""Why a chain does not learn: the prior diagnosis and short training arms.

Four commands, each printing JSON:

``python -m hosttraining.regression.diagnose`` (``prior``) draws noise-free function tasks (2
features, 500 rows) from prior versions 1 and 2 and, on the tasks whose rows
repeat the same feature values often (designed experiments, coded, rounded or
counted inputs), measures the share of the target's variance *within* rows of
identical features. Such variance cannot be explained by any model of the
table. In version 1 the lossy maps come after the target, so that share is
large; in version 2 most lossy features precede the target and it is near
zero. It also reports the share of nearly noise-free tasks and of
200-4,000-row tables.

``python -m hosttraining.regression.diagnose arms --dir hostchain/diagnosis --steps 600``
trains the same model from the same seed for the same number of steps under
recipes that differ in one thing each (optimiser, prior version, table sizes),
one thread per arm, and records each arm's smoothed-loss curve and its final
in-prior metric (``hosttraining.common.in_prior``), plus a learnability check of the
training tasks themselves (random forest on the first task of training
batches). A flat loss under every optimiser points at the prior or the batch;
a flat loss under one optimiser only points at that optimiser.

``python -m hosttraining.regression.diagnose weights --state S --checkpoint C`` compares the
size of the hidden matrices in a chain state with their initialisation and
with a shipped checkpoint.

``python -m hosttraining.regression.diagnose report --arms-dir hostchain/diagnosis --chain
hostchain --failed hostchain/link1-failed --out hostchain/diagnosis.json`` puts
it all together: every run's smoothed-loss curve and mean loss per 500 steps,
step-by-step loss differences between runs that draw the same batches, the
learnability check and the weight growth.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file
from sklearn.ensemble import RandomForestRegressor

from hosttraining.common.loop import build_model
from hosttraining.priors import regression as p
from hosttraining.regression.chain import (
    EVALS_FILE,
    LOG_FILE,
    STATE_FILE,
    TABLES,
    ChainConfig,
    muon_parameter_names,
    run_link,
)
from retrofit.command_line import OneLineArgumentParser, run_main
from retrofit.errors import CommandError

__all__ = [
    "arm_configs",
    "learnability",
    "main",
    "paired_difference",
    "report",
    "unexplainable_share",
    "weight_growth",
]


def unexplainable_share(x_ND: np.ndarray, y_N: np.ndarray, min_groups: int = 20) -> float | None:
    """Share of ``var(y)`` within groups of identical rows of ``x``.

    Returns:
        The share, or ``None`` when fewer than ``min_groups`` rows values repeat.
    """
    _, inverse = np.unique(x_ND, axis=0, return_inverse=True)
    inverse = inverse.ravel()
    sizes = np.bincount(inverse)
    if (sizes > 1).sum() < min_groups:
        return None
    means = np.bincount(inverse, weights=y_N) / sizes
    return float(np.mean((y_N - means[inverse]) ** 2) / np.var(y_N))


def _shares(version: int, tasks: int) -> list[float]:
    out = []
    for seed in range(tasks):
        rng = np.random.default_rng(seed)
        if version == 1:
            z_ND = p._copula_inputs(rng, 500, 2)
            y_N = p._random_function(rng, z_ND)
            x_ND = np.stack([p.real_marginal(rng, z_ND[:, j]) for j in range(2)], axis=1)
        else:
            x_ND, seen_ND, _, _ = p._features_v2(rng, 500, 2)
            y_N = p._random_function_v2(rng, seen_ND)
        share = unexplainable_share(x_ND, p._standardize(y_N))
        if share is not None:
            out.append(share)
    return out


def prior_diagnosis(tasks: int = 400) -> dict[str, object]:
    """The prior diagnosis (see the module docstring)."""
    result: dict[str, object] = {"tasks_drawn": tasks}
    for version in (1, 2):
        shares = _shares(version, tasks)
        result[f"v{version}"] = {
            "tasks_with_repeated_rows": len(shares),
            "unexplainable_share_mean": round(float(np.mean(shares)), 4),
            "unexplainable_share_median": round(float(np.median(shares)), 4),
        }
    rows = [
        p.sample_batch(np.random.default_rng([0, s]), p.PRIOR_V2).x_RBC.shape[0] for s in range(200)
    ]
    result["v2_share_rows_200_4000"] = round(float(np.mean([200 <= r <= 4000 for r in rows])), 3)
    return result


# --------------------------------------------------------------------------- arms


def arm_configs() -> dict[str, Any]:
    """The diagnosis arms, each one change away from another.

    ``adamw_cosine_*`` is the shipped host's recipe (AdamW 1e-3, 300 warm-up
    steps, cosine over 7,500 steps, no averaging); ``*_wsd_*`` the WSD
    schedule (WSD, EMA 0.998). The first steps of a 7,500-step cosine and of a
    WSD plan have nearly the same learning rate, so a short arm compares
    optimisers and priors, not schedules.
    """
    old = {"optimizer": "adamw", "schedule": "cosine", "total_steps": 7500, "warmup_steps": 300}
    old |= {"ema_decay": 0.0}
    return {
        "adamw_cosine_v2": ChainConfig(**old),
        "adamw_cosine_v2_v1tables": ChainConfig(**old, **TABLES["v1"]),
        "adamw_cosine_v1": ChainConfig(**old, prior_version=1, **TABLES["v1"]),
        "adamw_wsd_v2": ChainConfig(total_steps=22000, optimizer="adamw"),
        "muon_wsd_v2": ChainConfig(total_steps=22000, optimizer="muon"),
        "muon_wsd_v2_v1tables": ChainConfig(total_steps=22000, optimizer="muon", **TABLES["v1"]),
    }


def learnability(version: int, batches: int = 24) -> dict[str, float]:
    """Random forest on the first task of training batches: is the target learnable?

    Returns:
        The mean and median relative RMSE (RMSE over the train-mean
        predictor's) of RF on the query rows of training-distribution tasks.
    """
    cfg = p.PRIOR_V2 if version == 2 else p.PriorConfig()
    rel = []
    for i in range(batches):
        batch = p.sample_batch(np.random.default_rng([7, version, i]), cfg)
        n_tr = batch.num_train
        x_ND = batch.x_RBC[:, 0].double().numpy()
        y_tr, y_te = batch.y_train_NB[:, 0].double().numpy(), batch.y_test_TB[:, 0].double().numpy()
        rf = RandomForestRegressor(n_estimators=50, random_state=i, n_jobs=1)
        pred = rf.fit(x_ND[:n_tr], y_tr).predict(x_ND[n_tr:])
        base = np.sqrt(np.mean((y_te - y_tr.mean()) ** 2))
        rel.append(float(np.sqrt(np.mean((pred - y_te) ** 2)) / max(base, 1e-12)))
    return {
        "batches": batches,
        "rf_rel_rmse_mean": round(float(np.mean(rel)), 4),
        "rf_rel_rmse_median": round(float(np.median(rel)), 4),
    }


def weight_growth(state_path: Path, checkpoint: Path | None = None) -> dict[str, Any]:
    """RMS of Muon's share of the weights: at initialisation, in a chain state, shipped.

    Muon's update has a fixed size per step whatever the gradient's, so with
    noisy gradients and a large learning rate the hidden matrices random-walk
    away from their scale; AdamW at 1e-3 (the shipped host's 7,500 steps)
    barely moves them. Large growth of the softmax-scaling MLPs (they set the
    attention temperature) saturates attention.

    Args:
        state_path: A chain ``state.pt`` (its raw weights).
        checkpoint: A tabpfn safetensors checkpoint to compare with.

    Returns:
        Per group of matrices (attention projections, MLPs, softmax-scaling
        MLPs): mean RMS at init, in the state, and in the checkpoint.
    """
    state = torch.load(state_path, weights_only=True)
    init = build_model(state["model_config"], seed=0)
    names = muon_parameter_names(init)
    shipped = load_file(checkpoint) if checkpoint is not None else {}
    init_sd = init.state_dict()

    def group(name: str) -> str:
        if "softmax_scaling" in name:
            return "softmax_scaling_mlps"
        return "attention_projections" if "projection" in name else "mlps"

    def rms(t: torch.Tensor) -> float:
        return float(t.float().pow(2).mean().sqrt())

    out: dict[str, Any] = {"state_step": state["step"], "optimizer": state["config"]["optimizer"]}
    for g in ("attention_projections", "mlps", "softmax_scaling_mlps"):
        members = [n for n in names if group(n) == g]
        row = {
            "matrices": len(members),
            "init_rms": round(float(np.mean([rms(init_sd[n]) for n in members])), 4),
            "state_rms": round(float(np.mean([rms(state["model"][n]) for n in members])), 4),
        }
        if shipped:
            row["shipped_rms"] = round(float(np.mean([rms(shipped[n]) for n in members])), 4)
        out[g] = row
    return out


def _windows(log_path: Path, width: int = 500) -> dict[str, Any]:
    """Smoothed loss every 100 steps and mean logged loss per ``width`` steps of a log."""
    records = [json.loads(line) for line in log_path.read_text().splitlines()]
    every_100 = {str(r["step"]): r["loss_ema"] for r in records if r["step"] % 100 == 0}
    means: dict[str, list[float]] = {}
    for rec in records:
        lo = (rec["step"] - 1) // width * width
        means.setdefault(f"{lo + 1}-{lo + width}", []).append(rec["loss"])
    return {
        "last_step": records[-1]["step"] if records else 0,
        "loss_ema_every_100": every_100,
        f"mean_loss_per_{width}_steps": {k: round(float(np.mean(v)), 4) for k, v in means.items()},
    }


def paired_difference(log_a: Path, log_b: Path, width: int = 500) -> dict[str, Any]:
    """Mean of ``loss_a - loss_b`` over the steps both logs hold, per ``width`` steps.

    Two chains with the same seed draw the same batches at the same step, so
    the difference of their losses at a step is free of the batch-to-batch
    spread (which is larger than what separates the recipes early on).
    """
    a = {r["step"]: r["loss"] for r in map(json.loads, log_a.read_text().splitlines())}
    b = {r["step"]: r["loss"] for r in map(json.loads, log_b.read_text().splitlines())}
    diffs: dict[str, list[float]] = {}
    for step in sorted(set(a) & set(b)):
        lo = (step - 1) // width * width
        diffs.setdefault(f"{lo + 1}-{lo + width}", []).append(a[step] - b[step])
    return {
        k: {"mean": round(float(np.mean(v)), 4), "logged_steps": len(v)} for k, v in diffs.items()
    }


_BATCH_FIELDS = ("seed", "prior_version", *TABLES["v2"])
"""The plan's fields that fix which batches a run draws at each step."""


def report(
    arms_dir: Path,
    chain_dir: Path,
    failed_dir: Path,
    checkpoint: Path | None,
    learnability_batches: int = 24,
) -> dict[str, Any]:
    """The whole diagnosis: every run's curve, paired losses, learnability, weight growth.

    Runs are the arms in ``arms_dir`` (a state file there, when one was
    written, gives the plan the arm really ran), the failed chain and the
    running chain. Every two runs that draw the same batches (same seed, prior
    version and tables) are compared step by step (:func:`paired_difference`).
    """
    runs: dict[str, tuple[Path, dict[str, Any]]] = {}
    for name, cfg in arm_configs().items():
        if (arms_dir / name / LOG_FILE).exists():
            runs[name] = (arms_dir / name, dataclasses.asdict(cfg))
    runs["link1_failed"] = (failed_dir, {})
    runs["chain"] = (chain_dir, {})
    rows: dict[str, Any] = {}
    for name, (folder, config) in runs.items():
        if (folder / STATE_FILE).exists():
            # Older states lack newer fields: the defaults are what they ran.
            stored = torch.load(folder / STATE_FILE, weights_only=True)["config"]
            config = dataclasses.asdict(ChainConfig(**stored))
        runs[name] = (folder, config)
        row: dict[str, Any] = {"folder": folder.as_posix(), "config": config}
        row |= _windows(folder / LOG_FILE)
        if (folder / EVALS_FILE).exists():
            row["end"] = [json.loads(line) for line in (folder / EVALS_FILE).open()]
        rows[name] = row
    paired = {}
    names = list(runs)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            key_a = [runs[a][1].get(f) for f in _BATCH_FIELDS]
            if key_a == [runs[b][1].get(f) for f in _BATCH_FIELDS]:
                paired[f"{a} minus {b}"] = paired_difference(
                    runs[a][0] / LOG_FILE, runs[b][0] / LOG_FILE
                )
    growth = {}
    for name in ("link1_failed", "chain"):
        if (runs[name][0] / STATE_FILE).exists():
            growth[name] = weight_growth(runs[name][0] / STATE_FILE, checkpoint)
    return {
        "runs": rows,
        "paired_loss_same_batches": paired,
        "learnability_rf": {f"v{v}": learnability(v, learnability_batches) for v in (1, 2)},
        "weight_growth": growth,
    }


def _run_arms(folder: Path, names: list[str], steps: int, parallel: int) -> dict[str, Any]:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    pending = list(names)
    running: list[subprocess.Popen[bytes]] = []
    while pending or running:
        while pending and len(running) < parallel:
            name = pending.pop(0)
            cmd = [
                sys.executable,
                "-m",
                "hosttraining.regression.diagnose",
                "_arm",
                "--dir",
                str(folder),
            ]
            running.append(subprocess.Popen([*cmd, "--arm", name, "--steps", str(steps)], env=env))
        running[0].wait()
        running = [proc for proc in running if proc.poll() is None]
    results = {}
    for name in names:
        arm_dir = folder / name
        summary = json.loads((arm_dir / "evals.jsonl").read_text().splitlines()[-1])
        summary["config"] = dataclasses.asdict(arm_configs()[name])
        summary |= _windows(arm_dir / LOG_FILE)
        results[name] = summary
    return results


def _parser() -> argparse.ArgumentParser:
    parser = OneLineArgumentParser(
        prog="python -m hosttraining.regression.diagnose",
        description="Diagnose the host chain: the prior, and short training arms.",
    )
    sub = parser.add_subparsers(dest="cmd")
    sub.add_parser("prior", help="lossy-feature diagnosis of prior versions 1 and 2 (default)")
    arms = sub.add_parser("arms", help="short training arms, one change apart")
    growth = sub.add_parser("weights", help="growth of Muon's matrices in a chain state")
    growth.add_argument("--state", type=Path, required=True, help="chain state.pt")
    growth.add_argument("--checkpoint", type=Path, default=None, help="safetensors to compare")
    rep = sub.add_parser("report", help="arms so far, both chains, paired losses, learnability")
    rep.add_argument("--arms-dir", type=Path, required=True, help="folder of the arms")
    rep.add_argument("--chain", type=Path, required=True, help="the running chain's folder")
    rep.add_argument("--failed", type=Path, required=True, help="the failed chain's folder")
    rep.add_argument("--checkpoint", type=Path, default=None, help="shipped safetensors")
    rep.add_argument("--out", type=Path, default=None, help="write the JSON here too")
    arm = sub.add_parser("_arm", help=argparse.SUPPRESS)
    for sp in (arms, arm):
        sp.add_argument("--dir", type=Path, required=True, help="folder of the arms' states")
        sp.add_argument("--steps", type=int, default=600, help="optimiser steps per arm")
    arms.add_argument("--arms", default=",".join(arm_configs()), help="comma-separated arm names")
    arms.add_argument("--parallel", type=int, default=2, help="arms run at once (one thread each)")
    arms.add_argument("--out", type=Path, default=None, help="write the JSON here too")
    arm.add_argument("--arm", required=True)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command; prints one JSON object."""
    return run_main(_parser, lambda args: _run(args, argv), argv)


def _run(args: argparse.Namespace, argv: Sequence[str] | None) -> int:
    if args.cmd == "_arm":
        summary = run_link(
            args.dir / args.arm,
            minutes=1e9,
            cfg=arm_configs()[args.arm],
            max_steps=args.steps,
            checkpoint_minutes=1e9,
            log=lambda line: print(f"[{args.arm}] {line}", file=sys.stderr, flush=True),
        )
        print(json.dumps(summary))
        return 0
    if args.cmd == "report":
        argv_list = list(argv) if argv is not None else sys.argv[1:]
        result = {"command": "python -m hosttraining.regression.diagnose " + " ".join(argv_list)}
        result |= report(args.arms_dir, args.chain, args.failed, args.checkpoint)
        text = json.dumps(result, indent=2)
        if args.out is not None:
            args.out.write_text(text + "\n")
        print(text)
        return 0
    if args.cmd == "weights":
        print(json.dumps(weight_growth(args.state, args.checkpoint)))
        return 0
    if args.cmd == "arms":
        names = [n for n in args.arms.split(",") if n]
        unknown = sorted(set(names) - set(arm_configs()))
        if unknown:
            raise CommandError(f"unknown arms {unknown}; known: {sorted(arm_configs())}")
        argv_list = list(argv) if argv is not None else sys.argv[1:]
        result: dict[str, Any] = {
            "command": "python -m hosttraining.regression.diagnose " + " ".join(argv_list),
            "steps_per_arm": args.steps,
            "arms": _run_arms(args.dir, names, args.steps, args.parallel),
            "learnability": {f"v{v}": learnability(v) for v in (1, 2)},
        }
        text = json.dumps(result, indent=2)
        if args.out is not None:
            args.out.write_text(text + "\n")
        print(text)
        return 0
    print(json.dumps(prior_diagnosis()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
