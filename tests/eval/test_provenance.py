"""Provenance (eval/provenance.py): what a result records, its CPU code paths included."""

from __future__ import annotations

import json

import pytest
import torch

from eval.provenance import cpu_capability_text, provenance_dict
from retrofit.files import write_json_atomic, write_text_atomic
from tests.helpers.provenance import check_provenance


def test_atomic_writers_and_provenance(tmp_path):
    path = write_json_atomic(tmp_path / "a" / "x.json", {"v": float("nan"), "t": (1, 2)})
    assert json.loads(path.read_text()) == {"v": "NaN", "t": [1, 2]}
    write_text_atomic(tmp_path / "a" / "x.md", "hello")
    assert (tmp_path / "a" / "x.md").read_text() == "hello"
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == ["x.json", "x.md"]
    prov = provenance_dict(seeds=[1], dtypes=["fp32"])
    check_provenance(prov)
    with pytest.raises(ValueError, match="collide"):
        provenance_dict(device="gpu")


def test_provenance_records_the_cpu_code_paths(monkeypatch):
    monkeypatch.setenv("MKL_ENABLE_INSTRUCTIONS", "AVX2")
    prov = provenance_dict()
    cap = prov["cpu_capability"]
    assert cap["aten"] == torch.backends.cpu.get_cpu_capability()
    assert cap["forced_by_env"]["MKL_ENABLE_INSTRUCTIONS"] == "AVX2"
    assert cap["hardware_bf16"] in (True, False, None)
    text = cpu_capability_text(prov)
    assert text.startswith(f"ATen {cap['aten']}, BLAS ") and "MKL_ENABLE_INSTRUCTIONS=AVX2" in text
