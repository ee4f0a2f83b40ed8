"""``tabpfn-retrofit bench --batched`` (eval/benchmarks/batched.py): its peers and its hosts."""

from __future__ import annotations

import json

from eval.cli import main


def test_bench_batched_accepts_a_saved_directory_as_its_host(tiny_v3_path, tmp_path, capsys):
    """Plain tabpfn's loop read the directory as a checkpoint file (IsADirectoryError)."""
    saved = tmp_path / "saved"
    patch = ["patch", "--model", str(tiny_v3_path), "--mode", "full-o", "--out", str(saved)]
    assert main([*patch, "--quiet"]) == 0
    out = tmp_path / "bench"
    argv = ["bench", "--batched", "--quick", "--model", str(saved), "--out", str(out)]
    assert main([*argv, "--threads", "1"]) == 0, capsys.readouterr().err
    report = json.loads((out / "bench_batched.json").read_text())
    assert report["model_path"] == str(saved) and report["mode"] == "full-o"
    for case in report["cases"]:  # plain tabpfn's loop ran on the directory's checkpoint
        assert case["peers"]["tabpfn_loop"]["median_s_per_dataset"] > 0
