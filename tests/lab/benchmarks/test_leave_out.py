"""``bench --leave-out``: its cases, peers and files (never its speed)."""

from __future__ import annotations

import json

import numpy as np
import torch
from sklearn.model_selection import KFold, cross_val_predict

from lab.benchmarks.batched import ragged_datasets
from lab.benchmarks.leave_out import bench_leave_out
from lab.cli import main
from retrofit import OTabPFNRegressor
from tests.helpers.exactness import MODEL_ULPS


def test_quick_leave_out_bench_times_every_case_and_stores_the_refits_predictions(
    tiny_v3_path, tmp_path, capsys
):
    out = tmp_path / "bench_leave_out"
    argv = ["bench", "--leave-out", "--quick", "--model", str(tiny_v3_path), "--out", str(out)]
    assert main([*argv, "--threads", "1"]) == 0
    assert "wrote" in capsys.readouterr().out
    report = json.loads((out / "bench_leave_out.json").read_text())
    cases = [(c["rows"], c["cv"]) for c in report["cases"]]
    assert cases == [
        (24, "KFold(2)"),
        (24, "KFold(3)"),
        (40, "KFold(2)"),
        (40, "KFold(3)"),
        (12, "LeaveOneOut"),
    ]
    assert len({c["features"] for c in report["cases"]}) == 1  # growth with rows alone
    assert report["dtype"] == "float32" and report["mode"] == "full-o"
    y_scale = ragged_datasets(1, min_rows=41, max_rows=41, seed=0)[0][1]
    for case in report["cases"]:
        refits = case["peers"]["sklearn_refits"]
        assert len(refits["s"]) == report["repeats"] == 1
        assert refits["ratio_to_sklearn_refits"] is None
        assert refits["max_abs_diff_to_sklearn_refits"] == 0.0
        # Both of retrofit.cross_val_predict's preprocessings are timed beside the
        # refits; per_fold's predictions are theirs within the float32
        # model bound (exactness.py). transductive's differ by what its shared feature
        # pipelines change (oof-gap measures that), nothing here with the tiny host's.
        assert set(case["peers"]) == {"sklearn_refits", "transductive", "per_fold"}
        for ours in (case["peers"]["transductive"], case["peers"]["per_fold"]):
            assert len(ours["s"]) == 1 and ours["ratio_to_sklearn_refits"] is not None
        scale = max(1.0, float(np.abs(y_scale).max()))
        bound = MODEL_ULPS[torch.float32] * np.finfo(np.float32).eps * scale
        assert case["peers"]["per_fold"]["max_abs_diff_to_sklearn_refits"] <= bound
    # The stored out-of-fold RMSE is scikit-learn's k refits of the same estimator.
    X, y, _ = ragged_datasets(1, min_rows=25, max_rows=25, seed=0)[0]
    X, y = X[:24], y[:24]
    estimator = OTabPFNRegressor(
        mode="full-o",
        model_path=str(tiny_v3_path),
        device="cpu",
        n_estimators=1,
        inference_precision=torch.float32,
        ignore_pretraining_limits=True,
        random_state=0,
    )
    pred = cross_val_predict(estimator, X, y, cv=KFold(2, shuffle=True, random_state=0))
    rmse = float(np.sqrt(np.mean((pred - y) ** 2)))
    assert report["cases"][0]["peers"]["sklearn_refits"]["oof_rmse"] == rmse
    md = (out / "bench_leave_out.md").read_text()
    assert "| 12 | " in md and "LeaveOneOut" in md


def test_bench_refuses_batched_and_leave_out_together_in_one_line(tmp_path, capsys):
    assert main(["bench", "--batched", "--leave-out", "--out", str(tmp_path / "b")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "--batched or --leave-out" in err


def test_a_case_has_exactly_the_rows_it_was_asked_for(tiny_v3_path, tmp_path):
    # ragged_datasets truncates a log-uniform draw: asked for 200 rows it gives 199.
    report = bench_leave_out(
        tmp_path, rows=[200], folds=[2], loo_rows=None, repeats=1,
        model_path=str(tiny_v3_path), n_estimators=1,
    )  # fmt: skip
    assert [c["rows"] for c in report["cases"]] == [200]
