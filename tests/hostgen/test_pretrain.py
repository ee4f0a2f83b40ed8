"""The pretraining command of the embedded host: checkpoint, log, card, seed, resume."""

from __future__ import annotations

import functools
import json
import os

import numpy as np
import pytest
import torch
from tabpfn.checkpoint import Checkpoint

from hostgen import card, pretrain
from hostgen.batch_stream import batch_rng, batch_stream
from hostgen.prior import PriorConfig, sample_batch
from hostgen.train import TINY_MODEL_CONFIG, TrainConfig, train
from retrofit.files import sha256_file
from tests.helpers.regression_tasks import fit_predict, linear_task


@pytest.fixture
def _keep_threads():
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


@pytest.mark.usefixtures("_keep_threads")
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


@pytest.mark.usefixtures("_keep_threads")
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


class _InterruptedError(Exception):
    pass


@pytest.mark.usefixtures("_keep_threads")
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


@pytest.mark.usefixtures("_keep_threads")
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


def _drawn_where(rng):
    """A batch of a small prior and the process that drew it (module level: picklable)."""
    return os.getpid(), sample_batch(rng, PriorConfig(max_rows=40))


def test_worker_processes_draw_each_steps_batch_in_order():
    inline = list(batch_stream(_drawn_where, 6, 1, 6))
    helped = list(batch_stream(_drawn_where, 6, 1, 6, workers=2))
    assert {pid for pid, _ in inline} == {os.getpid()}
    assert os.getpid() not in {pid for pid, _ in helped}  # drawn by the helpers, not here
    for (_, a), (_, b) in zip(inline, helped, strict=True):
        assert torch.equal(a.x_RBC, b.x_RBC) and torch.equal(a.y_test_TB, b.y_test_TB)


def test_batch_stream_yields_each_steps_batch_in_order_and_refuses_negative_workers():
    prior = PriorConfig(max_rows=40)
    inline = list(batch_stream(functools.partial(sample_batch, cfg=prior), 5, 2, 5))
    assert len(inline) == 3
    for step, batch in zip(range(2, 5), inline, strict=True):
        assert torch.equal(batch.x_RBC, sample_batch(batch_rng(5, step), prior).x_RBC)
    with pytest.raises(ValueError, match="workers"):
        next(batch_stream(functools.partial(sample_batch, cfg=prior), 5, 0, 1, workers=-1))


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
