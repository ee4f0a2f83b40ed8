r"""The host chain: one long pretraining run split into resumable links.

A chain is planned once (total steps, schedule, optimiser) and then run in up
to three links of about 100 minutes of one-thread CPU time each; every link
continues exactly where the last one stopped. Its whole state lives in one
folder outside the installed package (``hostchain/`` at the repository root):

* ``state.pt``: model, optimisers, averaged weights, step, schedule position,
  every RNG state (torch, Python, the prior's numpy generator), the plan;
  replaced atomically every ``checkpoint_minutes``;
* ``log.jsonl``: one line per ``log_every`` steps (step, loss, lr, wall);
* ``evals.jsonl``: the in-prior metric (``hosttraining.common.in_prior``) of the averaged
  weights at the end of each link.

Optimiser: AdamW (``--optimizer adamw``), or ``torch.optim.Muon`` on the hidden
2-D matrices (attention projections and MLP weights; Muon only accepts 2-D
parameters) with AdamW on the rest (embeddings, decoder, norms, biases, learned
tokens). Muon at lr 0.02 does not learn at the default model size (its weights
random-walk; ``docs/lab/training.md``, found with
``hosttraining.regression.diagnose``), so AdamW is the recipe. Either way: a
warm-up / stable / decay (WSD) schedule over the planned steps of the *whole*
chain (the decay falls in the last link), and an exponential moving average
(EMA) of the weights. The schedule depends on the step alone, so a chain
resumed any number of times ends with the weights of an uninterrupted run on
the same torch build and thread count (tested).

Commands::

    python -m hosttraining.regression.chain start --dir hostchain --total-steps N --minutes 100
    python -m hosttraining.regression.chain resume --dir hostchain --minutes 100
    python -m hosttraining.regression.chain pilot --dir hostchain --minutes 8.5

Shape suffixes: ``R`` rows, ``B`` tasks, ``C`` features, ``N`` context rows,
``T`` query rows, ``K`` buckets.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import random
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tabpfn.architectures.shared.bar_distribution import FullSupportBarDistribution

from hosttraining.common.in_prior import HELDOUT_KEY, evaluate, model_from_state
from hosttraining.common.loop import DEFAULT_MODEL_CONFIG, TINY_MODEL_CONFIG, build_model
from hosttraining.common.optim import build_optimizers, muon_parameter_names
from hosttraining.common.run_files import cut_log_after, load_state
from hosttraining.priors.regression import PRIOR_V2, PriorConfig, sample_batch
from retrofit.command_line import OneLineArgumentParser, run_main
from retrofit.errors import CommandError

__all__ = [
    "TABLES",
    "ChainConfig",
    "lr_factor",
    "main",
    "muon_parameter_names",
    "replan",
    "run_link",
]

STATE_FILE = "state.pt"
LOG_FILE = "log.jsonl"
EVALS_FILE = "evals.jsonl"
STATE_KEYS = (
    "config",
    "model_config",
    "model",
    "optims",
    "ema",
    "step",
    "tasks_seen",
    "wall_s",
    "loss_ema",
    "links",
    "prior_rng",
    "torch_rng",
    "python_rng",
)
"""What a chain's ``state.pt`` holds and a resume reads."""
_RESTART = "start a new chain in another --dir"

_MODELS = {"default": DEFAULT_MODEL_CONFIG, "tiny": TINY_MODEL_CONFIG}

TABLES: dict[str, dict[str, Any]] = {
    "v2": {
        "min_rows": PRIOR_V2.min_rows,
        "small_max_rows": PRIOR_V2.small_max_rows,
        "max_rows": PRIOR_V2.max_rows,
        "p_large": PRIOR_V2.p_large,
        "cells_per_batch": PRIOR_V2.cells_per_batch,
        "max_tasks_per_batch": PRIOR_V2.max_tasks_per_batch,
    },
    "v1": {
        "min_rows": PriorConfig.min_rows,
        "small_max_rows": PriorConfig.small_max_rows,
        "max_rows": PriorConfig.max_rows,
        "p_large": PriorConfig.p_large,
        "cells_per_batch": PriorConfig.cells_per_batch,
        "max_tasks_per_batch": PriorConfig.max_tasks_per_batch,
    },
}
"""Table sizes and batching: ``v2`` is :data:`hosttraining.priors.regression.PRIOR_V2`'s (80 % of
batches of 200-4,000 rows, about 6 tasks a step); ``v1`` the shipped host's
(mostly 24-512 rows, 30 % up to 3,000, about 17 tasks a step), which gives
about 2.4 times the tasks per CPU minute (``docs/lab/training.md``, Diagnosis)."""


