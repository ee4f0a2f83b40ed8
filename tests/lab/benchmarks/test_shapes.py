"""The attention sizes the benchmarks time: a host's ICL shapes, or its typed error."""

from __future__ import annotations

import pytest

from lab.benchmarks.shapes import ICL_DATASETS, icl_shapes
from tests.helpers.tiny_models import TINY_V3_CONFIG


def test_icl_shapes_follow_the_host_config(tiny_v3_path):
    shapes, source = icl_shapes(str(tiny_v3_path))
    width = TINY_V3_CONFIG["embed_dim"] * TINY_V3_CONFIG["feat_agg_num_cls_tokens"]
    heads = TINY_V3_CONFIG["icl_num_heads"]
    assert [s.label for s in shapes] == list(ICL_DATASETS)
    for s in shapes:
        assert (s.B, s.H, s.D) == (1, heads, width // heads)
        assert s.S == s.L - -(-s.L // 4)  # the 75/25 split's training rows
    assert source["icl_width"] == width


def test_bench_and_gpu_check_raise_the_typed_error_instead_of_a_stand_in_host(tmp_path) -> None:
    from lab.device_checks.null_row import load_host_model
    from retrofit.errors import CheckpointNotFoundError

    missing = tmp_path / "absent_v3.safetensors"
    with pytest.raises(CheckpointNotFoundError, match="absent_v3"):
        icl_shapes(str(missing))
    with pytest.raises(CheckpointNotFoundError, match="absent_v3"):
        load_host_model(str(missing))
