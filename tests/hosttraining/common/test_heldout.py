"""The held-out curve both tasks share: scores per suite, baselines once, the series read back."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
import torch

from hosttraining.common import heldout
from hosttraining.common.errors import RunFileError, RunFileWarning
from hosttraining.common.heldout import (
    TASKS_KEY,
    HeldoutCurve,
    baselines_path,
    curve_series,
    evals_path,
    plot_curve,
)
from retrofit.errors import CommandError


class _SumCurve(HeldoutCurve):
    """Scores a linear model by its output on each task; the baseline counts the tasks."""

    def score(self, model: torch.nn.Module, tasks: Sequence[float]) -> dict[str, float]:
        with torch.no_grad():
            return {"m": float(sum(model(torch.tensor([[t]])).item() for t in tasks))}

    def baseline(self, tasks: Sequence[float]) -> dict[str, dict[str, float]]:
        return {"count": {"m": float(len(tasks))}}


def test_a_curve_scores_each_suite_writes_baselines_once_and_reads_back(tmp_path: Path) -> None:
    curve = _SumCurve({"a": [1.0, 2.0], "b": [3.0]})
    model = torch.nn.Linear(1, 1, bias=False)
    torch.nn.init.constant_(model.weight, 2.0)
    assert curve(model) == {"a": {"m": 6.0}, "b": {"m": 6.0}}

    out = tmp_path / "run_v3.safetensors"
    with pytest.raises(CommandError, match="--eval-tasks"):
        curve_series(out, "m")
    curve.write_baselines(out, tasks_per_suite=2)
    first = baselines_path(out).read_text()
    assert json.loads(first) == {
        "tasks_per_suite": 2,
        TASKS_KEY: curve.fingerprints(),
        "a": {"count": {"m": 2.0}},
        "b": {"count": {"m": 1.0}},
    }
    _SumCurve({"a": [1.0, 2.0], "b": [3.0]}).write_baselines(out, 2)  # a resume keeps the first
    assert baselines_path(out).read_text() == first

    records = []
    for step, weight in ((1, 2.0), (2, 0.5)):
        torch.nn.init.constant_(model.weight, weight)
        for which in ("raw", "lawa"):
            records.append({"step": step, "tasks_seen": 2 * step, "weights": which, **curve(model)})
    evals_path(out).write_text("".join(json.dumps(r) + "\n" for r in records))
    series = curve_series(out, "m")
    assert series["suites"]["a"]["raw"] == {"tasks_seen": [2, 4], "m": [6.0, 1.5]}
    assert series["suites"]["b"]["lawa"] == {"tasks_seen": [2, 4], "m": [6.0, 1.5]}
    assert series["baselines"] == {"a": {"count": 2.0}, "b": {"count": 1.0}}
    png = tmp_path / "curve.png"
    plot_curve(series, png, "t", metric="m", ylabel="m")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    capped = tmp_path / "capped.png"  # the baselines above the axis' top are named, not drawn
    plot_curve(series, capped, "t", metric="m", ylabel="m", ymax=1.5)
    assert capped.read_bytes() != png.read_bytes()


def test_a_resumed_process_that_draws_other_held_out_tasks_is_refused(tmp_path: Path) -> None:
    """Other tasks than the first process's would be drawn against the first tasks' baselines."""
    out = tmp_path / "run_v3.safetensors"
    _SumCurve({"a": [1.0, 2.0], "b": [3.0]}).write_baselines(out, tasks_per_suite=2)
    first = baselines_path(out).read_text()
    with pytest.raises(CommandError, match="held-out tasks of b differ"):
        _SumCurve({"a": [1.0, 2.0], "b": [3.5]}).write_baselines(out, tasks_per_suite=2)
    with pytest.raises(CommandError, match="held-out tasks of a, b differ"):
        _SumCurve({"a": [1.0]}).write_baselines(out, tasks_per_suite=1)
    assert baselines_path(out).read_text() == first


def test_a_baselines_file_without_fingerprints_is_kept_as_it_is(tmp_path: Path) -> None:
    """A run whose first process wrote no fingerprints cannot be checked, so it resumes."""
    out = tmp_path / "run_v3.safetensors"
    legacy = json.dumps({"tasks_per_suite": 1, "a": {"count": {"m": 1.0}}})
    baselines_path(out).write_text(legacy)
    _SumCurve({"a": [9.0]}).write_baselines(out, tasks_per_suite=1)
    assert baselines_path(out).read_text() == legacy


def test_fingerprints_follow_the_tasks_values_arrays_and_objects_included() -> None:
    class Task:
        def __init__(self, x: np.ndarray, n: int) -> None:
            self.x_ND, self.num_train = x, n

    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    same = _SumCurve({"s": [Task(x, 1)]}).fingerprints()
    assert same == _SumCurve({"s": [Task(x.copy(), 1)]}).fingerprints()
    assert same != _SumCurve({"s": [Task(x, 2)]}).fingerprints()
    assert same != _SumCurve({"s": [Task(x.astype(np.float64), 1)]}).fingerprints()
    assert same != _SumCurve({"s": [Task(x.reshape(3, 2), 1)]}).fingerprints()
    moved = x.copy()
    moved[1, 2] += 1
    assert same != _SumCurve({"s": [Task(moved, 1)]}).fingerprints()


def _run_files(folder: Path, points: list[float], baselines: dict, tasks: dict | None) -> Path:
    """A run's evals and baselines files as training writes them; returns its checkpoint path."""
    folder.mkdir()
    checkpoint = folder / "host.safetensors"
    lines = [
        {"step": i, "tasks_seen": 2 * i, "weights": w, **{s: {"m": v + d} for s in baselines}}
        for i, v in enumerate(points, start=1)
        for w, d in (("raw", 0.01), ("lawa", 0.0))
    ]
    heldout.evals_path(checkpoint).write_text("".join(json.dumps(x) + "\n" for x in lines))
    record = {s: {name: {"m": value} for name, value in b.items()} for s, b in baselines.items()}
    if tasks is not None:
        record[heldout.TASKS_KEY] = tasks
    heldout.baselines_path(checkpoint).write_text(json.dumps(record))
    return checkpoint


