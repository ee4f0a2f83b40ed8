"""Ragged batches on every other closed host: TabPFN v3.5, v2.5 and v2.6 (v3 and v2: test_batched).

Tiny random models (``tests.helpers.tiny_hosts.TINY``, zero-inits perturbed) in float64
unless a dtype is the subject. The claims, each a test here:

* one dataset through the host's split stage equals its ``forward`` bit for
  bit (same calls, same shapes: fails when tabpfn's forward changes);
* ragged datasets zero-padded into one ICL forward give each dataset its own
  output: on the float64 reference kernel (README's room: each host in one mode,
  the slow tier the other) within ``MODEL_ULPS`` (the padded
  batch runs the projections over other matrix heights, ``tests/helpers/exactness.py``;
  measured 0 ulps on AVX-512 and AMX, up to 2.3 with ATen and MKL forced to
  AVX2), and on the fast float32 kernel within ``MODEL_ULPS`` of float32
  (measured up to 2.1 ulps on both);
* the same padding fed to the unpatched host moves its output by more than
  1e-3 relative, so the equivalence cannot pass vacuously;
* ``OTabPFNRegressor.predict_batched`` on ragged input equals per-dataset
  ``predict`` for every output type, in ``fit_preprocessors`` and
  ``fit_with_cache`` (an unquantized cache), in float64 on the reference kernel
  (README's room: each host in one fit mode, the slow tier the rest);
* v3.5 with its ICL in bfloat16 (``enable_icl_bf16``) pads within bf16 ulps.

Shape letters: R rows (train then test), B batch, C features, N train rows.
"""

from __future__ import annotations

from itertools import product

import pytest
import torch

import retrofit
from retrofit import OTabPFNRegressor
from retrofit.batching.bounds import (
    DEFAULT_MAX_PADDED_FRACTION,
    DEFAULT_MAX_PADDED_FRACTION_BY_DEVICE,
)
from retrofit.batching.padding import key_rows, run_padded_icl
from retrofit.batching.regression import predict_batched
from retrofit.errors import UnsupportedArchitectureError
from retrofit.hosts.common.base import icl_stage_for
from retrofit.hosts.v2.icl_stage import V2p5ICLStage
from retrofit.hosts.v3.icl_stage import V3p5ICLStage
from tests.helpers.exactness import MODEL_ULPS, assert_within_ulps
from tests.helpers.padding import ragged_tables, reference_kernel, unpatched_padding_drifts
from tests.helpers.predictions import assert_same_prediction
from tests.helpers.tiers import cross_section
from tests.helpers.tiny_hosts import build_host, tiny_host_specs

HOSTS = ("tabpfn_v3_5", "tabpfn_v2_5", "tabpfn_v2_6")
MODES = ("oattention", "full-o")
# (train, test, features); the v2 family shares a forward per number of
# feature groups (2 features a group): 3-4 features -> 2 groups, 5-6 -> 3.
RAGGED = [(30, 7, 3), (50, 12, 5), (12, 3, 4), (40, 9, 6), (22, 5, 3)]
OUTPUT_TYPES = ("mean", "median", "mode", "quantiles", "full")
UNPATCHED_STAGE = {
    "tabpfn_v3_5": V3p5ICLStage(),
    "tabpfn_v2_5": V2p5ICLStage(),
    "tabpfn_v2_6": V2p5ICLStage(),
}


@pytest.fixture(autouse=True)
def _pad_as_on_an_accelerator(monkeypatch):
    """Buckets pad up to 25 % here, as on an accelerator (see test_batched.py)."""
    monkeypatch.setitem(DEFAULT_MAX_PADDED_FRACTION_BY_DEVICE, "cpu", DEFAULT_MAX_PADDED_FRACTION)


def _task(name):
    return {"task_type": "regression"} if name == "tabpfn_v3_5" else {}


def _model(name, mode, dtype=torch.float64):
    model = build_host(name).to(dtype)
    if mode != "none":
        retrofit.patch(model, mode)
    return model


def _sets(dtype=torch.float64, seed=0, shapes=RAGGED):
    g = torch.Generator().manual_seed(seed)
    return [
        (
            torch.randn(n + m, 1, c, generator=g, dtype=torch.float64).to(dtype),
            torch.randn(n, generator=g, dtype=torch.float64).to(dtype),
        )
        for n, m, c in shapes
    ]


def _carriers(stage, model, sets):
    """``(carriers, key rows)`` per dataset."""
    out = []
    for x, y in sets:
        c = stage.embed(model, x, y)
        out.append((c, key_rows(c, x.shape[0] - y.shape[0])))
    return out


def _padded(model, stage, sets):
    """Each trailing carrier shape (v2 family: feature groups) in one padded forward."""
    embedded = _carriers(stage, model, sets)
    outputs = {}
    for shape in {tuple(c.shape[2:]) for c, _ in embedded}:
        idx = [i for i, (c, _) in enumerate(embedded) if tuple(c.shape[2:]) == shape]
        outs = run_padded_icl(model, [embedded[i][0] for i in idx], [embedded[i][1] for i in idx])
        outputs.update(zip(idx, outs, strict=True))
    return [outputs[i] for i in range(len(sets))]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", HOSTS)
def test_one_dataset_through_the_split_stage_equals_the_host_forward(name, mode):
    model = _model(name, mode)
    stage = icl_stage_for(model)
    with torch.inference_mode():
        for x, y in _sets():
            ((c, keys),) = _carriers(stage, model, [(x, y)])
            split = stage.decode(model, stage.run_blocks(model, c, keys)[:, keys:])
            assert torch.equal(split, model(x, y, **_task(name)))


