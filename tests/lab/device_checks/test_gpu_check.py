"""The GPU check on a CPU: its dry run, its no-CUDA message, its atomic report."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[3]


def test_gpu_check_dry_run_of_ragged_batches_matches_predict_and_times_the_loop(
    tiny_v3_path, tmp_path
):
    from lab.device_checks import gpu_check

    out = tmp_path / "gpu"
    argv = [str(out), "--device", "cpu", "--quick", "--parts", "batched"]
    argv += ["--model", str(tiny_v3_path)]
    assert gpu_check.main(argv) == 0
    report = json.loads((out / "gpu_check.json").read_text())["batched"]
    assert report["n_datasets"] == len(report["logprob_gaps"]) == 3
    assert report["padding"]["padded_rows"] > report["padding"]["real_rows"]  # padding checked
    assert report["padding"]["forwards"] < report["n_datasets"]
    # The fp32 bound of tests/retrofit/batching/test_batched.py.
    assert 0 <= report["max_logprob_gap"] <= 1e-5
    assert {"loop", "batched"} <= set(report["case"]["peers"])
    assert "## Ragged batches" in (out / "gpu_check.md").read_text()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA message only")
def test_gpu_check_without_cuda_exits_2_with_a_clear_message(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "lab", "gpu-check", str(tmp_path / "gpu")],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 2
    assert "CUDA" in proc.stderr and "not available" in proc.stderr
    assert proc.stderr.count("\n") <= 2  # one line, no traceback
    assert not (tmp_path / "gpu").exists()


def test_a_gpu_check_report_that_cannot_be_rendered_leaves_neither_file(tmp_path, monkeypatch):
    from lab.device_checks import gpu_check

    def broken(report):
        raise TypeError("rendering failed")

    monkeypatch.setattr(gpu_check, "render_markdown", broken)
    out = tmp_path / "gpu"
    argv = [str(out), "--device", "cpu", "--quick", "--parts", "exactness"]
    with pytest.raises(TypeError, match="rendering failed"):
        gpu_check._run(gpu_check._parser().parse_args(argv))
    assert not (out / "gpu_check.json").exists() and not (out / "gpu_check.md").exists()
