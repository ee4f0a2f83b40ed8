"""Run records made by hand, for the tests of selection, completeness and the reports.

A test that needs a store of a given shape (a case stored twice, a run of another context,
a whole suite) writes records with the fields it is about and the defaults below for the rest:
every field a run file must hold (``eval.paper.record.REQUIRED_FIELDS``) has one.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from eval.paper.record import RunRecord

__all__ = ["run_record", "write_run_file"]

_DEFAULTS: dict[str, Any] = {
    "suite": "offline18",
    "dataset": "qsar_fish",
    "seed": 0,
    "mode": "none",
    "tau": None,
    "support": None,
    "eps_den": None,
    "n_estimators": 1,
    "checkpoint_sha256": "c" * 64,
    "data_sha256": "d" * 64,
    "dtype": "float32",
    "device": "cpu",
    "fit_mode": "fit_preprocessors",
    "max_train_rows": None,
    "max_test_rows": None,
    "code_sha256": "e" * 64,
    "cpu": "Test CPU | AVX2",
    "status": "ok",
}


def run_record(**fields: Any) -> RunRecord:
    """A record with ``fields`` and the defaults for the rest (``baseline_key``: its own key)."""
    values = {**_DEFAULTS, **fields}
    values.setdefault("baseline_key", values["key"])
    return RunRecord(**values)


def write_run_file(store: Path, record: RunRecord) -> Path:
    """Writes ``record`` as a plain JSON file under ``store/runs`` (no atomic writer)."""
    path = store / "runs" / f"{record.key}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record.to_json()), encoding="utf-8")
    return path
