"""``bench --weights``: its cases, peers and files (never its speed)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from lab.benchmarks import weights
from lab.benchmarks.command import _parser
from lab.benchmarks.weights import TARGETS, _fresh_process_case
from lab.cli import main


def test_quick_weights_bench_times_both_parts_and_compares_the_replicates(
    tiny_v3_path, tmp_path, capsys, monkeypatch
):
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "4294967296")
    out = tmp_path / "bench_weights"
    argv = ["bench", "--weights", "--quick", "--model", str(tiny_v3_path), "--out", str(out)]
    assert main([*argv, "--threads", "1"]) == 0
    assert "wrote" in capsys.readouterr().out
    report = json.loads((out / "bench_weights.json").read_text())
    assert report["dtype"] == "float32" and report["mode"] == "full-o"
    (boot,) = report["bootstrap"]
    assert (boot["rows"], boot["replicates"], boot["test_rows"]) == (40, 3, 8)
    assert set(boot["peers"]) == {"refits", "bootstrap_predict"}
    assert boot["peers"]["refits"]["ratio_to_refits"] is None
    assert boot["peers"]["bootstrap_predict"]["ratio_to_refits"]["ratio"] > 0
    # The replicates are the refits on the resampled rows, within the bound.
    assert boot["within_bound"] and 0 <= boot["max_abs_diff_to_refits"] <= boot["bound"]
    assert 0 < boot["distinct_rows_per_replicate"] < 40
    (fit,) = report["weighted_fit"]
    assert (
        set(fit["peers"]) == {"unweighted", "weighted"} and fit["target"] == TARGETS["weighted_fit"]
    )
    assert np.isfinite(fit["peers"]["weighted"]["median_s"])
    # Minor page faults per call beside the seconds, one count per round.
    faults = boot["peers"]["refits"]["minor_faults"]
    assert len(faults) == report["repeats"] and all(f >= 0 for f in faults)
    assert boot["peers"]["refits"]["median_minor_faults"] == int(np.median(faults))
    markdown = (out / "bench_weights.md").read_text()
    assert "bootstrap_predict" in markdown and "ratio to unweighted" in markdown
    assert "page faults" in markdown
    # The allocator's variables are part of the record: they decide the faults.
    assert report["environment"]["start"]["allocator_env"]["MALLOC_TRIM_THRESHOLD_"] == "4294967296"
    assert "`MALLOC_TRIM_THRESHOLD_=4294967296`" in markdown
    assert report["provenance"]["benchmark"] == "lab.benchmarks.weights"
    assert report["bootstrap_fresh_processes"] == []  # only when asked for (minutes more)
    assert "fresh process" not in markdown


def test_fresh_process_part_times_each_call_in_a_process_of_its_own(
    tiny_v3_path, tmp_path, monkeypatch
):
    children: list[tuple[str, str]] = []
    reported: dict[str, list[float]] = {"refits": [], "bootstrap_predict": []}
    real_run_child = weights.run_child

    def recorded(module, arguments, **kwargs):
        children.append((module, arguments["peer"]))
        got = real_run_child(module, arguments, **kwargs)
        reported[arguments["peer"]].append(got["s"])
        return got

    monkeypatch.setattr(weights, "run_child", recorded)
    out = tmp_path / "bench_weights"
    argv = ["bench", "--weights", "--quick", "--model", str(tiny_v3_path), "--out", str(out)]
    assert main([*argv, "--threads", "1", "--weights-fresh-processes"]) == 0
    report = json.loads((out / "bench_weights.json").read_text())
    # One child process per round and peer, and nothing else ran in it.
    assert (
        sorted(children)
        == sorted(
            ("lab.benchmarks.weights_child", peer) for peer in ("refits", "bootstrap_predict")
        )
        * report["repeats"]
    )
    (fresh,) = report["bootstrap_fresh_processes"]
    assert (fresh["rows"], fresh["replicates"], fresh["test_rows"]) == (40, 3, 8)
    peers = fresh["peers"]
    assert set(peers) == {"refits", "bootstrap_predict"}
    assert peers["refits"]["ratio_to_refits"] is None
    assert peers["bootstrap_predict"]["ratio_to_refits"]["ratio"] > 0
    for name, row in peers.items():  # the child's own clock and fault count, one a round
        assert row["s"] == reported[name]  # not this process's clock, which only waited
        assert len(row["minor_faults"]) == report["repeats"]
        assert all(s > 0 for s in row["s"]) and all(f >= 0 for f in row["minor_faults"])
    assert "each call in a fresh process" in (out / "bench_weights.md").read_text()


def test_a_failing_fresh_process_names_its_peer(tmp_path):
    with pytest.raises(RuntimeError, match="process for refits failed"):
        _fresh_process_case(
            {
                "rows": 10,
                "test_rows": 2,
                "replicates": 2,
                "model_path": str(tmp_path / "none"),
                "n_estimators": 1,
                "threads": 1,
                "seed": 0,
            },
            repeats=1,
            seed=0,
            progress=None,
        )


def test_bench_refuses_two_kinds_at_once(capsys):
    assert main(["bench", "--weights", "--leave-out", "--model", "embedded"]) == 2
    assert "give --leave-out or --weights, not both" in capsys.readouterr().err


def test_bench_weights_defaults_are_the_issues_case_on_tabpfns_default_model():
    """16 replicates of 500 rows; no --model means tabpfn's 'auto', as bench's other modes."""
    args = _parser().parse_args(["--weights"])
    assert args.weights and args.model == "auto"
    assert (args.weights_rows, args.weights_replicates, args.weights_test_rows) == ([500], 16, 100)
