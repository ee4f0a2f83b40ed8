"""Pretraining loop for the embedded TabPFN-v3 regressor on the synthetic prior.

The model is ``tabpfn``'s own ``TabPFNV3`` built from a config dict; the loss is
``tabpfn``'s ``FullSupportBarDistribution`` over the model's
``regression_borders`` buffer, evaluated on the query rows of each task. The
checkpoint is written with ``tabpfn.checkpoint.save_as_safetensors`` so that
``tabpfn.TabPFNRegressor(model_path=...)`` loads it like any other.

Shape suffixes: ``R`` rows, ``B`` tasks, ``C`` features, ``N`` context rows,
``T`` query rows, ``K`` buckets.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import json
import math
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import torch
from tabpfn.architectures import tabpfn_v3
from tabpfn.architectures.shared.bar_distribution import FullSupportBarDistribution
from tabpfn.checkpoint import Checkpoint, save_as_safetensors
from tabpfn.inference_config import InferenceConfig
from tabpfn.preprocessing import PreprocessorConfig

from hosttraining.common import heldout
from hosttraining.common.averaging import average_state_dicts, lawa_update
from hosttraining.common.errors import RunFileError
from hosttraining.common.optim import build_optimizers
from hosttraining.common.run_files import cut_log_after, load_optimizer, load_state, load_weights
from hosttraining.priors.batch_stream import Sampler, batch_stream
from hosttraining.priors.regression import PriorConfig, TaskBatch, sample_batch
from retrofit.errors import CommandError
from retrofit.files import atomic_path, sha256_file, write_text_atomic

__all__ = [
    "DEFAULT_MODEL_CONFIG",
    "TINY_MODEL_CONFIG",
    "Objective",
    "RegressionObjective",
    "TrainConfig",
    "add_device_arguments",
    "build_model",
    "checked_device",
    "inference_config_dict",
    "lawa_path",
    "rewrite_inference_config",
    "save_checkpoint",
    "train",
]

DEFAULT_MODEL_CONFIG: dict[str, Any] = {
    "embed_dim": 32,
    "dist_embed_num_blocks": 1,
    "dist_embed_num_heads": 4,
    "dist_embed_num_inducing_points": 16,
    "feat_agg_num_blocks": 2,
    "feat_agg_num_heads": 4,
    "feat_agg_num_cls_tokens": 4,
    "nlayers": 4,
    "icl_num_heads": 4,
    "num_buckets": 200,
    "max_num_classes": -1,
}
"""Architecture of the shipped host (a small ``TabPFNV3Config``)."""

TINY_MODEL_CONFIG: dict[str, Any] = {
    **DEFAULT_MODEL_CONFIG,
    "embed_dim": 8,
    "dist_embed_num_heads": 2,
    "dist_embed_num_inducing_points": 4,
    "feat_agg_num_blocks": 1,
    "feat_agg_num_heads": 2,
    "nlayers": 1,
    "icl_num_heads": 2,
    "num_buckets": 20,
    "softmax_scaling_mlp_hidden_dim": 8,
}
"""A model small enough for tests."""


def inference_config_dict(
    n_estimators: int = 1,
    preprocessing: str = "squashing_scaler_default",
    *,
    append_original: bool = True,
    softmax_temperature: float = 1.0,
) -> dict[str, Any]:
    """The explicit inference config stored in the checkpoint.

    ``tabpfn`` has no default inference config for v3, so the checkpoint must
    carry one. The choices mirror how the prior presents features: no
    fingerprint column (the prior has none), categorical codes as numbers.

    Args:
        n_estimators: ``N_ESTIMATORS``: forward passes per prediction.
        preprocessing: ``PreprocessorConfig.name`` applied to the features.
        append_original: Whether the untransformed features are appended.
        softmax_temperature: Temperature on the bar logits (1.0: as trained).

    Returns:
        A JSON-able dict accepted by ``tabpfn.inference_config.InferenceConfig``.
    """
    transform = PreprocessorConfig(
        name=preprocessing,  # type: ignore[arg-type]
        categorical_name="numeric",
        append_original=append_original,
        max_features_per_estimator=500,
    )
    config = InferenceConfig(
        PREPROCESS_TRANSFORMS=[transform],
        N_ESTIMATORS=n_estimators,
        SOFTMAX_TEMPERATURE=softmax_temperature,
        FINGERPRINT_FEATURE=False,
        FEATURE_SHIFT_METHOD="shuffle",
        OUTLIER_REMOVAL_STD=None,
        REGRESSION_Y_PREPROCESS_TRANSFORMS=(None,),
        MAX_NUMBER_OF_FEATURES=100,
        MAX_NUMBER_OF_SAMPLES=10_000,
        MAX_CPU_SAMPLES=10_000,
    )
    return json.loads(json.dumps(dataclasses.asdict(config)))


def build_model(model_config: dict[str, Any], seed: int = 0) -> tabpfn_v3.TabPFNV3:
    """Build a freshly initialised ``TabPFNV3`` regressor.

    Args:
        model_config: Fields of ``TabPFNV3Config``; ``num_buckets`` > 0.
        seed: Seed for the parameter initialisation.

    Returns:
        The model, in training mode.
    """
    parsed, unused = tabpfn_v3.parse_config(dict(model_config))
    if unused:
        raise ValueError(f"Unknown TabPFNV3Config fields: {sorted(unused)}")
    torch.manual_seed(seed)
    model = tabpfn_v3.get_architecture(parsed)
    # tabpfn zero-initialises some output projections; that is fine for training.
    return model.train()


def save_checkpoint(
    model: tabpfn_v3.TabPFNV3,
    model_config: dict[str, Any],
    path: str | Path,
    *,
    inference_config: dict[str, Any] | None = None,
    extra: dict[str, Any] | None = None,
) -> str:
    """Write a tabpfn-loadable safetensors checkpoint atomically.

    Args:
        model: The trained model (its ``regression_borders`` buffer is saved
            with the state dict).
        model_config: The config the model was built from.
        path: Destination; its name must contain ``v3`` for tabpfn to read it
            as a v3 checkpoint.
        inference_config: Stored ``inference_config``; defaults to
            :func:`inference_config_dict`.
        extra: More JSON-able header fields (training provenance).

    Returns:
        The file's SHA-256, also written next to it as ``<path>.sha256``.
    """
    path = Path(path)
    if "v3" not in path.name:
        raise ValueError(f"tabpfn reads the version from the file name; {path.name!r}")
    parsed, _ = tabpfn_v3.parse_config(dict(model_config))
    checkpoint: dict[str, Any] = {
        "state_dict": {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()},
        "architecture_name": "tabpfn_v3",
        "config": dataclasses.asdict(parsed),
        "inference_config": inference_config or inference_config_dict(),
    }
    if extra:
        checkpoint["training"] = extra
    return _write_atomically(checkpoint, path)


def rewrite_inference_config(path: str | Path, inference_config: dict[str, Any]) -> str:
    """Replace the stored inference config of a checkpoint, keeping everything else.

    Args:
        path: A checkpoint written by :func:`save_checkpoint`.
        inference_config: The new ``inference_config`` (see
            :func:`inference_config_dict`).

    Returns:
        The rewritten file's SHA-256 (also written to ``<path>.sha256``).
    """
    path = Path(path)
    checkpoint = Checkpoint(path).load()
    if checkpoint["inference_config"] != inference_config and "training" in checkpoint:
        # The model card says when the stored config is not the one the run wrote.
        checkpoint["training"] = {**checkpoint["training"], "inference_config_rewritten": True}
    checkpoint["inference_config"] = inference_config
    return _write_atomically(checkpoint, path)


def _write_atomically(checkpoint: dict[str, Any], path: Path) -> str:
    with atomic_path(path, suffix=".safetensors") as tmp:
        save_as_safetensors(checkpoint, tmp)
    digest = sha256_file(path)
    write_text_atomic(path.with_name(path.name + ".sha256"), f"{digest}  {path.name}\n")
    return digest


@dataclasses.dataclass
class TrainConfig:
    """Optimisation settings.

    Attributes:
        steps: Planned optimiser steps; the schedule is cosine over these.
        max_minutes: Wall-clock cap; training stops early when reached.
        lr: Peak learning rate of AdamW.
        weight_decay: AdamW weight decay.
        warmup_steps: Linear warm-up steps.
        grad_clip: Gradient-norm clip.
        seed: Seeds the initialisation and every batch of the prior.
        threads: ``torch.set_num_threads``.
        log_every: Steps between log lines.
        checkpoint_every_s: Seconds between periodic checkpoints.
        time_aware_schedule: Let the wall clock advance the cosine schedule
            (see :func:`_lr_factor`). Off by default: it makes the learning
            rate, and so the weights, depend on the machine's speed.
        device: Where the model trains (``"cpu"``, ``"cuda"``); batches are
            drawn on the CPU and moved there.
        workers: Processes drawing the prior's batches ahead of the model
            (:func:`hosttraining.priors.batch_stream.batch_stream`; 0: drawn inline).
            The batches, and so the weights, do not depend on it.
        optimizer: ``"adamw"``, or ``"muon"``: Muon on the hidden matrices
            plus AdamW on the rest (:func:`hosttraining.common.optim.build_optimizers`).
        muon_lr: Peak learning rate of Muon (None: ``lr``).
        muon_adjust_lr: Muon's ``adjust_lr_fn``; ``"match_rms_adamw"`` lets
            one learning rate serve both optimisers.
        lawa_every: Steps between the snapshots of checkpoint averaging
            (:mod:`hosttraining.common.averaging`; 0: none). The average of the last
            ``lawa_keep`` is written beside the checkpoint
            (:func:`lawa_path`).
        lawa_keep: Snapshots in the averaging window.
    """

    steps: int = 20_000
    max_minutes: float = 90.0
    lr: float = 1e-3
    weight_decay: float = 0.01
    warmup_steps: int = 300
    grad_clip: float = 1.0
    seed: int = 0
    threads: int = 2
    log_every: int = 50
    checkpoint_every_s: float = 300.0
    time_aware_schedule: bool = False
    device: str = "cpu"
    workers: int = 0
    optimizer: str = "adamw"
    muon_lr: float | None = None
    muon_adjust_lr: str = "match_rms_adamw"
    lawa_every: int = 0
    lawa_keep: int = 5


def lawa_path(out: str | Path) -> Path:
    """Where a run with checkpoint averaging writes the averaged checkpoint."""
    out = Path(out)
    return out.with_name(f"{out.stem}.lawa{out.suffix}")


def add_device_arguments(parser: argparse.ArgumentParser) -> None:
    """``--device`` and ``--workers`` of the training commands (:class:`TrainConfig`)."""
    parser.add_argument("--device", default="cpu", help="where the model trains (cpu, cuda)")
    parser.add_argument(
        "--workers", type=int, default=0, help="processes drawing the prior's batches ahead"
    )


def checked_device(args: argparse.Namespace) -> tuple[str, int]:
    """``(device, workers)`` from :func:`add_device_arguments`' flags, refused early when unusable.

    Raises:
        CommandError: On an unknown device, CUDA without a CUDA device, or
            negative workers.
    """
    try:
        device = torch.device(args.device)
    except RuntimeError as err:
        raise CommandError(f"--device {args.device!r}: {err}") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise CommandError(f"--device {args.device}: torch sees no CUDA device here")
    if args.workers < 0:
        raise CommandError(f"--workers must be >= 0, got {args.workers}")
    return str(device), args.workers


def _lr_factor(step: int, cfg: TrainConfig, wall_s: float) -> float:
    """Linear warm-up, then cosine to 2 % of the peak.

    Progress is the step fraction, so the schedule, and a run that finishes by
    steps, are reproducible from the seed. With ``time_aware_schedule`` progress
    is the larger of the step fraction and the wall-clock fraction of
    ``max_minutes``, so a run slowed by a busy machine still anneals before its
    time cap, at the price of reproducibility.
    """
    if step < cfg.warmup_steps:
        return (step + 1) / cfg.warmup_steps
    by_steps = (step - cfg.warmup_steps) / max(1, cfg.steps - cfg.warmup_steps)
    by_time = wall_s / (cfg.max_minutes * 60) if cfg.time_aware_schedule else 0.0
    progress = min(1.0, max(by_steps, by_time))
    return 0.02 + 0.98 * 0.5 * (1.0 + math.cos(math.pi * progress))


class Objective(Protocol):
    """What a training run learns: the model it builds and the loss of one step's batch."""

    def build(self, model_config: dict[str, Any], seed: int) -> tabpfn_v3.TabPFNV3:
        """The freshly initialised model (training mode)."""
        ...

    def sampler(self) -> Sampler:
        """Draws one step's batch from a generator (picklable, for worker processes)."""
        ...

    def batch_loss(self, model: tabpfn_v3.TabPFNV3, batch: Any) -> tuple[torch.Tensor, int]:
        """The mean loss of one batch on the model's device, and how many tasks it held."""
        ...

    def describe(self) -> dict[str, Any]:
        """JSON-able fields for the checkpoint's training record."""
        ...


