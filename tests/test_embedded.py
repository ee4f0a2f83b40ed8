"""The embedded host: prior, pretraining command, shipped checkpoint and its SHA-256."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch
from tabpfn import TabPFNRegressor
from tabpfn.architectures import tabpfn_v3
from tabpfn.checkpoint import Checkpoint

import retrofit.models.embedded as embedded
from hostgen import card, pretrain
from hostgen.prior import PriorConfig, sample_batch, sample_task
from hostgen.train import TINY_MODEL_CONFIG, TrainConfig, batch_rng, train
from retrofit.files import sha256_file
from retrofit.models.embedded import (
    EMBEDDED_FILENAME,
    EmbeddedCheckpointError,
    embedded_model_path,
    verify_checkpoint,
)


def _linear_task(n: int, d: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) * rng.uniform(0.5, 20, size=d) + rng.normal(0, 5, size=d)
    y = (X - X.mean(0)) / X.std(0) @ rng.normal(size=d) + 0.1 * rng.normal(size=n) + 3.0
    return X, y


def _fit_predict(path, X, y, n_train: int) -> np.ndarray:
    reg = TabPFNRegressor(
        model_path=path, device="cpu", inference_precision=torch.float32, random_state=0
    )
    return reg.fit(X[:n_train], y[:n_train]).predict(X[n_train:])


# --------------------------------------------------------------------------- prior


def test_task_is_finite_shaped_and_normalised_on_context():
    for seed in range(20):
        x_ND, y_N = sample_task(np.random.default_rng(seed), n=120, d=6, num_train=90)
        assert x_ND.shape == (120, 6) and y_N.shape == (120,)
        assert np.isfinite(x_ND).all() and np.isfinite(y_N).all()
        assert abs(y_N[:90].mean()) < 1e-9
        assert y_N[:90].std() == pytest.approx(1.0, abs=1e-9) or y_N[:90].std() == 0.0


def test_batch_shapes_dtype_and_determinism():
    cfg = PriorConfig(max_rows=300)
    for step in range(10):
        batch = sample_batch(batch_rng(3, step), cfg)
        r, b, c = batch.x_RBC.shape
        assert batch.y_train_NB.shape == (batch.num_train, b)
        assert batch.y_test_TB.shape == (r - batch.num_train, b)
        assert 1 <= c <= cfg.max_features and cfg.min_rows <= r <= cfg.max_rows
        assert batch.x_RBC.dtype == torch.float32
        assert torch.isfinite(batch.x_RBC).all() and torch.isfinite(batch.y_test_TB).all()
        mean_B = batch.y_train_NB.double().mean(0)
        assert torch.allclose(mean_B, torch.zeros_like(mean_B), atol=1e-4)
    again = sample_batch(batch_rng(3, 7), cfg)
    first = sample_batch(batch_rng(3, 7), cfg)
    other = sample_batch(batch_rng(3, 8), cfg)
    assert torch.equal(again.x_RBC, first.x_RBC)
    assert again.x_RBC.shape != other.x_RBC.shape or not torch.equal(again.x_RBC, other.x_RBC)


def test_prior_is_varied_like_real_tables():
    rng = np.random.default_rng(0)
    few_values, skewed = 0, 0
    n_cols = 0
    for _ in range(60):
        x_ND, y_N = sample_task(rng, n=200, d=5, num_train=150)
        for j in range(5):
            n_cols += 1
            few_values += len(np.unique(x_ND[:, j])) <= 10
        third = np.mean(y_N[:150] ** 3)
        skewed += abs(third) > 1.0
    assert 0.05 < few_values / n_cols < 0.6  # some categorical-like columns, not all
    assert skewed >= 3  # some skewed targets


# ----------------------------------------------------------------- pretrain command


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

    X, y = _linear_task(60, 3)
    pred = _fit_predict(out, X, y, 45)
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
    assert steps == [1, 2, 3, 3, 4]  # step 3 ran twice: once lost, once kept
    assert Checkpoint(resumed).load()["training"]["resumed_at_steps"] == [2]
    assert Checkpoint(straight).load()["training"]["resumed_at_steps"] == []


def test_pretrain_rejects_a_name_tabpfn_would_read_as_v2(tmp_path):
    assert pretrain.main(["--out", str(tmp_path / "host.safetensors"), "--steps", "1"]) == 2


# ------------------------------------------------------------------ shipped checkpoint


def test_shipped_checkpoint_sha256_matches():
    path = embedded_model_path()
    assert path.name == EMBEDDED_FILENAME and "v3" in path.name
    assert sha256_file(path) == embedded.EMBEDDED_SHA256


def test_corrupted_or_missing_copy_is_rejected(tmp_path):
    copy = tmp_path / EMBEDDED_FILENAME
    shutil.copyfile(embedded_model_path(), copy)
    assert verify_checkpoint(copy, embedded.EMBEDDED_SHA256) == copy.resolve()
    data = bytearray(copy.read_bytes())
    data[len(data) // 2] ^= 0xFF
    copy.write_bytes(bytes(data))
    with pytest.raises(EmbeddedCheckpointError, match="corrupted"):
        verify_checkpoint(copy, embedded.EMBEDDED_SHA256)
    with pytest.raises(ValueError, match="missing"):
        verify_checkpoint(tmp_path / "absent_v3.safetensors", embedded.EMBEDDED_SHA256)


def test_shipped_header_is_a_complete_v3_regressor():
    header = Checkpoint(embedded_model_path()).load()
    assert header["architecture_name"] == "tabpfn_v3"
    config, unused = tabpfn_v3.parse_config(header["config"])
    assert not unused and config.num_buckets > 0 and not config.is_classification
    borders = header["state_dict"]["regression_borders"]
    assert borders.shape == (config.num_buckets + 1,) and bool((borders.diff() > 0).all())
    inference = header["inference_config"]
    assert inference["MAX_CPU_SAMPLES"] >= 5000
    assert isinstance(inference["N_ESTIMATORS"], int) and inference["N_ESTIMATORS"] >= 1


def test_shipped_host_loads_through_tabpfn_and_learns_in_context():
    X, y = _linear_task(400, 5, seed=1)
    pred = _fit_predict(embedded_model_path(), X, y, 300)
    assert pred.shape == (100,) and np.isfinite(pred).all()
    rmse = np.sqrt(np.mean((pred - y[300:]) ** 2))
    rel = rmse / np.sqrt(np.mean((y[:300].mean() - y[300:]) ** 2))
    assert rel < 0.5  # a near-linear task: far better than the train mean


def test_shipped_host_accepts_more_than_a_thousand_rows_on_cpu():
    X, y = _linear_task(1300, 4, seed=2)
    pred = _fit_predict(embedded_model_path(), X, y, 1200)
    assert pred.shape == (100,) and np.isfinite(pred).all()
