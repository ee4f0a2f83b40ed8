"""``python -m lab.calibration``, the command the default tau per host class comes from."""

from __future__ import annotations

import json
import math

from lab.calibration import main


def test_calibration_prints_one_row_per_host_with_a_finite_movement_per_mode_and_tau(capsys):
    argv = ["--hosts", "tabpfn_v2", "--train", "20", "--test", "5", "--taus", "0.1", "1"]
    assert main([*argv, "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["host"] == "TabPFNV2" and row["width"] == 192
    assert set(row["movement"]) == {"oattention", "full-o"}
    for moves in row["movement"].values():
        assert set(moves) == {"0.1", "1"}
        assert all(math.isfinite(v) and v > 0 for v in moves.values())
    # the carriers of the post-norm v2 family have ||h||^2 of about E
    assert abs(row["sq_norm"]["q0.5"] - 192) < 1


def test_calibration_renders_the_table_in_markdown(capsys):
    argv = ["--hosts", "tabpfn_v2", "--train", "20", "--test", "5", "--taus", "1"]
    assert main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("| host | width | params |") and lines[0].endswith("tau=1 |")
    assert [line.split(" | ")[4] for line in lines[2:]] == ["oattention", "full-o"]