@dataclasses.dataclass
class RegressionObjective:
    """The regressor's objective: ``FullSupportBarDistribution`` NLL on the query rows.

    Attributes:
        prior: The regression prior the batches come from.
    """

    prior: PriorConfig = dataclasses.field(default_factory=PriorConfig)
    _criterion: FullSupportBarDistribution | None = dataclasses.field(default=None, repr=False)

    def build(self, model_config: dict[str, Any], seed: int) -> tabpfn_v3.TabPFNV3:
        """:func:`build_model`, and the bar distribution over its borders."""
        model = build_model(model_config, seed=seed)
        self._criterion = FullSupportBarDistribution(model.regression_borders.clone())
        return model

    def sampler(self) -> Sampler:
        """:func:`hosttraining.priors.regression.sample_batch` over this prior."""
        return functools.partial(sample_batch, cfg=self.prior)

    def batch_loss(self, model: tabpfn_v3.TabPFNV3, batch: TaskBatch) -> tuple[torch.Tensor, int]:
        """Mean bar-distribution NLL of the query rows of one prior batch."""
        if self._criterion is None:
            raise RuntimeError("build the model first")
        device = model.regression_borders.device
        criterion = self._criterion.to(device)  # in place; a no-op once there
        logits_TBK = model(batch.x_RBC.to(device), batch.y_train_NB.to(device))
        loss_TB = criterion(logits_TBK, batch.y_test_TB.to(device))
        return loss_TB.mean(), int(batch.x_RBC.shape[1])

    def describe(self) -> dict[str, Any]:
        """The prior's settings."""
        return {"prior": dataclasses.asdict(self.prior)}


