"""``tabpfn-retrofit ablation`` end to end in a reduced configuration (``--quick``).

OTransformer's null token is exactly 0 and its old tokens stay within
``MODEL_ULPS`` ulps in float64; OA-only moves them (> 0).
"""

from __future__ import annotations

import json

import torch

from eval import cli
from tests.helpers.exactness import MODEL_ULPS
from tests.helpers.provenance import check_provenance


def test_ablation_quick(tmp_path):
    out = tmp_path / "ab"
    assert cli.main(["ablation", "--quick", "--out", str(out)]) == 0
    report = json.loads((out / "ablation.json").read_text())
    md = (out / "ablation.md").read_text()
    check_provenance(report["provenance"])
    s = report["summary"]
    # the null token: exactly 0 (the gates); the old tokens: float64 rounding of
    # projections one row longer (bit-identical on AVX-512, not on AVX2)
    assert s["otransformer_float64_reference_null_norm_max"] == 0.0
    assert s["otransformer_null_exact_zero"] is True
    assert s["otransformer_float64_reference_drift_ulps"] <= MODEL_ULPS[torch.float64]
    assert s["otransformer_float64_exact_zero"] is (
        s["otransformer_float64_reference_drift_max"] == 0.0
    )
    assert s["oa_only_float64_drift_min"] > 0.0 and s["oa_only_float64_all_nonzero"]
    assert s["otransformer_float64_fast_drift_max"] < 1e-9
    assert s["all_finite"]
    assert report["sigmas"] and "sigma" in md and "weights" in report["config"]
    assert f"ATen {report['provenance']['cpu_capability']['aten']}" in md
    hosts = {r["host"] for r in report["rows"]}
    assert hosts == {"standard", "oa-only", "otransformer"}
    assert {r["dtype"] for r in report["rows"]} == {"float64", "float32"}
