"""The typed run record reads every committed run file as it is and writes it back unchanged."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from eval.errors import StoreError
from eval.paper.record import SPEC_FIELDS, RunRecord, SessionRecord
from eval.paper.spec import RunSpec
from eval.paper.store import iter_sessions, load_records, read_record, write_record
from retrofit.files import read_json
from retrofit.versions import NUMERIC_PACKAGES
from tests.helpers.commands import ROOT
from tests.helpers.run_records import run_record

COMMITTED = [ROOT / "results" / "offline18", ROOT / "results" / "offline_cls6"]
_DISTRIBUTION = {name.replace("-", "_"): name for name in NUMERIC_PACKAGES}


def test_the_record_holds_every_field_of_the_run_spec_but_its_versions_by_name() -> None:
    names = [f.name for f in dataclasses.fields(RunSpec)]
    assert names[-1] == "versions" and tuple(names[:-1]) == SPEC_FIELDS


@pytest.mark.parametrize("store", COMMITTED, ids=lambda p: p.name)
def test_every_committed_run_file_reads_and_writes_back_the_same_object(store: Path) -> None:
    files = sorted((store / "runs").glob("*.json"))
    assert len(files) >= 54
    for path in files:
        stored = read_json(path)
        record = RunRecord.from_json(stored)
        assert record.extra == {}, path  # every field of the file has its place
        written = record.to_json()
        assert written == stored and list(written) == list(stored), path


@pytest.mark.parametrize("store", COMMITTED, ids=lambda p: p.name)
def test_a_committed_run_s_key_is_the_hash_of_the_spec_its_record_holds(store: Path) -> None:
    for record in load_records(store):
        versions = {_DISTRIBUTION[name]: value for name, value in record.versions}
        spec = RunSpec(**{name: getattr(record, name) for name in SPEC_FIELDS}, versions=versions)
        assert spec.key == record.key


@pytest.mark.parametrize("store", COMMITTED, ids=lambda p: p.name)
def test_every_committed_session_record_reads_with_its_runs_not_named(store: Path) -> None:
    sessions = list(iter_sessions(store))
    assert sessions and len(sessions) == len(list((store / "sessions").glob("*.json")))
    for session in sessions:
        assert session.suite == store.name and not session.names_its_runs
        assert session.computed is not None and session.computed_keys is None


def test_a_run_of_a_worker_that_died_reads_without_the_fields_it_never_had(tmp_path) -> None:
    """Runs lost with their worker were stored without a resolved dtype or a patch report."""
    full = run_record(key="k" * 64, mode="oattention", status="failed", error="KilledWorker: x")
    never_had = ("resolved_dtype", "patch_report")
    stored = {k: v for k, v in full.to_json().items() if k not in never_had}
    path = tmp_path / "runs" / f"{'k' * 64}.json"
    path.parent.mkdir()
    path.write_text(json.dumps(stored))
    record = read_record(path)
    assert record.resolved_dtype is None and record.patch_report is None
    assert record.error == "KilledWorker: x" and not record.ok


def test_a_field_the_record_does_not_name_is_kept_and_written_back(tmp_path) -> None:
    stored = {**run_record(key="k" * 64).to_json(), "a_later_field": [1, 2]}
    record = RunRecord.from_json(stored)
    assert record.extra == {"a_later_field": [1, 2]}
    assert read_record(write_record(tmp_path, record)).extra == {"a_later_field": [1, 2]}


def test_a_regression_run_holds_its_metrics_alone_and_a_classification_run_its_own() -> None:
    regression = run_record(key="r", rmse=1.0, mae=0.5).to_json()
    assert {"rmse", "mae"} <= set(regression) and "log_loss" not in regression
    classification = run_record(key="c", suite="offline_cls6", log_loss=0.3).to_json()
    assert {"log_loss", "accuracy", "roc_auc"} <= set(classification)
    assert "rmse" not in classification
    with pytest.raises(ValueError, match="unknown metric 'rmsee'"):
        run_record(key="r").metric("rmsee")


def test_a_file_that_is_not_a_run_record_is_named_in_one_line(tmp_path) -> None:
    path = tmp_path / "runs" / "k.json"
    path.parent.mkdir()
    path.write_text(json.dumps({"key": "k", "status": "ok"}))
    with pytest.raises(StoreError, match=r"run file .*k\.json is unreadable \(ValueError\)"):
        read_record(path)
    path.write_text(json.dumps([1, 2]))
    with pytest.raises(StoreError, match="unreadable"):
        read_record(path)


def test_a_session_record_without_its_suite_is_skipped_not_trusted(tmp_path) -> None:
    (tmp_path / "sessions").mkdir()
    (tmp_path / "sessions" / "1.json").write_text(json.dumps({"command": "eval"}))
    kept = SessionRecord(suite="offline18", checkpoint_sha256="c", computed_keys=("a",))
    (tmp_path / "sessions" / "2.json").write_text(json.dumps(kept.to_json()))
    assert list(iter_sessions(tmp_path)) == [kept]
