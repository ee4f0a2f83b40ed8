"""The speedrun's recipe in the trainer: TabICL's prior, Muon + AdamW, LAWA, resume, the curve."""

from __future__ import annotations

import dataclasses
import json
import random
from pathlib import Path

import numpy as np
import pytest
import torch
from sklearn.ensemble import RandomForestClassifier
from tabpfn.checkpoint import Checkpoint

from hostgen import class_curve, temperature, train_classifier
from hostgen.averaging import average_state_dicts, lawa_update
from hostgen.class_prior import IGNORE
from hostgen.in_prior import HELDOUT_KEY
from hostgen.optim import build_optimizers, muon_parameter_names
from hostgen.tabicl_prior import TabICLPriorConfig, heldout_tabicl_tasks, sample_tabicl_batch
from hostgen.train import TrainConfig, build_model, lawa_path, save_checkpoint, train
from hostgen.train_classifier import TINY_CLASSIFIER_CONFIG, ClassificationObjective

SMALL = TabICLPriorConfig(min_rows=60, max_rows=100, test_rows=20, max_features=6)


@pytest.fixture
def _keep_threads():
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


class _InterruptedError(Exception):
    pass


def test_tabicl_batches_are_well_formed_seeded_by_the_step_alone_and_leave_global_rngs() -> None:
    np.random.seed(5)
    random.seed(5)
    torch.manual_seed(5)
    before = (np.random.get_state()[1].copy(), random.getstate(), torch.get_rng_state())
    for i in range(3):
        batch = sample_tabicl_batch(np.random.default_rng([9, i]), SMALL)
        rows, tables, features = batch.x_RBC.shape
        assert tables == SMALL.tables and 1 <= features <= SMALL.max_features
        assert SMALL.min_rows <= rows <= SMALL.max_rows
        assert batch.num_train == rows - SMALL.test_rows and batch.y_test_TB.shape == (20, 2)
        assert batch.x_RBC.dtype == torch.float32 and torch.isfinite(batch.x_RBC).all()
        assert batch.y_test_TB.dtype == torch.int64
        for b, k in enumerate(batch.n_classes_B):
            assert 2 <= k <= SMALL.max_classes
            context = batch.y_train_NB[:, b].long()
            assert sorted(context.unique().tolist()) == list(range(k))
            query = batch.y_test_TB[:, b]
            assert ((query == IGNORE) | ((query >= 0) & (query < k))).all()
    after = (np.random.get_state()[1], random.getstate(), torch.get_rng_state())
    assert np.array_equal(before[0], after[0]) and before[1] == after[1]
    assert torch.equal(before[2], after[2])
    for other in (6, 7):  # whatever the global generators hold, the step's batch is the same
        np.random.seed(other)
        random.seed(other)
        torch.manual_seed(other)
        again = sample_tabicl_batch(np.random.default_rng([9, 2]), SMALL)
        assert torch.equal(again.x_RBC, batch.x_RBC)
        assert torch.equal(again.y_test_TB, batch.y_test_TB)


def test_tabicl_tables_carry_signal_a_random_forest_finds() -> None:
    """The tooling check of DESIGN section 7: the tables must teach something."""
    cfg = TabICLPriorConfig(min_rows=200, max_rows=300, test_rows=80, max_features=8)
    forest, majority = [], []
    for i in range(4):
        batch = sample_tabicl_batch(np.random.default_rng([11, i]), cfg)
        n = batch.num_train
        for b in range(batch.x_RBC.shape[1]):
            x_ND = batch.x_RBC[:, b].numpy()
            y_tr, y_te = batch.y_train_NB[:, b].long().numpy(), batch.y_test_TB[:, b].numpy()
            keep = y_te != IGNORE
            rf = RandomForestClassifier(n_estimators=50, random_state=0, n_jobs=1)
            forest.append(rf.fit(x_ND[:n], y_tr).score(x_ND[n:][keep], y_te[keep]))
            majority.append(np.mean(y_te[keep] == np.bincount(y_tr).argmax()))
    assert np.mean(forest) > np.mean(majority) + 0.15, (np.mean(forest), np.mean(majority))


def test_muon_takes_the_hidden_matrices_and_adamw_the_rest_each_parameter_once() -> None:
    model = build_model(TINY_CLASSIFIER_CONFIG, seed=0)
    adamw, muon = build_optimizers(
        model, "muon", adam_lr=1e-3, muon_lr=2e-3, weight_decay=0.01, muon_adjust_lr="original"
    )
    ids = [id(p) for opt in (adamw, muon) for g in opt.param_groups for p in g["params"]]
    assert len(ids) == len(set(ids)) and set(ids) == {id(p) for p in model.parameters()}
    hidden = dict(model.named_parameters())
    muon_ids = {id(p) for g in muon.param_groups for p in g["params"]}
    assert muon_ids == {id(hidden[n]) for n in muon_parameter_names(model)}
    assert all(p.ndim == 2 for g in muon.param_groups for p in g["params"])
    assert not any(
        n.startswith(("x_embed.", "icl_y_encoder.")) for n in muon_parameter_names(model)
    )
    assert [g["peak_lr"] for g in muon.param_groups] == [2e-3]
    (only,) = build_optimizers(model, "adamw", adam_lr=1e-3, muon_lr=0.0, weight_decay=0.0)
    assert sum(len(g["params"]) for g in only.param_groups) == len(list(model.parameters()))
    with pytest.raises(ValueError, match="unknown optimizer"):
        build_optimizers(model, "sgd", adam_lr=1e-3, muon_lr=0.0, weight_decay=0.0)


