"""The training loop: a resumed run ends as an uninterrupted one; workers change nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from tabpfn.checkpoint import Checkpoint

from hosttraining.classification.train import TINY_CLASSIFIER_CONFIG, ClassificationObjective
from hosttraining.common.averaging import average_state_dicts
from hosttraining.common.loop import (
    TINY_MODEL_CONFIG,
    TrainConfig,
    lawa_path,
    train,
)
from hosttraining.priors.regression import PriorConfig
from hosttraining.priors.tabicl import TabICLPriorConfig

SMALL = TabICLPriorConfig(min_rows=60, max_rows=100, test_rows=20, max_features=6)


class _InterruptedError(Exception):
    pass


def test_a_resumed_pretrain_ends_with_the_weights_of_an_uninterrupted_one(tmp_path):
    def cfg(**kw: float) -> TrainConfig:
        return TrainConfig(steps=4, warmup_steps=1, seed=2, threads=1, log_every=1, **kw)

    def interrupt_at_step_3(line: str) -> None:
        if line.startswith("step=3 "):
            raise _InterruptedError

    prior = PriorConfig(max_rows=80)
    straight = tmp_path / "straight_v3.safetensors"
    train(straight, cfg(), model_config=TINY_MODEL_CONFIG, prior=prior, log=lambda _: None)
    resumed = tmp_path / "resumed_v3.safetensors"
    with pytest.raises(_InterruptedError):  # the state of step 2 is on disk, step 3 is lost
        train(
            resumed,
            cfg(checkpoint_every_s=0.0),
            model_config=TINY_MODEL_CONFIG,
            prior=prior,
            log=interrupt_at_step_3,
        )
    lines: list[str] = []
    train(resumed, cfg(), model_config=TINY_MODEL_CONFIG, prior=prior, log=lines.append)
    assert lines[0].endswith("at step 2")
    a, b = Checkpoint(straight).load()["state_dict"], Checkpoint(resumed).load()["state_dict"]
    assert all(torch.equal(a[k], b[k]) for k in a)
    steps = [json.loads(x)["step"] for x in resumed.with_name(resumed.name + ".log.jsonl").open()]
    assert steps == [1, 2, 3, 4]  # step 3 ran twice (once lost with the process), logged once
    assert Checkpoint(resumed).load()["training"]["resumed_at_steps"] == [2]
    assert Checkpoint(straight).load()["training"]["resumed_at_steps"] == []


def test_batches_drawn_by_worker_processes_give_the_weights_of_inline_drawing(tmp_path):
    prior = PriorConfig(max_rows=80)
    outs = {}
    for workers in (0, 2):
        outs[workers] = tmp_path / f"w{workers}_v3.safetensors"
        cfg = TrainConfig(steps=3, warmup_steps=1, seed=4, threads=1, workers=workers)
        train(outs[workers], cfg, model_config=TINY_MODEL_CONFIG, prior=prior, log=lambda _: None)
    a, b = (Checkpoint(outs[w]).load() for w in (0, 2))
    assert all(torch.equal(a["state_dict"][k], b["state_dict"][k]) for k in a["state_dict"])
    assert a["training"]["device"] == "cpu"


def _recipe(**kw: float) -> TrainConfig:
    return TrainConfig(
        steps=4, warmup_steps=1, seed=3, threads=1, log_every=1, optimizer="muon",
        grad_clip=2.0, lawa_every=1, lawa_keep=3, **kw,
    )  # fmt: skip


def test_a_resumed_muon_lawa_run_on_tabicl_ends_as_an_uninterrupted_one(tmp_path: Path) -> None:
    def run(out: Path, cfg: TrainConfig, log) -> None:
        objective = ClassificationObjective(prior=SMALL, init_from=None)
        train(out, cfg, model_config=TINY_CLASSIFIER_CONFIG, objective=objective, log=log)

    def interrupt_at_step_3(line: str) -> None:
        if line.startswith("step=3 "):
            raise _InterruptedError

    straight = tmp_path / "straight_v3.safetensors"
    run(straight, _recipe(), lambda _: None)
    resumed = tmp_path / "resumed_v3.safetensors"
    with pytest.raises(_InterruptedError):  # step 2's state is on disk, step 3 is lost
        run(resumed, _recipe(checkpoint_every_s=0.0), interrupt_at_step_3)
    lines: list[str] = []
    run(resumed, _recipe(), lines.append)
    assert lines[0].endswith("at step 2")
    for path in (lambda p: p, lawa_path):
        a = Checkpoint(path(straight)).load()["state_dict"]
        b = Checkpoint(path(resumed)).load()["state_dict"]
        assert all(torch.equal(a[k], b[k]) for k in a)
    state = torch.load(resumed.with_name(resumed.name + ".state.pt"), weights_only=True)
    assert len(state["optim"]) == 2 and len(state["lawa"]) == 3  # steps 2-4: one from before
    averaged = Checkpoint(lawa_path(resumed)).load()["state_dict"]
    mean = average_state_dicts(state["lawa"])
    assert all(torch.equal(averaged[k], mean[k]) for k in mean)
    raw = Checkpoint(resumed).load()["state_dict"]
    assert not all(torch.equal(raw[k], averaged[k]) for k in raw)  # the average is not step 4