@pytest.mark.parametrize(
    ("name", "mode"),
    cross_section(
        product(HOSTS, MODES),
        fast=[
            ("tabpfn_v3_5", "oattention"),
            ("tabpfn_v2_5", "full-o"),
            ("tabpfn_v2_6", "oattention"),
        ],
    ),
)
def test_zero_padded_icl_gives_each_dataset_its_own_output(name, mode):
    model = _model(name, mode)
    stage = icl_stage_for(model)
    sets = _sets()
    with torch.inference_mode(), reference_kernel():
        alone = [model(x, y, **_task(name)) for x, y in sets]
        padded = _padded(model, stage, sets)
    for a, b in zip(alone, padded, strict=True):
        assert_within_ulps(b, a, ulps=MODEL_ULPS[torch.float64])


@pytest.mark.parametrize("name", HOSTS)
def test_zero_padded_icl_on_the_fast_float32_kernel_is_within_rounding(name):
    model = _model(name, "full-o", torch.float32)
    sets = _sets(torch.float32)
    with torch.inference_mode():
        alone = [model(x, y, **_task(name)) for x, y in sets]
        padded = _padded(model, icl_stage_for(model), sets)
    for a, b in zip(alone, padded, strict=True):
        assert_within_ulps(b, a, ulps=MODEL_ULPS[torch.float32])


def test_v3_5_with_bfloat16_icl_pads_within_bf16_rounding():
    model = _model("tabpfn_v3_5", "full-o", torch.float32)
    model.enable_icl_bf16()
    stage = icl_stage_for(model)
    sets = _sets(torch.float32)
    with torch.inference_mode():
        alone = [model(x, y, task_type="regression") for x, y in sets]
        ((c, keys),) = _carriers(stage, model, sets[:1])
        assert c.dtype == torch.bfloat16
        split = stage.decode(model, stage.run_blocks(model, c, keys)[:, keys:])
        padded = _padded(model, stage, sets)
    assert torch.equal(split, alone[0])
    for a, b in zip(alone, padded, strict=True):
        assert b.dtype == torch.float32
        assert_within_ulps(b, a, ulps=MODEL_ULPS[torch.bfloat16], dtype=torch.bfloat16)


@pytest.mark.parametrize("name", HOSTS)
def test_the_same_padding_changes_the_unpatched_hosts_output(name):
    host = _model(name, "none")
    stage = UNPATCHED_STAGE[name]  # tabpfn's calls, here on the unpatched blocks
    sets = _sets(shapes=[s for s in RAGGED if s[2] in (3, 4)])  # one carrier shape
    drifts, carriers, keys = unpatched_padding_drifts(host, stage, sets, **_task(name))
    # The longest-train dataset has no padded keys, but every other one drifts.
    assert sorted(drifts)[1] > 1e-3, drifts
    with pytest.raises(UnsupportedArchitectureError, match=r"no null-padded ICL stage|not patched"):
        run_padded_icl(host, carriers, keys)


# ---- the estimator ------------------------------------------------------------------------


def _datasets(seed=0):
    return ragged_tables(RAGGED, seed)


def _est(name, **kwargs):
    params = {"device": "cpu", "inference_precision": torch.float64, "n_estimators": 2}
    return OTabPFNRegressor(model_path=tiny_host_specs(name), **{**params, **kwargs})


@pytest.mark.parametrize(
    ("name", "fit_mode"),
    cross_section(
        product(HOSTS, ["fit_preprocessors", "fit_with_cache"]),
        fast=[
            ("tabpfn_v3_5", "fit_preprocessors"),
            ("tabpfn_v2_5", "fit_with_cache"),
            ("tabpfn_v2_6", "fit_preprocessors"),
        ],
    ),
)
def test_ragged_predict_batched_equals_per_dataset_predict(name, fit_mode):
    # fit_with_cache with an unquantized cache: the padded path runs the full
    # forward, which an int8 cache would round differently.
    kwargs = {"mode": "full-o", "fit_mode": fit_mode, "kv_cache_precision": "auto"}
    if fit_mode == "fit_preprocessors":
        kwargs.pop("kv_cache_precision")
    sets = _datasets()
    with reference_kernel():
        alone = [
            _est(name, **kwargs).fit(X, y).predict(Xt, output_type="full") for X, y, Xt in sets
        ]
        batched = predict_batched(
            _est(name, **kwargs).batched_host(),
            [s[0] for s in sets],
            [s[1] for s in sets],
            [s[2] for s in sets],
            output_type="full",
        )
    assert batched.padded and batched.stats.padded_rows > batched.stats.real_rows
    for a, b in zip(alone, batched.results, strict=True):
        assert_same_prediction(b, a, ulps=MODEL_ULPS[torch.float64])


@pytest.mark.parametrize("output_type", OUTPUT_TYPES)
def test_v3_5_ragged_predict_batched_matches_predict_for_every_output_type(output_type):
    sets = _datasets(seed=1)
    lists = [s[0] for s in sets], [s[1] for s in sets], [s[2] for s in sets]
    with reference_kernel():
        batched = _est("tabpfn_v3_5").predict_batched(*lists, output_type=output_type)
        alone = [
            _est("tabpfn_v3_5").fit(X, y).predict(Xt, output_type=output_type) for X, y, Xt in sets
        ]
    for a, b in zip(alone, batched, strict=True):
        assert_same_prediction(b, a, ulps=MODEL_ULPS[torch.float64])


def test_v3_5_unpatched_keeps_tabpfns_ragged_error():
    sets = _datasets()
    lists = [s[0] for s in sets], [s[1] for s in sets], [s[2] for s in sets]
    with pytest.raises(ValueError, match="ragged batches are not supported"):
        _est("tabpfn_v3_5", mode="none", inference_precision=torch.float32).predict_batched(*lists)