@dataclasses.dataclass(frozen=True)
class ChainConfig:
    """The plan of a chain (stored in its state; a resume cannot change it).

    Attributes:
        total_steps: Optimiser steps of the whole chain; the schedule spans them.
        optimizer: ``"muon"`` (Muon on hidden matrices + AdamW) or ``"adamw"``.
        schedule: ``"wsd"`` (warm-up, stable, 1-sqrt decay) or ``"cosine"``
            (warm-up, cosine to 2 %: the shipped host's recipe).
        warmup_steps: Linear warm-up steps.
        decay_fraction: WSD: share of ``total_steps`` spent decaying.
        adam_lr: Peak learning rate of AdamW.
        muon_lr: Peak learning rate of Muon (its "original" shape scaling).
        weight_decay: Decoupled weight decay of both optimisers.
        ema_decay: Decay of the weight average; 0 disables it.
        grad_clip: Gradient-norm clip over all parameters.
        seed: Seeds the initialisation and the prior's generator; below
            ``hosttraining.common.in_prior.HELDOUT_KEY``.
        model: Architecture preset (``"default"``: the shipped size).
        prior_version: Prior version (2: :data:`hosttraining.priors.regression.PRIOR_V2`; 1, the
            shipped host's, only for the diagnosis arms of ``hosttraining.regression.diagnose``).
        cells_per_batch: Rows times columns per batch (small batches).
        max_tasks_per_batch: Cap on tasks per batch.
        min_rows: Smallest table (see :class:`hosttraining.priors.regression.PriorConfig`).
        small_max_rows: Upper end of the small tables.
        max_rows: Upper end of the large tables.
        p_large: Share of batches of large tables.
        time_progress_minutes: Pilots only: when > 0 the schedule's progress is
            the larger of the step and the wall-clock fraction of this many
            minutes, so an arm anneals within its time; this makes the weights
            depend on the machine's speed, so a chain keeps it 0.
    """

    total_steps: int
    optimizer: str = "muon"
    schedule: str = "wsd"
    warmup_steps: int = 200
    decay_fraction: float = 0.25
    adam_lr: float = 1e-3
    muon_lr: float = 0.02
    weight_decay: float = 0.01
    ema_decay: float = 0.998
    grad_clip: float = 1.0
    seed: int = 0
    model: str = "default"
    prior_version: int = 2
    cells_per_batch: int = PRIOR_V2.cells_per_batch
    max_tasks_per_batch: int = PRIOR_V2.max_tasks_per_batch
    time_progress_minutes: float = 0.0
    min_rows: int = PRIOR_V2.min_rows
    small_max_rows: int = PRIOR_V2.small_max_rows
    max_rows: int = PRIOR_V2.max_rows
    p_large: float = PRIOR_V2.p_large

    def prior(self) -> PriorConfig:
        """The prior configuration this chain draws from."""
        if self.prior_version not in (1, 2):
            raise ValueError(f"no prior version {self.prior_version}")
        return dataclasses.replace(
            PRIOR_V2,
            version=self.prior_version,
            cells_per_batch=self.cells_per_batch,
            max_tasks_per_batch=self.max_tasks_per_batch,
            min_rows=self.min_rows,
            small_max_rows=self.small_max_rows,
            max_rows=self.max_rows,
            p_large=self.p_large,
        )


def lr_factor(cfg: ChainConfig, step: int, wall_s: float = 0.0) -> float:
    """The learning-rate multiplier at ``step``.

    Args:
        cfg: The plan.
        step: Optimiser steps done so far.
        wall_s: Training seconds so far (used only with ``time_progress_minutes``).

    Returns:
        Warm-up then, for WSD, 1.0 until the last ``decay_fraction`` and a
        1-sqrt decay to 0 over it; for cosine, a cosine to 2 % of the peak.
    """
    if step < cfg.warmup_steps:
        return (step + 1) / cfg.warmup_steps
    progress = step / cfg.total_steps
    if cfg.time_progress_minutes > 0:
        progress = max(progress, wall_s / (cfg.time_progress_minutes * 60))
    progress = min(1.0, progress)
    if cfg.schedule == "cosine":
        warm = cfg.warmup_steps / cfg.total_steps
        p = max(0.0, (progress - warm) / max(1e-9, 1.0 - warm))
        return 0.02 + 0.98 * 0.5 * (1.0 + math.cos(math.pi * p))
    if cfg.schedule != "wsd":
        raise ValueError(f"unknown schedule {cfg.schedule!r}")
    start = 1.0 - cfg.decay_fraction
    if progress <= start:
        return 1.0
    return max(0.0, 1.0 - math.sqrt((progress - start) / cfg.decay_fraction))


