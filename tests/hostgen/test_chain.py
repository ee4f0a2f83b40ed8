"""The host chain: prior version 2, the in-prior metric, Muon + WSD + EMA, exact resume."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from hostgen import chain, diagnose, in_prior
from hostgen.chain import ChainConfig, lr_factor, muon_parameter_names, run_link
from hostgen.prior import (
    _LOSSY_KINDS,
    PRIOR_V2,
    PriorConfig,
    _features_v2,
    _noise_ratio_v2,
    _random_function_v2,
    sample_batch,
    sample_task,
)
from hostgen.train import DEFAULT_MODEL_CONFIG, build_model


@pytest.fixture(autouse=True)
def _keep_threads():
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


# ------------------------------------------------------------------ prior v2


def test_v2_tasks_are_seeded_finite_and_normalised():
    for seed in range(8):
        a = sample_task(np.random.default_rng(seed), 150, 5, 110, version=2)
        b = sample_task(np.random.default_rng(seed), 150, 5, 110, version=2)
        assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
        assert np.isfinite(a[0]).all() and np.isfinite(a[1]).all()
        assert abs(a[1][:110].mean()) < 1e-9
    other = sample_task(np.random.default_rng(99), 150, 5, 110, version=2)
    assert not np.array_equal(other[1], a[1])


def test_lossy_features_before_the_target_make_it_a_function_of_the_table():
    before, lossy = 0, 0
    for seed in range(40):
        rng = np.random.default_rng(seed)
        x_ND, seen_ND, lossy_D, before_D = _features_v2(rng, 300, 4)
        lossy += lossy_D.sum()
        before += before_D.sum()
        for j in np.flatnonzero(before_D):
            # Each shown value maps to one value the target reads.
            for value in np.unique(x_ND[:, j]):
                assert np.ptp(seen_ND[x_ND[:, j] == value, j]) < 1e-12
        if before_D.all():
            # A noise-free target of such inputs is a function of the rows shown.
            y_N = _random_function_v2(rng, seen_ND)
            _, inverse = np.unique(x_ND, axis=0, return_inverse=True)
            for g in np.unique(inverse):
                assert np.ptp(y_N[inverse == g]) < 1e-9
    assert lossy > 20 and before / lossy > 0.75  # most lossy features precede the target
    assert len(_LOSSY_KINDS) == 4


def test_design_of_experiments_inputs_have_few_levels():
    few = 0
    total = 0
    for seed in range(60):
        x_ND, _ = sample_task(np.random.default_rng(seed), 800, 4, 600, version=2)
        for j in range(4):
            total += 1
            few += len(np.unique(x_ND[:, j])) <= 30
    assert 0.25 < few / total < 0.9  # many designed/coded columns, not all


def test_v2_batches_favour_200_to_4000_rows():
    rows = [sample_batch(np.random.default_rng([5, i]), PRIOR_V2).x_RBC.shape[0] for i in range(60)]
    assert min(rows) >= PRIOR_V2.min_rows and max(rows) <= PRIOR_V2.max_rows
    assert np.mean([200 <= r <= 4000 for r in rows]) > 0.6


def test_v2_draws_many_low_noise_tasks_and_low_noise_is_v2_only():
    rng = np.random.default_rng(0)
    ratios = np.array([_noise_ratio_v2(rng, low_noise=False) for _ in range(2000)])
    assert 0.4 < np.mean(ratios <= 0.05) < 0.5  # version 1: about 0.21
    assert all(_noise_ratio_v2(rng, low_noise=True) <= 0.05 for _ in range(200))
    assert PRIOR_V2.version == 2
    with pytest.raises(ValueError, match="no prior version"):
        sample_task(np.random.default_rng(0), 50, 2, 30, version=1, low_noise=True)


# ------------------------------------------------------------ in-prior metric


def test_heldout_tasks_are_fixed_low_noise_and_disjoint_from_training_seeds():
    a = in_prior.heldout_tasks(3)
    b = in_prior.heldout_tasks(3)
    assert all(np.array_equal(s.x_ND, t.x_ND) for s, t in zip(a, b, strict=True))
    assert all(200 <= len(t.y_N) <= 1500 for t in a)
    with pytest.raises(ValueError, match="HELDOUT_KEY"):
        chain._new_state(ChainConfig(total_steps=1, seed=in_prior.HELDOUT_KEY, model="tiny"))


def test_in_prior_gap_of_an_untrained_host_is_worse_than_rf():
    torch.set_num_threads(1)
    model = build_model(chain._MODELS["tiny"], seed=0)
    result = in_prior.evaluate(model, num_tasks=3, num_batches=1)
    # Low-noise tasks: RF explains most of the variance; a random host does not.
    assert result["rf"] < 0.8
    assert result["gap_rf"] > 0.1 and result["host"] > result["rf"]
    assert np.isfinite(result["prior_nll"])


# -------------------------------------------------------- optimiser & schedule


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


# ------------------------------------------------------------------ diagnosis


def test_diagnosis_v1_targets_hide_behind_lossy_features_v2_do_not():
    x_ND = np.array([[0.0], [0.0], [1.0], [1.0]] * 10)
    assert diagnose.unexplainable_share(x_ND, np.arange(40.0) % 2, min_groups=2) > 0.9
    v1, v2 = diagnose._shares(1, 150), diagnose._shares(2, 150)
    assert len(v2) > len(v1) > 3  # version 2 repeats settings more often (designs)
    assert np.mean(v1) > 0.15 and np.mean(v2) < 0.05


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


def test_diagnosis_arms_differ_in_one_thing_each():
    arms = {name: dataclasses.asdict(cfg) for name, cfg in diagnose.arm_configs().items()}

    def diff(a: str, b: str) -> set[str]:
        return {k for k in arms[a] if arms[a][k] != arms[b][k]}

    tables = {"min_rows", "small_max_rows", "max_rows", "p_large"}
    tables |= {"cells_per_batch", "max_tasks_per_batch"}
    assert diff("adamw_cosine_v2", "adamw_cosine_v2_v1tables") == tables
    assert diff("adamw_cosine_v2_v1tables", "adamw_cosine_v1") == {"prior_version"}
    assert diff("adamw_wsd_v2", "muon_wsd_v2") == {"optimizer"}
    assert diff("muon_wsd_v2", "muon_wsd_v2_v1tables") == tables
    # The arms draw what they say: version 1 with the shipped host's tables.
    v1 = diagnose.arm_configs()["adamw_cosine_v1"].prior()
    assert v1.version == 1 and v1.max_rows == PriorConfig().max_rows
    assert ChainConfig(total_steps=5).prior() == PRIOR_V2
    assert ChainConfig(total_steps=5, **chain.TABLES["v2"]).prior() == PRIOR_V2


def test_weight_growth_reads_a_chain_state(tmp_path):
    cfg = ChainConfig(total_steps=3, warmup_steps=1, model="tiny", cells_per_batch=2000)
    kwargs = {"minutes": 5.0, "evaluate_at_end": False, "log": lambda s: None}
    run_link(tmp_path, cfg=dataclasses.replace(cfg, max_tasks_per_batch=4), **kwargs)
    growth = diagnose.weight_growth(tmp_path / chain.STATE_FILE)
    assert growth["state_step"] == 3 and growth["optimizer"] == "muon"
    moved = [g for g in ("attention_projections", "mlps") if growth[g]["matrices"]]
    assert moved and all(growth[g]["state_rms"] != growth[g]["init_rms"] for g in moved)


def test_paired_difference_compares_the_same_steps_only(tmp_path):
    def write(name: str, rows: list[tuple[int, float]]) -> Path:
        path = tmp_path / name
        path.write_text("".join(json.dumps({"step": s, "loss": v}) + "\n" for s, v in rows))
        return path

    a = write("a.jsonl", [(25, 1.0), (50, 2.0), (525, 0.5)])
    b = write("b.jsonl", [(25, 1.5), (50, 1.0), (75, 9.0)])
    diff = diagnose.paired_difference(a, b)
    assert diff == {"1-500": {"mean": 0.25, "logged_steps": 2}}


def test_report_pairs_runs_that_draw_the_same_batches(tmp_path):
    tiny = ChainConfig(total_steps=2, warmup_steps=1, model="tiny", cells_per_batch=2000)
    tiny = dataclasses.replace(tiny, max_tasks_per_batch=4)
    kwargs = {"minutes": 5.0, "evaluate_at_end": False, "log_every": 1, "log": lambda s: None}
    run_link(tmp_path / "failed", cfg=tiny, **kwargs)
    run_link(tmp_path / "chain", cfg=dataclasses.replace(tiny, optimizer="adamw"), **kwargs)
    result = diagnose.report(
        tmp_path / "arms", tmp_path / "chain", tmp_path / "failed", None, learnability_batches=1
    )
    assert set(result["runs"]) == {"link1_failed", "chain"}
    assert result["runs"]["chain"]["last_step"] == 2
    paired = result["paired_loss_same_batches"]["link1_failed minus chain"]
    assert paired["1-500"]["logged_steps"] == 2
    assert result["weight_growth"]["chain"]["optimizer"] == "adamw"