def test_lawa_average_is_the_mean_of_the_snapshots_and_keeps_the_last_window() -> None:
    gen = torch.Generator().manual_seed(0)
    snaps = [{"w": torch.randn(3, 4, generator=gen), "n": torch.tensor([i])} for i in range(3)]
    avg = average_state_dicts(snaps)
    expected = (snaps[0]["w"].double() + snaps[1]["w"].double() + snaps[2]["w"].double()) / 3
    assert torch.equal(avg["w"], expected.float()) and avg["w"].dtype == torch.float32
    assert torch.equal(avg["n"], torch.tensor([2]))  # integers: the newest snapshot's
    with pytest.raises(ValueError, match="different keys"):
        average_state_dicts([snaps[0], {"w": snaps[1]["w"]}])
    model = torch.nn.Linear(2, 2)
    window: list[dict[str, torch.Tensor]] = []
    for i in range(4):
        with torch.no_grad():
            model.weight.fill_(float(i))
        window = lawa_update(window, model, keep=2)
    assert [float(s["weight"][0, 0]) for s in window] == [2.0, 3.0]


def _recipe(**kw: float) -> TrainConfig:
    return TrainConfig(
        steps=4, warmup_steps=1, seed=3, threads=1, log_every=1, optimizer="muon",
        grad_clip=2.0, lawa_every=1, lawa_keep=3, **kw,
    )  # fmt: skip


@pytest.mark.usefixtures("_keep_threads")
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


@pytest.mark.usefixtures("_keep_threads")
def test_the_classifier_command_trains_on_tabicl_and_writes_its_held_out_curve(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "cls_v3.safetensors"
    argv = ["--out", str(out), "--model", "tiny", "--steps", "2", "--log-every", "1",
            "--init-from", "none", "--prior", "tabicl", "--min-rows", "60", "--max-rows", "100",
            "--test-rows", "20", "--max-features", "6", "--optimizer", "muon",
            "--lawa-every", "1", "--eval-tasks", "2", "--checkpoint-minutes", "0"]  # fmt: skip
    assert train_classifier.main(argv) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["prior_source"] == "tabicl" and summary["optimizer"] == "muon"
    evals = [json.loads(x) for x in out.with_name(out.name + ".evals.jsonl").open()]
    assert [(e["step"], e["weights"]) for e in evals] == [
        (1, "raw"), (1, "lawa"), (2, "raw"), (2, "lawa")
    ]  # fmt: skip
    assert all(np.isfinite(e[s]["log_loss"]) for e in evals for s in ("project", "tabicl"))
    baselines = json.loads(out.with_name(out.name + ".heldout_baselines.json").read_text())
    assert set(baselines["tabicl"]) == {"prior", "logreg", "rf"}
    log = [json.loads(x) for x in out.with_name(out.name + ".log.jsonl").open()]
    assert [r["tasks_seen"] for r in log] == [2, 4] and all("loss" in r for r in log)

    png = tmp_path / "curve.png"
    assert class_curve.main(["--checkpoint", str(out), "--png", str(png)]) == 0
    series = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    raw = series["suites"]["tabicl"]["raw"]
    assert raw["tasks_seen"] == [2, 4]
    assert raw["log_loss"] == [e["tabicl"]["log_loss"] for e in evals if e["weights"] == "raw"]
    assert series["baselines"]["tabicl"]["logreg"] == baselines["tabicl"]["logreg"]["log_loss"]
    assert png.stat().st_size > 0
    out.with_name(out.name + ".evals.jsonl").unlink()
    assert class_curve.main(["--checkpoint", str(out), "--png", str(png)]) == 2
    assert "--eval-tasks" in capsys.readouterr().err


def test_the_fitted_temperature_recovers_the_one_the_labels_were_drawn_at() -> None:
    gen = torch.Generator().manual_seed(1)
    logits = []
    for _ in range(4):
        z_TK = torch.randn(2000, 4, generator=gen, dtype=torch.float64) * 2.0
        y_T = torch.multinomial(torch.softmax(z_TK, dim=-1), 1, generator=gen)[:, 0].numpy()
        logits.append((3.0 * z_TK, y_T))  # overconfident by a factor 3
    fitted = temperature.fit_temperature(logits)
    assert abs(fitted - 3.0) < 0.3, fitted
    assert temperature.mean_log_loss(logits, fitted) < temperature.mean_log_loss(logits, 1.0)


def test_the_temperature_command_fits_on_held_out_tabicl_tasks_and_stores_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "cls_v3.safetensors"
    model = build_model(TINY_CLASSIFIER_CONFIG, seed=0)
    record = {"prior_source": "tabicl", "prior": dataclasses.asdict(SMALL)}
    save_checkpoint(model, TINY_CLASSIFIER_CONFIG, path, extra=record)
    before = Checkpoint(path).load()
    assert temperature.main(["--checkpoint", str(path), "--count", "2", "--write"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["tasks"] == 2 and result["log_loss_fitted"] <= result["log_loss_at_1"]
    after = Checkpoint(path).load()
    assert after["inference_config"]["SOFTMAX_TEMPERATURE"] == result["temperature"] != 1.0
    assert all(
        torch.equal(before["state_dict"][k], after["state_dict"][k]) for k in before["state_dict"]
    )
    curve = heldout_tabicl_tasks(2, SMALL, HELDOUT_KEY)
    fitted_on = temperature.calibration_tasks(record, 2)
    assert not any(np.array_equal(a[0], b[0]) for a in curve for b in fitted_on)