def replan(cfg: ChainConfig, step: int, total_steps: int) -> ChainConfig:
    """The plan with a new total length, allowed only while nothing changes so far.

    In WSD the learning rate is flat between the warm-up and the decay, so the
    total length can change at any step past the warm-up and before either
    plan's decay starts: every step taken had the same learning rate under both
    plans, and the chain ends with the weights of one planned with the new
    length from the start (tested). The chain's length is set from a measured
    step rate; this lets a later link correct it so that the decay falls in the
    last link.

    Raises:
        ValueError: For a cosine schedule, a time-based one, or a step inside
            the warm-up or either decay.
    """
    new = dataclasses.replace(cfg, total_steps=total_steps)
    if cfg.schedule != "wsd" or cfg.time_progress_minutes > 0:
        raise ValueError("only a step-based WSD chain can be replanned")
    decay_start = (1.0 - cfg.decay_fraction) * min(cfg.total_steps, total_steps)
    if not cfg.warmup_steps <= step <= decay_start:
        raise ValueError(
            f"step {step} is not in the stable phase of both plans "
            f"({cfg.warmup_steps}..{int(decay_start)}): replanning would change the past"
        )
    return new


def _optimizers(model: torch.nn.Module, cfg: ChainConfig) -> list[torch.optim.Optimizer]:
    return build_optimizers(
        model,
        cfg.optimizer,
        adam_lr=cfg.adam_lr,
        muon_lr=cfg.muon_lr,
        weight_decay=cfg.weight_decay,
    )


def _ema_update(ema: dict[str, torch.Tensor], model: torch.nn.Module, decay: float, step: int):
    # The early-step warm-up of the decay keeps the average from remembering the
    # random initialisation (as in common EMA implementations).
    d = min(decay, (1.0 + step) / (10.0 + step))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.requires_grad:
                ema[name].mul_(d).add_(p.detach(), alpha=1.0 - d)
            else:
                ema[name].copy_(p)
        # Constants (the regression borders, RoPE frequencies) are copied, never
        # averaged: d*x + (1-d)*x need not round back to x.
        for name, b in model.named_buffers():
            if name in ema:
                ema[name].copy_(b)


