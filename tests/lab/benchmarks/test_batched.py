"""``python -m lab bench --batched`` (lab/benchmarks/batched.py): its peers and its hosts."""

from __future__ import annotations

import json

from eval.cli import main as console_main
from lab.benchmarks.batched import bench_batched, ragged_datasets
from lab.cli import main


def test_bench_batched_accepts_a_saved_directory_as_its_host(tiny_v3_path, tmp_path, capsys):
    """Plain tabpfn's loop read the directory as a checkpoint file (IsADirectoryError)."""
    saved = tmp_path / "saved"
    patch = ["patch", "--model", str(tiny_v3_path), "--mode", "full-o", "--out", str(saved)]
    assert console_main([*patch, "--quiet"]) == 0
    out = tmp_path / "bench"
    argv = ["bench", "--batched", "--quick", "--model", str(saved), "--out", str(out)]
    assert main([*argv, "--threads", "1"]) == 0, capsys.readouterr().err
    report = json.loads((out / "bench_batched.json").read_text())
    assert report["model_path"] == str(saved) and report["mode"] == "full-o"
    for case in report["cases"]:  # plain tabpfn's loop ran on the directory's checkpoint
        assert case["peers"]["tabpfn_loop"]["median_s_per_dataset"] > 0


def test_ragged_datasets_have_ragged_and_same_shapes():
    ragged = ragged_datasets(6, min_rows=20, max_rows=400, seed=1)
    same = ragged_datasets(4, min_rows=20, max_rows=400, seed=1, same_shape=True)
    assert len({d[0].shape for d in ragged}) > 1
    assert len({d[0].shape for d in same}) == 1 and len({d[2].shape for d in same}) == 1
    assert all(20 <= len(d[0]) <= 400 and len(d[1]) == len(d[0]) for d in ragged)


def test_bench_batched_reports_every_peer_and_the_padding(tmp_path, tiny_v3_path):
    report = bench_batched(
        tmp_path,
        sizes=[3],
        min_rows=20,
        max_rows=80,
        repeats=1,
        model_path=str(tiny_v3_path),
        n_estimators=1,
    )
    ragged, same = report["cases"]
    # Both refitting loops (plain tabpfn's and ours) are timed in each case; a CPU's bound is 5 %.
    loops = {"loop", "tabpfn_loop", "ours_loop"}
    assert set(ragged["peers"]) == loops | {"batched", "batched_wide"}
    assert set(same["peers"]) == loops | {"padded_same_shape", "tabpfn_same_shape"}
    assert set(same["padding"]) == {"padded_same_shape"}
    same_pad = same["padding"]["padded_same_shape"]
    assert same_pad["padded_rows"] == same_pad["real_rows"]
    assert 0 <= ragged["padding"]["batched"]["padded_row_fraction"] <= 0.05
    assert 0 <= ragged["padding"]["batched_wide"]["padded_row_fraction"] <= 0.25
    for case in report["cases"]:
        for row in case["peers"].values():
            assert row["median_s_per_dataset"] > 0
    assert (tmp_path / "bench_batched.json").is_file()
    assert "padded rows" in (tmp_path / "bench_batched.md").read_text()
