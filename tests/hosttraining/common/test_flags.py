"""The training commands' shared flags: recipe defaults are the old recipe's, sizes apply."""

from __future__ import annotations

import argparse
import dataclasses

from hosttraining.common.flags import (
    add_recipe_arguments,
    add_table_arguments,
    command_line,
    sized_model_config,
    table_shape,
    train_config,
)
from hosttraining.common.loop import TINY_MODEL_CONFIG, TrainConfig
from hosttraining.priors.tabicl import TabICLPriorConfig


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser()
    for flag, value in (("--steps", 40), ("--minutes", 5.0), ("--lr", 1e-3),
                        ("--warmup-steps", 300), ("--seed", 0), ("--threads", 1),
                        ("--log-every", 10), ("--checkpoint-minutes", 1.0)):  # fmt: skip
        p.add_argument(flag, type=type(value), default=value)
    add_recipe_arguments(p)
    add_table_arguments(p, which="t", max_rows=None, max_rows_help="rows")
    return p


def test_without_recipe_flags_the_train_config_is_the_loops_default_recipe() -> None:
    cfg = train_config(_parser().parse_args([]), "cpu", 0)
    default = TrainConfig()
    for field in ("optimizer", "muon_lr", "grad_clip", "lawa_every", "lawa_keep",
                  "time_aware_schedule", "weight_decay"):  # fmt: skip
        assert getattr(cfg, field) == getattr(default, field), field
    assert cfg.warmup_steps == 4  # a tenth of a short run
    assert cfg.checkpoint_every_s == 60.0


def test_recipe_size_and_table_flags_reach_the_configs() -> None:
    argv = ["--optimizer", "muon", "--grad-clip", "2", "--lawa-every", "150", "--lawa-keep", "3",
            "--time-aware-schedule", "--nlayers", "8", "--embed-dim", "48", "--tables", "1",
            "--test-rows", "64"]  # fmt: skip
    args = _parser().parse_args(argv)
    cfg = train_config(args, "cpu", 2)
    assert (cfg.optimizer, cfg.grad_clip, cfg.lawa_every, cfg.lawa_keep) == ("muon", 2.0, 150, 3)
    assert cfg.time_aware_schedule and cfg.workers == 2
    sized = sized_model_config(TINY_MODEL_CONFIG, args)
    assert (sized["nlayers"], sized["embed_dim"]) == (8, 48)
    assert TINY_MODEL_CONFIG["nlayers"] == 1  # the preset is not changed
    shape = table_shape(args, max_rows=700)
    assert shape == dataclasses.replace(TabICLPriorConfig(), tables=1, test_rows=64, max_rows=700)


def test_the_recorded_command_keeps_only_the_outputs_file_name() -> None:
    line = command_line("pkg.mod", ["--out", "/some/dir/x_v3.safetensors", "--seed", "1"])
    assert line == "python -m pkg.mod --out x_v3.safetensors --seed 1"