def test_runs_compare_by_averaged_weights_on_the_suites_whose_tasks_they_share(
    tmp_path: Path,
) -> None:
    base = {"project": {"rf": 0.3}, "tabicl": {"rf": 0.5}}
    narrow = _run_files(tmp_path / "narrow", [0.9, 0.6], base, None)
    # The same project tasks fitted on another CPU; other tabicl tasks.
    near = {"project": {"rf": 0.3 * (1 + 0.5 * heldout.BASELINE_RTOL)}, "tabicl": {"rf": 0.7}}
    wide = _run_files(tmp_path / "wide", [0.8, 0.5, 0.4], near, {"project": "a", "tabicl": "b"})

    series = heldout.compare_series([narrow, wide], "m")
    assert list(series["suites"]) == ["project"]
    assert series["suites"]["project"] == {
        "narrow": {"tasks_seen": [2, 4], "m": [0.9, 0.6]},
        "wide": {"tasks_seen": [2, 4, 6], "m": [0.8, 0.5, 0.4]},
    }
    assert series["baselines"] == {"project": {"rf": 0.3}}
    assert series["left_out"] == {"tabicl": "wide scored other tasks than narrow"}
    heldout.plot_curve(series, tmp_path / "cmp.png", "narrow vs wide", metric="m", ylabel="m")
    assert (tmp_path / "cmp.png").stat().st_size > 0

    # Fingerprints decide where both runs recorded them, whatever the baselines say.
    same = _run_files(tmp_path / "same", [0.7], base, {"project": "a", "tabicl": "c"})
    assert heldout.compare_series([wide, same], "m")["left_out"] == {
        "tabicl": "same scored other tasks than wide"
    }
    far = {"project": {"rf": 0.3 * (1 + 2 * heldout.BASELINE_RTOL)}, "tabicl": {"rf": 0.9}}
    other = _run_files(tmp_path / "other", [0.7], far, None)
    with pytest.raises(CommandError, match="no held-out suite that every run scored"):
        heldout.compare_series([narrow, other], "m")
    with pytest.raises(CommandError, match="folders named 'narrow'"):
        heldout.compare_series([narrow, narrow], "m")


def _cut_run(tmp_path: Path, cut: bytes) -> Path:
    """A run of two points whose curve then ends in ``cut`` (bytes a crash left)."""
    checkpoint = _run_files(tmp_path / "run", [1.0, 2.0], {"s": {"base": 1.0}}, None)
    with heldout.evals_path(checkpoint).open("ab") as fh:
        fh.write(cut)
    return checkpoint


@pytest.mark.parametrize(
    "cut",
    [b'{"step": 3, "tasks_seen": 6, "weights": "raw", "s": {"m": 1.', '{"note": "é'.encode()[:-1]],
    ids=["inside-a-record", "inside-a-utf8-character"],
)
def test_a_curve_whose_last_line_a_crash_cut_drops_that_line_naming_it(tmp_path, cut):
    checkpoint = _cut_run(tmp_path, cut)
    with pytest.warns(RunFileWarning, match=r"evals\.jsonl line 5 is cut") as caught:
        series = curve_series(checkpoint, "m")
    assert str(heldout.evals_path(checkpoint)) in str(caught[0].message)
    assert series["suites"]["s"]["lawa"] == {"tasks_seen": [2, 4], "m": [1.0, 2.0]}


def test_a_damaged_curve_line_before_the_last_or_a_damaged_baselines_file_is_one_line(tmp_path):
    checkpoint = _cut_run(tmp_path, b'{"step": 3, "weights": "raw", "s": {"m"\n{"step": 4}\n')
    evals = heldout.evals_path(checkpoint)
    with pytest.raises(RunFileError, match=r"evals\.jsonl line 5 is not a JSON record") as err:
        curve_series(checkpoint, "m")
    assert str(evals) in str(err.value) and "\n" not in str(err.value)
    evals.write_bytes(b"".join(evals.read_bytes().splitlines(keepends=True)[:4]) + b'{"s": 1}\n')
    with pytest.raises(RunFileError, match=r"evals\.jsonl record 5 is not a curve record"):
        curve_series(checkpoint, "m")
    evals.write_bytes(b"".join(evals.read_bytes().splitlines(keepends=True)[:4]))
    base = heldout.baselines_path(checkpoint)
    base.write_bytes(base.read_bytes()[:-3])
    with pytest.raises(RunFileError, match="is not a JSON baselines file") as err:
        curve_series(checkpoint, "m")
    assert str(base) in str(err.value) and "\n" not in str(err.value)
