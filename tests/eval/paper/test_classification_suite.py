"""The offline classification suite: its data, its metrics, its runs and its report.

Runs use a tiny perturbed v3 classifier checkpoint (``ManyClassDecoder``, up
to 10 classes) and one case cut to a few rows, so each fit takes a fraction of
a second.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from eval.paper.classification_report import (
    CLASSIFICATION_CASE_COLUMNS,
    build_classification_report,
)
from eval.paper.command import suite_checkpoint
from eval.paper.datasets import (
    OFFLINE_CLS6_DATASETS,
    SEEDS,
    SUITES_DIR,
    Case,
    load_dataset,
    split,
    suite_cases,
)
from eval.paper.estimators import classification_metrics
from eval.paper.execution import run_suite
from eval.paper.spec import RunSpec, make_tasks
from eval.paper.store import load_records
from retrofit.models.embedded import embedded_model_path
from tests.helpers.run_records import run_record, write_run_file
from tests.helpers.tiny_models import tiny_v3_classifier_checkpoint

# (rows, features, class counts), read from the files by the code that wrote the suite file.
EXPECTED = {
    "breast_cancer": (569, 30, [212, 357]),
    "wine": (178, 13, [59, 71, 48]),
    "vehicle": (846, 18, [218, 212, 217, 199]),
    "glass": (214, 9, [70, 76, 17, 13, 9, 29]),
    "segment": (2310, 19, [330] * 7),
    "digits": (1797, 64, [178, 182, 177, 183, 181, 182, 181, 179, 174, 180]),
}


@pytest.fixture(scope="module")
def classifier_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_v3_classifier_checkpoint(tmp_path_factory.mktemp("tiny_classifier"))


def test_six_datasets_with_two_to_ten_classes_and_their_recorded_counts() -> None:
    assert OFFLINE_CLS6_DATASETS == tuple(EXPECTED)
    manifest = json.loads((SUITES_DIR / "offline_cls6.json").read_text(encoding="utf-8"))
    assert manifest["task"] == "classification" and manifest["seeds"] == list(SEEDS)
    for entry in manifest["datasets"]:
        rows, features, counts = EXPECTED[entry["name"]]
        assert entry["shape"] == [rows, features] and entry["class_counts"] == counts
        ds = load_dataset(entry["name"])  # verified against the file's SHA-256
        assert len(ds.classes) == len(counts)
        assert np.bincount(ds.y.astype(int)).tolist() == counts


def test_the_scikit_learn_copies_equal_scikit_learn_s_loaders() -> None:
    from sklearn import datasets

    loaders = {"breast_cancer": datasets.load_breast_cancer, "wine": datasets.load_wine,
               "digits": datasets.load_digits}  # fmt: skip
    for name, loader in loaders.items():
        bunch, ds = loader(), load_dataset(name)
        np.testing.assert_array_equal(ds.X, bunch.data)
        np.testing.assert_array_equal(ds.y, bunch.target)


def test_the_split_is_stratified_so_every_class_is_in_both_parts() -> None:
    ds = load_dataset("glass")  # a class of 9 rows
    for seed in SEEDS:
        _, _, y_train, y_test = split(ds, seed)
        assert set(y_train) == set(y_test) == set(range(len(ds.classes)))
        assert len(y_test) == 54


def test_suite_cases_are_every_dataset_under_every_seed() -> None:
    assert suite_cases("offline_cls6") == [Case(n, s) for n in EXPECTED for s in SEEDS]


def test_regression_run_keys_are_those_of_before_the_classification_suite() -> None:
    # The key of a fully specified offline18 spec, computed before this suite
    # existed: the committed regression runs keep their keys (and are reused).
    spec = RunSpec(
        suite="offline18", dataset="airfoil", seed=1, mode="full-o", tau=1.0, support="count",
        eps_den=1e-6, n_estimators=4, checkpoint_sha256="c" * 64, data_sha256="d" * 64,
        code_sha256="e" * 64, cpu="test cpu", versions={"tabpfn": "9.2.0"},
    )  # fmt: skip
    assert spec.key == "9f73fc0385ae4b469b1da821a4ac696faad589c03b0cc843b8ee4ff24330f4dd"
    assert load_dataset("airfoil").sha256.startswith("1b8791cc8eb9")


def test_macro_one_vs_rest_auc_is_scikit_learn_s_and_binary_auc_for_two_classes() -> None:
    rng = np.random.default_rng(0)
    y = np.repeat([0.0, 1.0, 2.0], 20)
    proba = rng.dirichlet(np.ones(3), size=60)
    got = classification_metrics(proba, np.array([0.0, 1.0, 2.0]), y)
    assert got["roc_auc"] == pytest.approx(roc_auc_score(y, proba, multi_class="ovr"), abs=1e-12)
    assert got["accuracy"] == np.mean(np.argmax(proba, axis=1) == y)
    binary = np.column_stack([1 - proba[:40, 0], proba[:40, 0]])
    got = classification_metrics(binary, np.array([0.0, 1.0]), y[:40])
    assert got["roc_auc"] == pytest.approx(roc_auc_score(y[:40], binary[:, 1]), abs=1e-12)


def _tasks(path: Path, modes: tuple[str, ...]) -> list:
    return make_tasks(
        suite="offline_cls6", model_path=path, modes=modes, datasets=["wine"], seeds=[0],
        n_estimators=1, threads=1, max_train_rows=60, max_test_rows=30,
    )  # fmt: skip


def test_a_regressor_checkpoint_is_refused_for_a_classification_suite(tiny_v3_path: Path) -> None:
    with pytest.raises(ValueError, match="not a classifier"):
        _tasks(tiny_v3_path, ("none",))


def test_embedded_names_the_shipped_classifier_for_a_classification_suite() -> None:
    """``eval --suite offline_cls6 --model embedded`` runs the classifier, not the regressor."""
    assert str(suite_checkpoint("embedded", "offline_cls6")) == embedded_model_path("classifier")
    assert str(suite_checkpoint("embedded", "offline18")) == embedded_model_path("regressor")
    assert str(suite_checkpoint("embedded")) == embedded_model_path("regressor")


def test_the_classifier_runs_through_the_runner_and_both_retrofits_move_its_log_loss(
    classifier_path: Path, tmp_path: Path
) -> None:
    tasks = _tasks(classifier_path, ("none", "oattention", "full-o"))
    summary = run_suite(tasks, tmp_path, progress=False)
    assert (summary.computed, summary.failed, summary.nonfinite) == (3, 0, 0)
    runs = {r.mode: r for r in load_records(tmp_path)}
    for run in runs.values():
        assert run.ok, run.error
        assert "rmse" not in run.to_json() and (run.n_train, run.n_test) == (60, 30)
        assert 0.0 < run.log_loss < 10.0 and 0.0 <= run.accuracy <= 1.0
        assert 0.0 <= run.roc_auc <= 1.0
    for mode in ("oattention", "full-o"):  # a real patch changes the output
        assert runs[mode].log_loss != runs["none"].log_loss
        assert runs[mode].baseline_key == runs["none"].key
    assert run_suite(tasks, tmp_path, progress=False).skipped == 3  # read back, not recomputed
    text = build_classification_report(tmp_path, "offline_cls6", tau=1.0, partial=True)[
        "summary.md"
    ]
    assert "| OAttention | 1 |" in text.read_text(encoding="utf-8")


def test_the_report_pairs_each_retrofit_with_its_unpatched_case(tmp_path: Path) -> None:
    base = {"suite": "offline_cls6", "dataset": "wine", "seed": 0}
    runs = [
        {**base, "key": "k0", "baseline_key": "k0", "mode": "none",
         "log_loss": 0.5, "accuracy": 0.8, "roc_auc": 0.9},
        {**base, "key": "k1", "baseline_key": "k0", "mode": "full-o", "tau": 1.0,
         "support": "count", "eps_den": 1e-6, "log_loss": 0.51, "accuracy": 0.78, "roc_auc": 0.9},
    ]  # fmt: skip
    for fields in runs:
        write_run_file(tmp_path, run_record(**fields))
    written = build_classification_report(tmp_path, "offline_cls6", tau=1.0, partial=True)
    lines = written["cases.csv"].read_text(encoding="utf-8").splitlines()
    assert lines[0].split(",") == list(CLASSIFICATION_CASE_COLUMNS)
    summary = written["summary.md"].read_text(encoding="utf-8")
    assert "| Full-O | 1 | +2.000 % | +2.000 % | -2.000 pp | +0.0000 pp | 1 | 0 |" in summary


def _classification_store(path: Path, log_loss_full_o: float) -> Path:
    """One offline_cls6 case: unpatched log loss 0.5, Full-O ``log_loss_full_o``."""
    base = {"suite": "offline_cls6", "dataset": "wine", "seed": 0, "tau": 1.0,
            "support": "count", "eps_den": 1e-6, "accuracy": 0.8, "roc_auc": 0.9,
            "baseline_key": "k0"}  # fmt: skip
    runs = [
        {**base, "key": "k0", "mode": "none", "tau": None, "support": None, "eps_den": None,
         "log_loss": 0.5},
        {**base, "key": "k1", "mode": "full-o", "log_loss": log_loss_full_o},
    ]  # fmt: skip
    for fields in runs:
        write_run_file(path, run_record(**fields))
    return path


def test_the_classification_report_prints_its_table_beside_the_committed_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``report --committed`` was ignored for a classification suite (not for a regression one)."""
    from eval.cli import main

    mine = _classification_store(tmp_path / "mine", 0.51)
    committed = _classification_store(tmp_path / "committed", 0.505)
    argv = ["report", "--suite", "offline_cls6", "--store", str(mine), "--tau", "1", "--partial"]
    assert main([*argv, "--committed", str(committed)]) == 0
    out = capsys.readouterr().out
    assert f"this store ({mine}) beside the committed table ({committed})" in out
    (row,) = [line for line in out.splitlines() if line.startswith("| Full-O | 1 / 1 |")]
    assert row.split(" | ")[2:4] == ["+2.000 %", "+1.000 %"]  # log loss mean, yours / committed
    # Full-O's log loss differs, and its change, mean and median with it: 4 of 8 summary
    # numbers and 9 per-case ones (the baseline's 3 metrics, Full-O's 3 and 3 changes).
    assert "4 of the 17 numbers of the two tables (summary and per case) differ" in out
    (cell,) = [line for line in out.splitlines() if line.startswith("| wine/0 | log_loss Full-O |")]
    assert cell.split(" | ")[2:6] == ["0.51", "0.505", "+0.005", "+9.90e-03 |"]
    assert "in each column: log loss mean 1.00e+00 (Full-O), " in out
    assert "log_loss Full-O 9.90e-03 (wine/0)." in out
    assert "The two tables' runs share one run context" in out
    assert main([*argv, "--committed", "none"]) == 0
    assert "(not compared with a committed table: --committed none)" in capsys.readouterr().out
