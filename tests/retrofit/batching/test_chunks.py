"""Cache-sized stage 0-2 chunks change predictions by rounding at most, and are undone.

Reference: the same tiny v3 model's ``forward`` at tabpfn's default
``inference_chunk_cells`` on the same inputs in the same process; float32,
``x`` of shape ``(R=40, B=2, C=4)``, 30 train rows. The chunked run splits the
40 rows into chunks of 8, below the :data:`MIN_CHUNK_ROWS` that the ragged path
and the evaluation keep. A chunk runs the stages' projections over fewer rows,
and a BLAS may block a shorter matrix otherwise: bit-identical on AVX-512, one
ulp-level rounding with ATen and MKL on AVX2 (``.ci/run``'s second pass). So
the bound is ``MODEL_ULPS`` of the output's scale (tests/helpers/exactness.py),
the one stated for a whole forward over a taller or shorter matrix. The padded
path's split of a dataset's members into cache-sized forwards is held to the
same bound against the dataset's own ``predict``.
"""

from __future__ import annotations

import numpy as np
import torch

from retrofit import OTabPFNRegressor
from retrofit.batching.bounds import default_chunk_cells, default_stage_forward_cells
from retrofit.batching.chunks import (
    CHUNK_CELLS_ATTR,
    MIN_CHUNK_ROWS,
    cache_sized_chunks,
    chunk_cells_for,
    lowered_chunk_cells,
    members_per_stage_forward,
)
from retrofit.batching.engine import models_of
from retrofit.batching.regression import predict_batched
from tests.helpers.exactness import MODEL_ULPS, assert_within_ulps
from tests.helpers.tiny_models import build_tiny_v3

R, B, C, N = 40, 2, 4, 30
EPS32 = float(torch.finfo(torch.float32).eps)


def _inputs():
    g = torch.Generator().manual_seed(0)
    return torch.randn(R, B, C, generator=g), torch.randn(N, B, generator=g)


def _chunk_settings_seen(model):
    """The model's chunk setting each time a row chunk reaches the column aggregator."""
    seen: list[int] = []
    hook = model.column_aggregator.register_forward_hook(
        lambda *_: seen.append(getattr(model, CHUNK_CELLS_ATTR))
    )
    return seen, hook


def test_chunks_of_eight_rows_agree_within_the_model_bound_and_the_setting_is_restored():
    model = build_tiny_v3()
    default = getattr(model, CHUNK_CELLS_ATTR)
    x_RBC, y_NB = _inputs()
    seen, hook = _chunk_settings_seen(model)
    try:
        with torch.inference_mode():
            whole = model(x_RBC, y_NB)
            unchunked = len(seen)
            with lowered_chunk_cells(model, 8 * B * C):
                chunked = model(x_RBC, y_NB)
    finally:
        hook.remove()
    assert getattr(model, CHUNK_CELLS_ATTR) == default
    assert len(seen) - unchunked == R // 8 * unchunked  # one aggregator call per chunk
    assert_within_ulps(chunked, whole, ulps=MODEL_ULPS[torch.float32])


def test_each_forward_gets_the_cpu_chunk_size_for_its_shape_and_keeps_min_rows():
    model = build_tiny_v3()
    default = getattr(model, CHUNK_CELLS_ATTR)
    x_RBC, y_NB = _inputs()
    cpu_cells = default_chunk_cells("cpu")
    assert cpu_cells is not None and cpu_cells < default
    assert chunk_cells_for("cpu", B, C) == cpu_cells
    assert chunk_cells_for("cpu", 8, 2000) == MIN_CHUNK_ROWS * 8 * 2000  # wide: the floor
    assert chunk_cells_for("meta", B, C) is None  # a device without a default
    seen, hook = _chunk_settings_seen(model)
    try:
        with torch.inference_mode(), cache_sized_chunks([model, torch.nn.Linear(2, 2)], "cpu"):
            model(x_RBC, y_NB)
            model({"main": x_RBC}, y_NB)
    finally:
        hook.remove()
    assert seen == [cpu_cells, cpu_cells]
    assert getattr(model, CHUNK_CELLS_ATTR) == default
    with cache_sized_chunks([model], "meta"):
        assert not model._forward_pre_hooks  # nothing installed where nothing changes


def test_a_dataset_s_members_split_evenly_into_the_fewest_forwards_within_the_cpu_cells():
    model = build_tiny_v3()
    cells = default_stage_forward_cells("cpu")
    rows = cells // (3 * 12) + 1  # three members of 12 columns overflow by one row
    assert members_per_stage_forward(model, "cpu", 4, rows, 12, limit=4) == 2  # 2 + 2, not 3 + 1
    assert members_per_stage_forward(model, "cpu", 4, 10, 12, limit=4) == 4  # one forward fits
    assert members_per_stage_forward(model, "cpu", 4, 10, 12, limit=3) == 3  # tabpfn's budget
    assert members_per_stage_forward(model, "cpu", 8, cells, 12, limit=8) == 1  # at least one
    assert members_per_stage_forward(model, "meta", 4, cells, 12, limit=4) == 4  # no bound there
    v2_like = torch.nn.Linear(2, 2)  # a host without row chunks keeps tabpfn's budget
    assert members_per_stage_forward(v2_like, "cpu", 4, cells, 12, limit=4) == 4


def test_the_padded_path_runs_the_embedded_regressor_s_members_in_cache_sized_forwards():
    # 4 members of a 400-row table (300 train, 100 test) with 12 columns after
    # preprocessing (6 features and their originals) overflow one forward of
    # 16,384 cells: two forwards of 2.
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(400, 6)), rng.normal(size=400)
    est = OTabPFNRegressor(model_path="embedded", inference_precision=torch.float32)
    host = est.batched_host()
    (model,) = models_of(host)
    batches: list[int] = []
    hook = model.column_aggregator.register_forward_pre_hook(
        lambda _m, _args, kwargs: batches.append(kwargs["x_BRiCE"].shape[0]), with_kwargs=True
    )
    try:
        batch = predict_batched(host, [X[:300]], [y[:300]], [X[300:]], padded=True)
    finally:
        hook.remove()
    alone = OTabPFNRegressor(model_path="embedded", inference_precision=torch.float32)
    expected = alone.fit(X[:300], y[:300]).predict(X[300:])
    assert batches == [2, 2]
    scale = max(1.0, float(np.abs(expected).max()))
    assert np.abs(batch.results[0] - expected).max() <= MODEL_ULPS[torch.float32] * EPS32 * scale
