"""``python -m lab bench``: its parts in one report and its exit codes (never its speed)."""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import pytest
import torch

from eval.locations import DEFAULT_OUTPUT_ROOT
from lab.benchmarks import batched, speed, speed_markdown
from lab.benchmarks.shapes import QUICK_SHAPES
from lab.cli import main
from tests.helpers.exactness import MODEL_ULPS
from tests.helpers.memory_children import zero_probe_children


def test_quick_bench_writes_json_and_markdown(tiny_v3_path, tmp_path, capsys):
    out = tmp_path / "bench"
    argv = ["bench", "--quick", "--out", str(out), "--model", str(tiny_v3_path), "--threads", "1"]
    status = main(argv)
    assert status == 0
    printed = capsys.readouterr().out
    # Every part prints Markdown tables, never raw Python dicts and lists.
    assert "{'" not in printed and "[{" not in printed and "': " not in printed, printed
    for table in ("| peer | extra peak MiB (median) |", "| peer | median s | ratio to tabpfn",
                  "| torch threads | default CPU s |"):  # fmt: skip
        assert table in printed, printed
    report = json.loads((out / "bench.json").read_text())
    assert report["quick"] is True

    rows = report["attention"]["rows"]
    assert len(rows) == len(QUICK_SHAPES) and report["attention"]["repeats"] == 5
    for row in rows:
        assert set(row["median_ms"]) == {
            "sdpa",
            "oattention",
            "oattention_trusted",
            "oattention_block",
            "kernel_with_bias",
        }
        assert set(row["block_vs_kernel_with_bias"]) == set(row["oattention_vs_kernel_with_bias"])
        for r in row["ratios"].values():
            assert set(r) == {"ratio", "ci_low", "ci_high", "ratio_of_medians"}
            assert 0 < r["ci_low"] <= r["ratio"] <= r["ci_high"]

    mem = report["memory"]
    assert "error" not in mem, mem
    assert set(mem["peers"]) == {"sdpa", "oattention"}
    for m in mem["peers"].values():
        assert len(m["extra_peak_bytes"]) == 1 and m["output_bytes"] > 0

    est = report["estimator"]
    assert "skipped" not in est, est
    (case,) = est["cases"]
    assert case["dataset"] == "qsar_fish" and case["n_train"] == 120
    assert set(case["median_s"]) == {"none", "oattention", "full-o"}
    assert set(est["pooled"]) == {"oattention", "full-o"}

    loop = report["fit_loop"]  # plain tabpfn's loop against ours, on the embedded host
    assert "skipped" not in loop, loop
    assert set(loop["ratios"]) == {"none", "full-o"}
    chunks = report["chunks"]
    assert "skipped" not in chunks, chunks
    assert len(chunks["bit_identical"]) == 1
    # equal up to rounding (tests/helpers/exactness.py), not bit-identical on every CPU
    assert 0 <= chunks["ulps"][0] <= MODEL_ULPS[torch.float32]
    assert [r["threads"] for r in chunks["by_threads"]] == [1]
    assert set(chunks["by_threads"][0]["seconds"]) == {"default", "cache_sized"}

    prov = report["provenance"]
    for key in ("packages", "cpu_model", "threads", "date_utc", "git_commit"):
        assert key in prov
    assert prov["threads"] == 1
    assert "busy_processes" in report["environment"]["start"]

    md = (out / "bench.md").read_text()
    for part in ("memory", "fit_loop", "chunks"):  # printed as bench.md shows it
        assert speed_markdown.part_text(part, report[part]) in md
        assert speed_markdown.part_text(part, report[part]) in printed
    for heading in (
        "## Attention",
        "## Peak memory",
        "## OTabPFNRegressor",
        "## A loop of fit + predict",
        "## Cache-sized chunks",
        "## Environment",
    ):
        assert heading in md


def test_missing_host_is_reported_not_fatal(tmp_path):
    report = speed.run(
        tmp_path, quick=True, parts=("estimator",), model_path=str(tmp_path / "absent_v3.ckpt")
    )
    assert "skipped" in report["estimator"]
    assert "Not measured" in (tmp_path / "bench.md").read_text()


def test_quick_bench_renders_a_memory_probe_that_read_zero_as_unknown(tmp_path, monkeypatch):
    zero_probe_children(monkeypatch)
    report = speed.run(tmp_path, quick=True, threads=1, parts=("memory",))
    mem = report["memory"]
    assert mem["ratio"] is None and mem["met"] is None
    for peer in mem["peers"].values():
        assert peer["extra_peak_bytes"] == [None]
        assert peer["median_extra_peak_bytes"] is None
    assert json.loads((tmp_path / "bench.json").read_text())["memory"]["ratio"] is None
    md = (tmp_path / "bench.md").read_text()
    assert "OAttention / SDPA extra peak: unknown" in md


def test_a_report_that_cannot_be_rendered_leaves_neither_file(tmp_path, monkeypatch):
    zero_probe_children(monkeypatch)

    def broken(report):
        raise TypeError("rendering failed")

    monkeypatch.setattr(speed, "render_markdown", broken)
    with pytest.raises(TypeError, match="rendering failed"):
        speed.run(tmp_path, quick=True, threads=1, parts=("memory",))
    assert not (tmp_path / "bench.json").exists() and not (tmp_path / "bench.md").exists()


def test_bench_refuses_an_unknown_model_alias_in_one_line_before_any_work(tmp_path, capsys):
    """``bench --model v4`` exited 0, every host part of its report reading "Not measured"."""
    out = tmp_path / "bench"
    assert main(["bench", "--quick", "--model", "v4", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "'v4'" in err and "'v3.5'" in err and "'embedded'" in err
    assert not out.exists()  # refused before anything was measured or written


def test_bench_exits_non_zero_when_a_part_it_was_asked_for_was_not_measured(
    tmp_path, capsys, monkeypatch
):
    """A part that could not be measured was written as "Not measured" and bench exited 0."""

    def fails(**_: object) -> dict:
        raise RuntimeError("no host for the loop")

    monkeypatch.setattr(speed, "bench_fit_loop", fails)
    out = tmp_path / "bench"
    assert (
        main(["bench", "--quick", "--model", "embedded", "--parts", "fit_loop", "--out", str(out)])
        == 1
    )
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "not measured: fit_loop (RuntimeError: no host for the loop)" in err
    assert "Not measured" in (out / "bench.md").read_text()  # the report still says why


def test_bench_writes_under_the_untracked_folder_unless_told():
    for fn in (speed.run, batched.bench_batched):
        out = Path(inspect.signature(fn).parameters["out_dir"].default)
        assert out.parts[0] == DEFAULT_OUTPUT_ROOT.name
