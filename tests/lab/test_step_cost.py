"""The step-cost command: each host class's training step timed on the recipe's batch."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from lab import step_cost


def test_each_size_builds_its_class_and_a_step_runs_backward() -> None:
    x_RBC, y_NB = torch.randn(140, 2, 5), torch.randn(140 - step_cost.QUERY_ROWS, 2)
    for name in ("v3-w32-l8", "v2.6-e64-l5"):
        model = step_cost.build_size(step_cost.SIZES[name])
        assert type(model).__name__ == ("TabPFNV3" if name.startswith("v3") else "TabPFNV2p6")
        assert step_cost._one_step(model, x_RBC, y_NB) > 0
        # Backward ran: tabpfn zero-initialises output projections, so a fresh
        # model's inner blocks get no gradient yet, as in a real first step.
        assert any(p.grad is not None and bool(p.grad.abs().sum() > 0) for p in model.parameters())
    wide = step_cost.build_size(step_cost.SIZES["v2.6-e128-l5"])
    narrow = step_cost.build_size(step_cost.SIZES["v2.6-e64-l5"])
    assert sum(p.numel() for p in wide.parameters()) > 3 * sum(
        p.numel() for p in narrow.parameters()
    )


def test_the_command_writes_a_median_per_size(tmp_path: Path, capsys) -> None:
    out = tmp_path / "cost.json"
    argv = ["--sizes", "v3-w32-l8", "v2.6-e64-l5", "--rows", "140", "--features", "5",
            "--repeats", "3", "--out", str(out)]  # fmt: skip
    assert step_cost.main(argv) == 0
    result = json.loads(out.read_text())
    assert result["shape"] == {"rows": 140, "features": 5, "tables": 2}
    for size in result["sizes"].values():
        assert len(size["runs"]) == 3 and size["seconds"] == sorted(size["runs"])[1]
    assert capsys.readouterr().out.endswith(out.read_text())


def test_bad_sizes_and_shapes_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown sizes"):
        step_cost.step_seconds(["v4"])
    with pytest.raises(ValueError, match="must exceed the 128 query rows"):
        step_cost.step_seconds(["v3-w32-l8"], rows=128)
