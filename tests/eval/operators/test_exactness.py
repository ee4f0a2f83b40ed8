"""``tabpfn-retrofit exactness`` end to end in a reduced configuration (``--quick``).

Through ``eval.cli.main`` into a temporary directory: the files exist, carry
provenance, and the headline facts hold (fast fp32 within 2x SDPA's error, every
contract passes, on the AVX2 code paths too); a bad length is refused in one line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from eval import cli
from tests.helpers.provenance import check_provenance

REPO = Path(__file__).resolve().parents[3]


def test_exactness_quick(tmp_path):
    out = tmp_path / "ex"
    rc = cli.main(["exactness", "--quick", "--lengths", "32", "--out", str(out), "--seed", "3"])
    assert rc == 0
    report = json.loads((out / "exactness.json").read_text())
    md = (out / "exactness.md").read_text()
    check_provenance(report["provenance"])
    assert report["seed"] == 3 and report["provenance"]["seeds"] == [3]
    assert {r["dtype"] for r in report["accuracy"]} == {"fp32", "bf16", "fp16"}
    assert report["all_contracts_pass"] is True
    for checks in report["contracts"].values():
        assert all(c["pass"] for c in checks.values())
        ref = [c for name, c in checks.items() if name.startswith("reference/")]
        assert ref and all(c["max_dev"] == 0.0 for c in ref)  # bit-identical reference
    s = report["summary"]
    assert s["fp32_within_target"] is True and s["fp32_max_ratio_to_sdpa"] <= 2.0
    assert s["fp32_fast_vs_float64_max"] < 1e-5 and not s["any_nan"]
    for r in report["accuracy"]:
        for key in ("fast_vs_float64", "fast_vs_direct_same_dtype", "sdpa_vs_float64"):
            assert {"linf_abs", "linf_rel"} <= set(r[key])
    assert "8.94e-8" in md and "same-dtype direct" in md and "SDPA" in md
    assert f"ATen {report['provenance']['cpu_capability']['aten']}" in md


def test_exactness_contracts_hold_on_the_avx2_code_path_too(tmp_path):
    """Under ATen and MKL on AVX2 fp32 null-source-mid insertion measured 2.98e-7 over 2.44e-7."""
    code = (
        "import torch\n"
        "from eval.operators.exactness import contract_checks\n"
        "for seed in range(4):\n"
        "    for name, c in contract_checks(torch.float32, seed).items():\n"
        "        assert c['pass'], (seed, name, c)\n"
        "print('all pass')\n"
    )
    root = REPO
    env = {**os.environ, "ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2",
           "PYTHONPATH": str(root), "OMP_NUM_THREADS": "1"}  # fmt: skip
    done = subprocess.run([sys.executable, "-c", code], env=env, cwd=root, capture_output=True,
                          text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0 and "all pass" in done.stdout, done.stderr[-2000:]


def test_exactness_refuses_a_length_below_one_in_one_line(tmp_path, capsys):
    """``exactness --lengths 0`` ended in torch's bare IndexError on an empty reduction."""
    assert cli.main(["exactness", "--lengths", "32", "0", "--out", str(tmp_path / "ex")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "tabpfn-retrofit exactness: error: --lengths must be >= 1, got 0"
    assert not (tmp_path / "ex").exists()
