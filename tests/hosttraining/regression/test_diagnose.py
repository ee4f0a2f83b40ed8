"""The diagnosis of the chain's first link: lossy features, arms, weight growth, pairing."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np

from hosttraining.priors.regression import (
    PRIOR_V2,
    PriorConfig,
)
from hosttraining.regression import chain, diagnose
from hosttraining.regression.chain import ChainConfig, run_link


def test_diagnosis_v1_targets_hide_behind_lossy_features_v2_do_not():
    x_ND = np.array([[0.0], [0.0], [1.0], [1.0]] * 10)
    assert diagnose.unexplainable_share(x_ND, np.arange(40.0) % 2, min_groups=2) > 0.9
    v1, v2 = diagnose._shares(1, 150), diagnose._shares(2, 150)
    assert len(v2) > len(v1) > 3  # version 2 repeats settings more often (designs)
    assert np.mean(v1) > 0.15 and np.mean(v2) < 0.05


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
