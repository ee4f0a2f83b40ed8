"""The host chain: Muon + WSD + EMA, exact resume, CPU budget, replanning."""

from __future__ import annotations

import json

import pytest
import torch

from hosttraining.common import in_prior
from hosttraining.common.loop import DEFAULT_MODEL_CONFIG, build_model
from hosttraining.regression import chain
from hosttraining.regression.chain import ChainConfig, lr_factor, muon_parameter_names, run_link


def test_muon_gets_only_hidden_matrices():
    model = build_model(DEFAULT_MODEL_CONFIG, seed=0)
    names = muon_parameter_names(model)
    params = dict(model.named_parameters())
    assert names and all(params[n].ndim == 2 for n in names)
    assert "icl_blocks.0.icl_attention.q_projection.weight" in names
    assert not any(n.startswith(("x_embed", "output_projection", "icl_y_encoder")) for n in names)
    assert "column_aggregator.cls_tokens" not in names
    optims = chain._optimizers(model, ChainConfig(total_steps=10))
    assert isinstance(optims[1], torch.optim.Muon)
    covered = sum(p.numel() for o in optims for g in o.param_groups for p in g["params"])
    assert covered == sum(p.numel() for p in model.parameters())


def test_wsd_is_flat_until_the_decay_and_ends_at_zero():
    cfg = ChainConfig(total_steps=1000, warmup_steps=100, decay_fraction=0.3)
    assert lr_factor(cfg, 0) == pytest.approx(0.01)
    assert lr_factor(cfg, 100) == 1.0 and lr_factor(cfg, 700) == 1.0
    assert 0 < lr_factor(cfg, 850) < 1.0
    assert lr_factor(cfg, 1000) == 0.0
    cos = ChainConfig(total_steps=1000, warmup_steps=100, schedule="cosine")
    assert lr_factor(cos, 500) < 1.0 and lr_factor(cos, 1000) == pytest.approx(0.02)


def test_a_resumed_chain_ends_bit_identical_to_an_uninterrupted_one(tmp_path):
    cfg = ChainConfig(
        total_steps=6,
        warmup_steps=2,
        decay_fraction=0.5,
        model="tiny",
        ema_decay=0.9,
        cells_per_batch=2000,
        max_tasks_per_batch=4,
    )
    kwargs = {"minutes": 5.0, "threads": 1, "evaluate_at_end": False, "log": lambda s: None}
    kwargs["log_every"] = 1
    run_link(tmp_path / "once", cfg=cfg, **kwargs)
    run_link(tmp_path / "twice", cfg=cfg, max_steps=3, **kwargs)
    log_path = tmp_path / "twice" / chain.LOG_FILE
    with log_path.open("a") as fh:  # a step logged after the last saved state, then lost
        fh.write(json.dumps({"step": 4, "loss": 1.0}) + "\n")
    run_link(tmp_path / "twice", **kwargs)
    once = torch.load(tmp_path / "once" / chain.STATE_FILE, weights_only=False)
    twice = torch.load(tmp_path / "twice" / chain.STATE_FILE, weights_only=False)
    assert once["step"] == twice["step"] == 6
    assert [link["start_step"] for link in twice["links"]] == [0, 3]
    for key in ("model", "ema"):
        for name, value in once[key].items():
            assert torch.equal(value, twice[key][name]), (key, name)
    # The average and the raw weights differ: EMA is on and moving.
    assert any(not torch.equal(once["model"][n], once["ema"][n]) for n in once["model"])
    averaged = in_prior.model_from_state(tmp_path / "once" / chain.STATE_FILE)
    for const in ("regression_borders", "column_aggregator.rope.freqs"):
        assert torch.equal(averaged.state_dict()[const], once["model"][const])
        assert torch.equal(once["ema"][const], once["model"][const])
    assert not torch.equal(averaged.x_embed.weight, once["model"]["x_embed.weight"])
    steps = [json.loads(line)["step"] for line in log_path.read_text().splitlines()]
    assert steps == [1, 2, 3, 4, 5, 6]  # the lost step 4 is logged once
    with pytest.raises(FileExistsError):
        run_link(tmp_path / "once", cfg=cfg, **kwargs)


def test_a_link_stops_on_its_cpu_budget(tmp_path):
    cfg = ChainConfig(total_steps=50, model="tiny", cells_per_batch=2000, max_tasks_per_batch=4)
    summary = run_link(
        tmp_path, cfg=cfg, minutes=5.0, cpu_minutes=0.0, evaluate_at_end=False, log=lambda s: None
    )
    assert summary["end_step"] == 0 and (tmp_path / chain.STATE_FILE).exists()


def test_cli_refuses_to_resume_nothing_or_restart_a_chain(tmp_path, capsys):
    assert chain.main(["resume", "--dir", str(tmp_path), "--minutes", "1"]) == 2
    assert not (tmp_path / "PID").exists()
    (tmp_path / chain.STATE_FILE).write_bytes(b"")
    start = ["start", "--dir", str(tmp_path), "--minutes", "1", "--total-steps", "5"]
    assert chain.main(start) == 2
    assert "use 'resume'" in capsys.readouterr().err


def test_replanning_in_the_stable_phase_changes_nothing_done_so_far(tmp_path):
    tiny = {
        "warmup_steps": 2,
        "decay_fraction": 0.25,
        "model": "tiny",
        "ema_decay": 0.9,
        "cells_per_batch": 2000,
        "max_tasks_per_batch": 4,
    }
    kwargs = {"minutes": 5.0, "threads": 1, "evaluate_at_end": False, "log": lambda s: None}
    run_link(tmp_path / "planned", cfg=ChainConfig(total_steps=8, **tiny), **kwargs)
    run_link(tmp_path / "replanned", cfg=ChainConfig(total_steps=40, **tiny), max_steps=4, **kwargs)
    run_link(tmp_path / "replanned", replan_total_steps=8, **kwargs)
    planned = torch.load(tmp_path / "planned" / chain.STATE_FILE, weights_only=False)
    replanned = torch.load(tmp_path / "replanned" / chain.STATE_FILE, weights_only=False)
    assert replanned["config"]["total_steps"] == 8 and replanned["step"] == 8
    assert replanned["replans"] == [{"at_step": 4, "total_steps": 8}]
    for name, value in planned["model"].items():
        assert torch.equal(value, replanned["model"][name]), name
    # Inside the warm-up or a decay the past would change: refused.
    cfg = ChainConfig(total_steps=100, warmup_steps=10, decay_fraction=0.25)
    for step, total in ((5, 200), (80, 200), (50, 60)):
        with pytest.raises(ValueError, match="stable phase"):
            chain.replan(cfg, step, total)
    assert chain.replan(cfg, 50, 300).total_steps == 300
    args = ["resume", "--dir", str(tmp_path / "planned"), "--minutes", "1", "--total-steps", "9"]
    assert chain.main(args) == 2