def _save_atomically(obj: dict[str, Any], path: Path) -> None:
    tmp = path.with_name(path.name + ".tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)


def _new_state(cfg: ChainConfig) -> dict[str, Any]:
    if not 0 <= cfg.seed < HELDOUT_KEY:
        raise ValueError("the seed must be below hosttraining.common.in_prior.HELDOUT_KEY")
    model = build_model(_MODELS[cfg.model], seed=cfg.seed)
    return {
        "config": dataclasses.asdict(cfg),
        "model_config": dict(_MODELS[cfg.model]),
        "model": model.state_dict(),
        "optims": None,
        "ema": {k: v.detach().clone() for k, v in model.state_dict().items()},
        "step": 0,
        "tasks_seen": 0,
        "wall_s": 0.0,
        "loss_ema": None,
        "links": [],
        "prior_rng": np.random.default_rng([cfg.seed, 26]).bit_generator.state,
        "torch_rng": torch.get_rng_state(),
        "python_rng": random.getstate(),
    }


def run_link(
    folder: str | Path,
    *,
    minutes: float,
    cpu_minutes: float | None = None,
    cfg: ChainConfig | None = None,
    replan_total_steps: int | None = None,
    max_steps: int | None = None,
    threads: int = 1,
    checkpoint_minutes: float = 10.0,
    log_every: int = 25,
    evaluate_at_end: bool = True,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Run one link of a chain: start it (``cfg`` given) or resume it.

    Args:
        folder: The chain's folder (holds ``state.pt``, ``log.jsonl``).
        minutes: Wall-clock length of this link.
        cpu_minutes: Also stop once this process has used this many CPU
            minutes (a link is planned in one-thread CPU time, which a busy
            shared machine stretches in wall time).
        cfg: The plan of a new chain; ``None`` resumes the one in ``folder``.
        replan_total_steps: On a resume, a new length of the whole chain (see
            :func:`replan`).
        max_steps: Stop after this many steps in this call (tests).
        threads: ``torch.set_num_threads``; bit-exact resumes need the same count.
        checkpoint_minutes: Minutes between atomic state writes.
        log_every: Steps between log lines.
        evaluate_at_end: Append the in-prior metric of the averaged weights
            to ``evals.jsonl`` when the link ends.
        log: Where progress lines go.

    Returns:
        Summary of the link (steps, wall seconds, last smoothed loss).
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    state_path = folder / STATE_FILE
    if cfg is not None:
        if state_path.exists():
            raise FileExistsError(f"{state_path} exists: resume it or choose another folder")
        state = _new_state(cfg)
    else:
        if not state_path.exists():
            raise FileNotFoundError(f"no chain state at {state_path}")
        state = load_state(state_path, keys=STATE_KEYS, restart=_RESTART)
        cfg = ChainConfig(**state["config"])
        if replan_total_steps is not None and replan_total_steps != cfg.total_steps:
            cfg = replan(cfg, state["step"], replan_total_steps)
            state["replans"] = [
                *state.get("replans", []),
                {"at_step": state["step"], "total_steps": replan_total_steps},
            ]
    torch.set_num_threads(threads)
    model = build_model(state["model_config"], seed=cfg.seed)
    model.load_state_dict(state["model"])
    optims = _optimizers(model, cfg)
    if state["optims"] is not None:
        for opt, sd in zip(optims, state["optims"], strict=True):
            opt.load_state_dict(sd)
    ema = state["ema"]
    prior_rng = np.random.default_rng()
    prior_rng.bit_generator.state = state["prior_rng"]
    torch.set_rng_state(state["torch_rng"])
    random.setstate(state["python_rng"])
    criterion = FullSupportBarDistribution(model.regression_borders.clone())
    prior = cfg.prior()
    step, tasks_seen, loss_ema = state["step"], state["tasks_seen"], state["loss_ema"]
    link = {"start_step": step, "threads": threads, "started": time.time()}
    links = [*state["links"], link]
    start, prior_wall = time.monotonic(), state["wall_s"]
    cpu_start, prior_cpu = time.process_time(), state.get("cpu_s", 0.0)
    cpu_limit = math.inf if cpu_minutes is None else cpu_minutes * 60
    last_ckpt = start

    def wall() -> float:
        return prior_wall + time.monotonic() - start

    def cpu() -> float:
        return prior_cpu + time.process_time() - cpu_start

    def save() -> None:
        link["end_step"] = step
        _save_atomically(
            {
                "config": dataclasses.asdict(cfg),
                "model_config": state["model_config"],
                "model": model.state_dict(),
                "optims": [opt.state_dict() for opt in optims],
                "ema": ema,
                "step": step,
                "tasks_seen": tasks_seen,
                "wall_s": wall(),
                "cpu_s": cpu(),
                "loss_ema": loss_ema,
                "links": links,
                "replans": state.get("replans", []),
                "prior_rng": prior_rng.bit_generator.state,
                "torch_rng": torch.get_rng_state(),
                "python_rng": random.getstate(),
            },
            state_path,
        )

    log(
        f"link {len(links)} from step {step} of {cfg.total_steps} ({cfg.optimizer}, {cfg.schedule})"
    )
    this_call = 0
    cut_log_after(folder / LOG_FILE, step, restart=_RESTART)
    with (folder / LOG_FILE).open("a") as log_fh:
        while (
            step < cfg.total_steps
            and time.monotonic() - start < minutes * 60
            and time.process_time() - cpu_start < cpu_limit
        ):
            if max_steps is not None and this_call >= max_steps:
                break
            batch = sample_batch(prior_rng, prior)
            factor = lr_factor(cfg, step, wall())
            for opt in optims:
                for group in opt.param_groups:
                    group["lr"] = group["peak_lr"] * factor
            logits_TBK = model(batch.x_RBC, batch.y_train_NB)
            loss = criterion(logits_TBK, batch.y_test_TB).mean()
            for opt in optims:
                opt.zero_grad(set_to_none=True)
            loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            if torch.isfinite(grad_norm):  # a rare overflow batch is skipped, not learned
                for opt in optims:
                    opt.step()
            if cfg.ema_decay > 0:
                _ema_update(ema, model, cfg.ema_decay, step)
            step += 1
            this_call += 1
            tasks_seen += batch.x_RBC.shape[1]
            value = float(loss.detach())
            loss_ema = value if loss_ema is None else 0.98 * loss_ema + 0.02 * value
            if step % log_every == 0 or step == cfg.total_steps:
                record = {
                    "step": step,
                    "loss": round(value, 5),
                    "loss_ema": round(loss_ema, 5),
                    "lr_factor": round(factor, 6),
                    "lr": [opt.param_groups[0]["lr"] for opt in optims],
                    "tasks_seen": tasks_seen,
                    "wall_s": round(wall(), 1),
                    "cpu_s": round(cpu(), 1),
                    "link": len(links),
                }
                log_fh.write(json.dumps(record) + "\n")
                log_fh.flush()
            if time.monotonic() - last_ckpt > checkpoint_minutes * 60:
                save()
                last_ckpt = time.monotonic()
                log(f"checkpoint at step {step} (loss_ema {loss_ema:.4f}, wall {wall():.0f} s)")
    save()
    summary = {
        "link": len(links),
        "start_step": link["start_step"],
        "end_step": step,
        "total_steps": cfg.total_steps,
        "wall_s": round(wall(), 1),
        "cpu_s": round(cpu(), 1),
        "loss_ema": loss_ema,
    }
    if evaluate_at_end:
        averaged = model_from_state(state_path)
        summary["in_prior"] = evaluate(averaged)
        if cfg.ema_decay > 0:  # the raw weights too, to see what averaging buys
            summary["in_prior_raw"] = evaluate(model_from_state(state_path, averaged=False))
        with (folder / EVALS_FILE).open("a") as fh:
            fh.write(json.dumps(summary) + "\n")
    log(f"link done: {json.dumps(summary)}")
    return summary


# --------------------------------------------------------------------------- pilot


def pilot_arms(minutes: float, seed: int) -> dict[str, ChainConfig]:
    """The two arms of the A/B pilot: the shipped host's recipe vs Muon + AdamW, WSD, EMA.

    Both draw the same batches of the version-2 prior from the same seed and
    initialise the same model; only optimiser, schedule and averaging differ.
    """
    common = {"total_steps": 10**6, "seed": seed, "time_progress_minutes": minutes}
    return {
        "adamw_cosine": ChainConfig(
            optimizer="adamw", schedule="cosine", ema_decay=0.0, warmup_steps=50, **common
        ),
        "muon_wsd_ema": ChainConfig(
            optimizer="muon",
            schedule="wsd",
            ema_decay=0.99,
            warmup_steps=50,
            decay_fraction=0.25,
            **common,
        ),
    }


def _pilot(folder: Path, minutes: float, seed: int, argv: Sequence[str]) -> dict[str, Any]:
    arms = pilot_arms(minutes, seed)
    procs = {}
    for name in arms:
        arm_dir = folder / "pilot" / name
        cmd = [sys.executable, "-m", "hosttraining.regression.chain", "_arm", "--dir", str(arm_dir)]
        cmd += ["--arm", name, "--minutes", str(minutes), "--seed", str(seed)]
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        procs[name] = subprocess.Popen(cmd, env=env)
    for proc in procs.values():
        proc.wait()
    result: dict[str, Any] = {
        "command": "python -m hosttraining.regression.chain "
        + " ".join(shlex.quote(a) for a in argv),
        "minutes_per_arm": minutes,
        "arms": {},
    }
    for name, arm_cfg in arms.items():
        line = (folder / "pilot" / name / EVALS_FILE).read_text().splitlines()[-1]
        record = json.loads(line)
        record["config"] = dataclasses.asdict(arm_cfg)
        record["steps_per_minute"] = round(record["end_step"] / (record["wall_s"] / 60), 2)
        result["arms"][name] = record
    gaps = {name: r["in_prior"]["gap_rf"] for name, r in result["arms"].items()}
    result["judged_on"] = "in_prior.gap_rf (host minus RF relative RMSE; lower wins)"
    result["winner"] = min(gaps, key=gaps.__getitem__)
    return result


# --------------------------------------------------------------------------- CLI


def _parser() -> argparse.ArgumentParser:
    p = OneLineArgumentParser(
        prog="python -m hosttraining.regression.chain",
        description="Pretrain the embedded host as a resumable chain of links.",
    )
    sub = p.add_subparsers(dest="cmd", required=True)
    start = sub.add_parser("start", help="plan a new chain and run its first link")
    resume = sub.add_parser("resume", help="run the next link of the chain in --dir")
    pilot = sub.add_parser("pilot", help="A/B pilot: old recipe vs Muon+WSD+EMA")
    arm = sub.add_parser("_arm", help=argparse.SUPPRESS)
    for sp in (start, resume, pilot, arm):
        sp.add_argument("--dir", type=Path, required=True, help="chain folder")
        sp.add_argument(
            "--minutes", type=float, required=True, help="wall-clock length of this run"
        )
        sp.add_argument("--threads", type=int, default=1)
    start.add_argument("--total-steps", type=int, required=True, help="steps of the whole chain")
    start.add_argument("--optimizer", choices=["muon", "adamw"], default="muon")
    start.add_argument("--schedule", choices=["wsd", "cosine"], default="wsd")
    start.add_argument("--warmup-steps", type=int, default=200)
    start.add_argument("--decay-fraction", type=float, default=0.25)
    start.add_argument("--ema-decay", type=float, default=0.998)
    start.add_argument("--seed", type=int, default=0)
    start.add_argument(
        "--tables", choices=sorted(TABLES), default="v2", help="table sizes and batching"
    )
    resume.add_argument(
        "--total-steps",
        type=int,
        default=None,
        help="replan the chain's length (only in WSD's stable phase; see replan())",
    )
    for sp in (start, resume):
        sp.add_argument("--checkpoint-minutes", type=float, default=10.0)
        sp.add_argument(
            "--cpu-minutes", type=float, default=None, help="also stop after this much CPU time"
        )
    pilot.add_argument("--seed", type=int, default=0)
    arm.add_argument("--seed", type=int, default=0)
    arm.add_argument("--arm", required=True)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command; returns the exit status."""
    return run_main(_parser, lambda args: _run(args, argv), argv)


def _write_pid(folder: Path) -> None:
    # The running chain names itself: a shell's $! may be a wrapper's id.
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "PID").write_text(f"{os.getpid()}\n")


def _run(args: argparse.Namespace, argv: Sequence[str] | None) -> int:
    def err(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    torch.set_num_threads(args.threads)
    if args.cmd == "start":
        cfg = ChainConfig(
            total_steps=args.total_steps,
            optimizer=args.optimizer,
            schedule=args.schedule,
            warmup_steps=args.warmup_steps,
            decay_fraction=args.decay_fraction,
            ema_decay=args.ema_decay,
            seed=args.seed,
            **TABLES[args.tables],
        )
        if (args.dir / STATE_FILE).exists():
            raise CommandError(f"{args.dir / STATE_FILE} exists; use 'resume'")
        _write_pid(args.dir)
        summary = run_link(
            args.dir,
            minutes=args.minutes,
            cpu_minutes=args.cpu_minutes,
            cfg=cfg,
            threads=args.threads,
            checkpoint_minutes=args.checkpoint_minutes,
            log=err,
        )
    elif args.cmd == "resume":
        if not (args.dir / STATE_FILE).exists():
            raise CommandError(f"no chain state at {args.dir / STATE_FILE}")
        if args.total_steps is not None:
            state = load_state(args.dir / STATE_FILE, keys=STATE_KEYS, restart=_RESTART)
            try:
                replan(ChainConfig(**state["config"]), state["step"], args.total_steps)
            except ValueError as exc:
                raise CommandError(str(exc)) from exc
        _write_pid(args.dir)
        summary = run_link(
            args.dir,
            minutes=args.minutes,
            cpu_minutes=args.cpu_minutes,
            replan_total_steps=args.total_steps,
            threads=args.threads,
            checkpoint_minutes=args.checkpoint_minutes,
            log=err,
        )
    elif args.cmd == "_arm":
        arm_dir = args.dir
        if (arm_dir / STATE_FILE).exists():
            raise CommandError(f"{arm_dir} holds a finished arm; remove it to rerun")
        summary = run_link(
            arm_dir,
            minutes=args.minutes,
            cfg=pilot_arms(args.minutes, args.seed)[args.arm],
            threads=1,
            checkpoint_minutes=1e9,
            log=lambda line: err(f"[{args.arm}] {line}"),
        )
    else:
        argv_list = list(argv) if argv is not None else sys.argv[1:]
        summary = _pilot(args.dir, args.minutes, args.seed, argv_list)
        out = args.dir / "pilot.json"
        out.write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