_STATE_KEYS = ("model", "optim", "step", "tasks_seen", "wall_s")
"""What :func:`train`'s state file holds and a resume reads."""
_RESTART = "rerun with --no-resume"
"""The fresh start of both training commands (``regression.pretrain``, ``classification.train``)."""


def train(
    out: str | Path,
    cfg: TrainConfig,
    *,
    model_config: dict[str, Any] | None = None,
    prior: PriorConfig | None = None,
    inference_config: dict[str, Any] | None = None,
    log: Callable[[str], None] = print,
    resume: bool = True,
    objective: Objective | None = None,
    evaluate: Callable[[torch.nn.Module], dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Pretrain a host and write it to ``out``.

    A state file ``<out>.state.pt`` (model, optimisers, step, averaging
    window) is saved with every periodic checkpoint; with ``resume=True`` a run
    continues from it. The loss log is ``<out>.log.jsonl`` (one JSON object per
    log line); with ``evaluate``, ``<out>.evals.jsonl`` gets one line per
    checkpoint for the raw weights and one for the averaged ones. Both files are
    read by :mod:`hosttraining.common.run_files`: a log's cut last line is dropped with a
    warning, a damaged, incomplete or other configuration's state is refused in
    one line.

    Args:
        out: Checkpoint path (safetensors; name contains ``v3``).
        cfg: Optimisation settings.
        model_config: ``TabPFNV3Config`` fields; defaults to
            :data:`DEFAULT_MODEL_CONFIG`.
        prior: Prior settings; defaults to ``PriorConfig()``.
        inference_config: Stored inference config.
        log: Where progress lines go.
        resume: Continue from ``<out>.state.pt`` if present.
        objective: What is learned; default :class:`RegressionObjective` over
            ``prior`` (a classifier: ``hosttraining.classification.train``).
        evaluate: Scores a model (held-out tasks); called at every
            checkpoint. It must not change the model.

    Returns:
        Summary: steps done, tasks seen, wall seconds, final loss, SHA-256.
    """
    out = Path(out)
    model_config = dict(model_config or DEFAULT_MODEL_CONFIG)
    objective = objective or RegressionObjective(prior or PriorConfig())
    torch.set_num_threads(cfg.threads)
    model = objective.build(model_config, cfg.seed).to(cfg.device)
    optims = build_optimizers(
        model,
        cfg.optimizer,
        adam_lr=cfg.lr,
        muon_lr=cfg.lr if cfg.muon_lr is None else cfg.muon_lr,
        weight_decay=cfg.weight_decay,
        muon_adjust_lr=cfg.muon_adjust_lr,
    )
    state_path = out.with_name(out.name + ".state.pt")
    log_path = out.with_name(out.name + ".log.jsonl")
    evals_path = heldout.evals_path(out)
    step, tasks_seen, prior_wall = 0, 0, 0.0
    lawa: list[dict[str, torch.Tensor]] = []  # the averaging window, oldest first
    resumed_at: list[int] = []  # steps a run continued from its state file
    ema: float | None = None  # smoothed loss of the log; carried across a resume
    if resume and state_path.exists():
        state = load_state(state_path, keys=_STATE_KEYS, restart=_RESTART, map_location=cfg.device)
        load_weights(model, state["model"], path=state_path, restart=_RESTART)
        saved = state["optim"] if isinstance(state["optim"], list) else [state["optim"]]
        if len(saved) != len(optims):
            raise RunFileError(
                f"{state_path} holds {len(saved)} optimiser states, this run has "
                f"{len(optims)} ({cfg.optimizer}): resume with the run's own flags or "
                f"{_RESTART}"
            )
        for opt, saved_state in zip(optims, saved, strict=True):
            load_optimizer(opt, saved_state, path=state_path, restart=_RESTART)
        lawa = state.get("lawa", [])
        step, tasks_seen, prior_wall = (
            state["step"],
            state["tasks_seen"],
            state["wall_s"],
        )
        ema = state.get("loss_ema")
        resumed_at = [*state.get("resumed_at", []), step]
        cut_log_after(log_path, step, restart=_RESTART)
        cut_log_after(evals_path, step, restart=_RESTART)
        log(f"resumed from {state_path} at step {step}")
    else:
        log_path.unlink(missing_ok=True)
        evals_path.unlink(missing_ok=True)

    n_params = sum(p.numel() for p in model.parameters())
    log(
        f"params={n_params} steps={cfg.steps} threads={cfg.threads} seed={cfg.seed} "
        f"device={cfg.device} workers={cfg.workers}"
    )
    start = time.monotonic()
    last_ckpt = start

    def wall() -> float:
        return prior_wall + time.monotonic() - start

    def provenance() -> dict[str, Any]:
        return {
            "seed": cfg.seed,
            "steps_done": step,
            "steps_planned": cfg.steps,
            "tasks_seen": tasks_seen,
            "wall_s": round(wall(), 1),
            "threads": cfg.threads,
            "device": cfg.device,
            "lr": cfg.lr,
            "optimizer": cfg.optimizer,
            "grad_clip": cfg.grad_clip,
            "params": n_params,
            "max_minutes": cfg.max_minutes,
            "time_aware_schedule": cfg.time_aware_schedule,
            "stopped_by": "steps" if step >= cfg.steps else "time",
            "resumed_at_steps": resumed_at,
            **objective.describe(),
        }

    def averaged() -> tabpfn_v3.TabPFNV3:
        with torch.random.fork_rng(devices=[]):  # building seeds torch; the run's RNG stays
            copy = build_model(model_config, seed=cfg.seed)
        copy.load_state_dict(average_state_dicts(lawa))
        return copy.eval()

    evaluated_at = [-1]

    def evaluated(which: str, scored: torch.nn.Module) -> None:
        if evaluate is None:
            return
        record = {"step": step, "tasks_seen": tasks_seen, "wall_s": round(wall(), 1)}
        record = {**record, "weights": which, **evaluate(scored)}
        with evals_path.open("a") as fh:
            fh.write(json.dumps(record) + "\n")

    def checkpoint() -> None:
        extra = provenance()
        save_checkpoint(model, model_config, out, inference_config=inference_config, extra=extra)
        if lawa:
            extra = {**extra, "lawa": {"snapshots": len(lawa), "every_steps": cfg.lawa_every}}
            save_checkpoint(
                averaged(),
                model_config,
                lawa_path(out),
                inference_config=inference_config,
                extra=extra,
            )
        tmp = state_path.with_name(state_path.name + ".tmp")
        torch.save(
            {
                "model": model.state_dict(),
                "optim": [opt.state_dict() for opt in optims],
                "lawa": lawa,
                "step": step,
                "tasks_seen": tasks_seen,
                "wall_s": wall(),
                "loss_ema": ema,
                "resumed_at": resumed_at,
            },
            tmp,
        )
        os.replace(tmp, state_path)
        if evaluated_at[-1] != step:  # the final save repeats the last periodic one's step
            evaluated_at.append(step)
            evaluated("raw", model)
            if lawa:
                evaluated("lawa", averaged())

    batches = batch_stream(objective.sampler(), cfg.seed, step, cfg.steps, workers=cfg.workers)
    with log_path.open("a") as log_fh, contextlib.closing(batches):
        while step < cfg.steps and wall() < cfg.max_minutes * 60:
            factor = _lr_factor(step, cfg, wall())
            for opt in optims:
                for group in opt.param_groups:
                    group["lr"] = group["peak_lr"] * factor
            loss, batch_tasks = objective.batch_loss(model, next(batches))
            for opt in optims:
                opt.zero_grad(set_to_none=True)
            loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            if torch.isfinite(grad_norm):
                for opt in optims:
                    opt.step()
            step += 1
            if cfg.lawa_every > 0 and step % cfg.lawa_every == 0:
                lawa = lawa_update(lawa, model, cfg.lawa_keep)
            tasks_seen += batch_tasks
            value = float(loss.detach())
            ema = value if ema is None else 0.98 * ema + 0.02 * value
            if step % cfg.log_every == 0 or step == cfg.steps:
                record = {
                    "step": step,
                    "loss": round(value, 5),
                    "loss_ema": round(ema, 5),
                    "lr": optims[0].param_groups[0]["lr"],
                    "tasks_seen": tasks_seen,
                    "wall_s": round(wall(), 1),
                }
                log_fh.write(json.dumps(record) + "\n")
                log_fh.flush()
                log(" ".join(f"{k}={v}" for k, v in record.items()))
            if time.monotonic() - last_ckpt > cfg.checkpoint_every_s:
                checkpoint()
                last_ckpt = time.monotonic()
    model.eval()
    checkpoint()
    summary = provenance()
    summary["final_loss_ema"] = ema
    summary["sha256"] = sha256_file(out)
    log(f"done: {json.dumps(summary)}")
    return summary
