"""The regressor host's pretraining command: checkpoint, log, card, seed, refusals."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from tabpfn.checkpoint import Checkpoint

from hosttraining.regression import card, pretrain
from retrofit.files import sha256_file
from tests.helpers.commands import one_prog_error_line
from tests.helpers.regression_tasks import fit_predict, linear_task


def test_short_pretrain_writes_a_checkpoint_tabpfn_loads_and_resumes(tmp_path, capsys):
    out = tmp_path / "tiny_v3_test.safetensors"
    common = ["--out", str(out), "--model", "tiny", "--max-rows", "80", "--log-every", "1"]
    assert pretrain.main([*common, "--steps", "3", "--seed", "1"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["steps_done"] == 3 and summary["sha256"] == sha256_file(out)
    assert out.with_name(out.name + ".sha256").read_text().split()[0] == sha256_file(out)
    log_lines = out.with_name(out.name + ".log.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in log_lines] == [1, 2, 3]

    header = Checkpoint(out).load()
    assert header["architecture_name"] == "tabpfn_v3"
    assert header["training"]["steps_done"] == 3 and header["training"]["seed"] == 1
    assert "regression_borders" in header["state_dict"]

    X, y = linear_task(60, 3)
    pred = fit_predict(out, X, y, 45)
    assert pred.shape == (15,) and np.isfinite(pred).all()

    # Started again with more steps it resumes from the state file.
    assert pretrain.main([*common, "--steps", "5", "--seed", "1"]) == 0
    trained = Checkpoint(out).load()
    assert trained["training"]["steps_done"] == 5

    # Rewriting only the inference config keeps weights and training record.
    flags = ["--n-estimators", "3", "--preprocessing", "none", "--no-append-original"]
    flags += ["--softmax-temperature", "0.9"]
    assert pretrain.main([*common, *flags, "--set-inference-config-only"]) == 0
    rewritten = Checkpoint(out).load()
    assert rewritten["training"] == {**trained["training"], "inference_config_rewritten": True}
    assert rewritten["inference_config"]["N_ESTIMATORS"] == 3
    assert rewritten["inference_config"]["PREPROCESS_TRANSFORMS"][0]["name"] == "none"
    assert rewritten["inference_config"]["SOFTMAX_TEMPERATURE"] == 0.9
    for key, value in trained["state_dict"].items():
        assert torch.equal(value, rewritten["state_dict"][key])
    assert out.with_name(out.name + ".sha256").read_text().split()[0] == sha256_file(out)


def test_pretrain_regenerates_bit_identical_weights_from_the_seed(tmp_path, capsys):
    # The model card promises this: the schedule depends on steps only, batches on (seed, step).
    def run(name: str, seed: int) -> dict[str, torch.Tensor]:
        out = tmp_path / name / "tiny_v3_test.safetensors"
        out.parent.mkdir()
        flags = ["--model", "tiny", "--max-rows", "80", "--steps", "4", "--threads", "1"]
        assert pretrain.main(["--out", str(out), *flags, "--seed", str(seed)]) == 0
        header = Checkpoint(out).load()
        assert header["training"]["stopped_by"] == "steps"
        assert header["training"]["time_aware_schedule"] is False
        return header["state_dict"]

    first, again, other = run("a", 3), run("b", 3), run("c", 4)
    assert all(torch.equal(first[k], again[k]) for k in first)
    assert not all(torch.equal(first[k], other[k]) for k in first)
    capsys.readouterr()

    # The generated card gives the command that regenerates the run, and says so.
    out = tmp_path / "a" / "tiny_v3_test.safetensors"
    card_md = tmp_path / "a" / "MODEL_CARD.md"
    log = out.with_name(out.name + ".log.jsonl")
    card.write_card(out, log, tmp_path / "absent.json", tmp_path / "absent", card_md)
    text = card_md.read_text()
    assert "--seed 3 --steps 4 --minutes 110.0 --threads 1 --p-large 0.3" in text
    assert "a run that finishes by steps is reproducible from the seed" in text
    assert "4 of 4 planned steps (stopped by steps)" in text
    assert card_md.with_name("loss_curve.png").stat().st_size > 0


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--device", "cuda:0"], "no CUDA device"),
        (["--device", "tpu9"], "--device"),
        (["--workers", "-1"], "--workers"),
    ],
)
def test_pretrain_refuses_an_unusable_device_or_worker_count(tmp_path, capsys, flags, message):
    if flags[:2] == ["--device", "cuda:0"] and torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    argv = ["--out", str(tmp_path / "host_v3.safetensors"), "--steps", "1", *flags]
    assert pretrain.main(argv) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "host_v3.safetensors").exists()


def test_pretrain_rejects_a_name_tabpfn_would_read_as_v2(tmp_path):
    assert pretrain.main(["--out", str(tmp_path / "host.safetensors"), "--steps", "1"]) == 2


def test_the_recipe_trains_on_the_mixed_prior_resumes_and_scores_its_held_out_curve(
    tmp_path, capsys
):
    out = tmp_path / "reg_v3.safetensors"
    common = ["--out", str(out), "--model", "tiny", "--threads", "1", "--log-every", "1",
              "--prior", "mix", "--tabicl-share", "0.5", "--tables", "2", "--min-rows", "60",
              "--max-rows", "100", "--test-rows", "20", "--max-features", "4",
              "--optimizer", "muon", "--grad-clip", "2", "--lawa-every", "1", "--lawa-keep", "2",
              "--nlayers", "2", "--eval-tasks", "1", "--checkpoint-minutes", "0"]  # fmt: skip
    assert pretrain.main([*common, "--steps", "2"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["prior_source"] == "mix" and summary["optimizer"] == "muon"
    assert summary["prior"]["tabicl_share"] == 0.5 and summary["grad_clip"] == 2.0
    assert "--prior mix" in summary["command"] and str(tmp_path) not in summary["command"]
    header = Checkpoint(out).load()
    assert header["config"]["nlayers"] == 2 and header["training"]["prior_source"] == "mix"
    assert Checkpoint(out.with_name("reg_v3.lawa.safetensors")).load()["training"]["lawa"]
    baselines_file = out.with_name(out.name + ".heldout_baselines.json")
    baselines = json.loads(baselines_file.read_text())
    assert {s: set(baselines[s]) for s in ("project", "tabicl")} == {
        "project": {"ridge", "rf", "hgb"}, "tabicl": {"ridge", "rf", "hgb"}
    }  # fmt: skip
    first_baselines = baselines_file.read_text()

    # Started again with more steps it resumes; the curve goes on, the baselines stay.
    assert pretrain.main([*common, "--steps", "3"]) == 0
    assert "resumed from" in capsys.readouterr().err
    assert Checkpoint(out).load()["training"]["resumed_at_steps"] == [2]
    evals = [json.loads(x) for x in out.with_name(out.name + ".evals.jsonl").open()]
    assert [(e["step"], e["weights"]) for e in evals] == [
        (1, "raw"), (1, "lawa"), (2, "raw"), (2, "lawa"), (3, "raw"), (3, "lawa")
    ]  # fmt: skip
    assert all(np.isfinite(e[s]["rel_rmse"]) for e in evals for s in ("project", "tabicl"))
    assert baselines_file.read_text() == first_baselines
    log = [json.loads(x) for x in out.with_name(out.name + ".log.jsonl").open()]
    assert [r["tasks_seen"] for r in log] == [2, 4, 6]  # two tables a step


def test_pretrain_refuses_a_tabicl_share_outside_zero_to_one(tmp_path, capsys):
    argv = ["--out", str(tmp_path / "host_v3.safetensors"), "--steps", "1", "--prior", "mix",
            "--tabicl-share", "1.5"]  # fmt: skip
    assert pretrain.main(argv) == 2
    assert "--tabicl-share" in capsys.readouterr().err
    assert not (tmp_path / "host_v3.safetensors").exists()


def test_a_usage_error_is_one_line_on_stderr_and_exit_2(capsys):
    assert pretrain.main(["--no-such-option"]) == 2
    one_prog_error_line(capsys.readouterr().err, "python -m hosttraining.regression.pretrain")
