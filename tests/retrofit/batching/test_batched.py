"""Ragged batched prediction by null padding (retrofit.batching.padding, .regression).

The claims, each a test here:

* one dataset through the split v3 ICL stage equals ``TabPFNV3.forward`` bit
  for bit (fails when tabpfn's forward changes under the split);
* ragged datasets padded with zero carriers and run in one ICL forward give
  each dataset's output alone: in float64 with the reference OAttention kernel
  (each row computed over its own live keys) within ``MODEL_ULPS`` of
  ``tests/helpers/exactness.py``, because the projections run over a matrix of other
  height, which a BLAS may block differently (measured: bit-identical on
  AVX-512 and AMX, up to 2.3 ulps with ATen and MKL forced to AVX2), and on
  the estimator for every output type and fit mode (README's room: each mode in
  one fit mode, the slow tier the other, ``tests/helpers/tiers.py``);
* on the fast kernel in float32 the difference is rounding (other kernel
  tiles over the padded keys, other batch shapes in stages 0-2), bounded here
  by ``FP32_LOGIT_RTOL`` relative to ``max(1, |log p|)`` (measured maximum
  1.7e-6, the embedded host, 4 estimators) and ``FP32_OUTPUT_TOL`` times the
  target's std (measured 4.6e-6 on the tiny host, 9.5e-7 on the embedded);
* v2 (per-cell carriers, between-items attention closed) pads within the
  same bound in float64 (measured 1 ulp);
* the same padding fed to the unpatched host changes its predictions, so
  the equivalence cannot pass vacuously;
* bad input fails before anything is returned, naming the dataset.
"""

from __future__ import annotations

import contextlib
import dataclasses
from itertools import product
from pathlib import Path

import numpy as np
import pytest
import torch

import retrofit
import retrofit.models.embedded
from retrofit import OTabPFNRegressor
from retrofit.batching.bounds import (
    DEFAULT_MAX_PADDED_FRACTION,
    DEFAULT_MAX_PADDED_FRACTION_BY_DEVICE,
)
from retrofit.batching.padding import (
    PaddingStats,
    pad_carriers,
    plan_buckets,
    run_padded_icl,
)
from retrofit.batching.regression import predict_batched
from retrofit.errors import BatchInputError, UnsupportedArchitectureError
from retrofit.hosts.common.base import icl_stage_for
from retrofit.hosts.v2.icl_stage import V2ICLStage
from retrofit.hosts.v3.icl_stage import V3ICLStage
from tests.helpers.exactness import MODEL_ULPS, assert_within_ulps
from tests.helpers.padding import ragged_tables, reference_kernel, unpatched_padding_drifts
from tests.helpers.predictions import assert_same_prediction, flat_prediction
from tests.helpers.tiers import cross_section
from tests.helpers.tiny_hosts import build_tiny_v2, save_tiny_v2_checkpoint
from tests.helpers.tiny_models import (
    build_tiny_v3,
    save_tiny_checkpoint,
    tiny_inference_config,
    tiny_v3_config,
)

FP32_LOGIT_RTOL = 1e-5
FP32_OUTPUT_TOL = 1e-4
OUTPUT_TYPES = ("mean", "median", "mode", "quantiles", "full")
RAGGED = [(30, 7, 3), (50, 12, 5), (12, 3, 2), (40, 9, 4)]  # (train, test, features)

_CKPT: dict[str, Path] = {}


@pytest.fixture(scope="module", autouse=True)
def _tiny_checkpoint(tmp_path_factory):
    """One tiny perturbed v3 checkpoint with three estimators for the module."""
    config = tiny_v3_config()
    path = tmp_path_factory.mktemp("ckpt") / "tiny_v3.safetensors"
    save_tiny_checkpoint(
        build_tiny_v3(config), config, path, inference_config=tiny_inference_config(3)
    )
    _CKPT["path"] = path


@pytest.fixture(autouse=True)
def _pad_as_on_an_accelerator(monkeypatch):
    """Buckets pad up to 25 % here, as on an accelerator: these tests are about
    exactness under padding, which the CPU default (5 %) would mostly avoid.
    The default itself: ``test_bounds.py``."""
    monkeypatch.setitem(DEFAULT_MAX_PADDED_FRACTION_BY_DEVICE, "cpu", DEFAULT_MAX_PADDED_FRACTION)


def _datasets(shapes=RAGGED, seed=0):
    return ragged_tables(shapes, seed)


def _lists(sets):
    return [s[0] for s in sets], [s[1] for s in sets], [s[2] for s in sets]


def _est(**kwargs):
    base = {
        "model_path": str(_CKPT["path"]),
        "device": "cpu",
        "inference_precision": torch.float32,
        "n_estimators": 3,
    }
    return OTabPFNRegressor(**{**base, **kwargs})


def _per_dataset(sets, output_type="full", **kwargs):
    return [_est(**kwargs).fit(X, y).predict(Xt, output_type=output_type) for X, y, Xt in sets]


def _logit_gap(a, b):
    """Largest log-probability difference relative to ``max(1, |log p|)``."""
    return float((np.abs(a - b) / np.maximum(1.0, np.abs(a))).max())


def _model_sets(seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    return [
        (
            torch.randn(n + m, 1, c, generator=g, dtype=dtype),
            torch.randn(n, generator=g, dtype=dtype),
        )
        for n, m, c in RAGGED
    ]


def _patched_tiny(mode, support="count", dtype=torch.float64):
    model = build_tiny_v3().to(dtype)
    retrofit.patch(model, mode, support=support)
    return model


# ---- the model-level stage --------------------------------------------------------------


@pytest.mark.parametrize("mode", ["oattention", "full-o"])
def test_one_dataset_through_the_split_stage_equals_the_host_forward(mode):
    model = _patched_tiny(mode)
    stage = icl_stage_for(model)
    with torch.no_grad():
        for x, y in _model_sets():
            n = y.shape[0]
            split = stage.decode(model, stage.run_blocks(model, stage.embed(model, x, y), n)[:, n:])
            assert torch.equal(split, model(x, y))


@pytest.mark.parametrize("support", ["count", "mass"])
@pytest.mark.parametrize("mode", ["oattention", "full-o"])
def test_zero_padded_icl_gives_each_dataset_its_own_output(mode, support):
    model = _patched_tiny(mode, support)
    sets = _model_sets()
    stage = icl_stage_for(model)
    with torch.no_grad(), reference_kernel():
        alone = [model(x, y) for x, y in sets]
        carriers = [stage.embed(model, x, y) for x, y in sets]
        stats = PaddingStats()
        padded = run_padded_icl(model, carriers, [y.shape[0] for _, y in sets], stats=stats)
    assert stats.padded_rows > stats.real_rows  # there was padding to ignore
    for a, b in zip(alone, padded, strict=True):
        assert_within_ulps(b, a, ulps=MODEL_ULPS[torch.float64])


def test_the_padded_icl_runs_the_last_block_for_the_test_rows_only_when_they_alone_are_decoded(
    monkeypatch,
):
    # The stage's decoder reads the test rows: the last block skips the key rows'
    # updates. A decoder given the key rows (a classifier's) gets every block whole.
    model = _patched_tiny("full-o")
    sets = _model_sets()
    stage = icl_stage_for(model)
    calls = []
    for name in ("run_blocks", "run_blocks_to_test_rows"):
        method = getattr(type(stage), name)
        monkeypatch.setattr(
            type(stage), name, lambda *a, _m=method, _n=name, **k: calls.append(_n) or _m(*a, **k)
        )
    with torch.no_grad():
        carriers = [stage.embed(model, x, y) for x, y in sets]
        keys = [y.shape[0] for _, y in sets]
        run_padded_icl(model, carriers, keys)
        assert calls == ["run_blocks_to_test_rows"]
        run_padded_icl(model, carriers, keys, decode=lambda d, k, t: stage.decode(model, t))
    assert calls == ["run_blocks_to_test_rows", "run_blocks"]


def test_zero_padded_icl_is_exact_to_ulps_under_memory_saving_chunks():
    # Chunks split the rows at other places in a padded batch, so a projection
    # sees other matrix heights; measured: 1.7e-16 (1 ulp) on one dataset.
    model = _patched_tiny("full-o")
    sets = _model_sets()
    stage = icl_stage_for(model)
    options = dataclasses.replace(
        model.get_default_performance_options(), save_peak_memory_factor=4
    )
    with torch.no_grad(), reference_kernel():
        alone = [model(x, y, performance_options=options) for x, y in sets]
        carriers = [stage.embed(model, x, y, performance_options=options) for x, y in sets]
        padded = run_padded_icl(
            model, carriers, [y.shape[0] for _, y in sets], performance_options=options
        )
    for a, b in zip(alone, padded, strict=True):
        assert_within_ulps(b, a, ulps=MODEL_ULPS[torch.float64])


@pytest.mark.parametrize("mode", ["oattention", "full-o"])
def test_zero_padded_icl_on_the_fast_kernel_is_within_rounding(mode):
    model = _patched_tiny(mode, dtype=torch.float32)
    sets = _model_sets(dtype=torch.float32)
    stage = icl_stage_for(model)
    with torch.no_grad():
        alone = [model(x, y) for x, y in sets]
        padded = run_padded_icl(
            model, [stage.embed(model, x, y) for x, y in sets], [y.shape[0] for _, y in sets]
        )
    for a, b in zip(alone, padded, strict=True):
        scale = max(1.0, a.abs().max().item())
        assert (a - b).abs().max().item() <= 8 * torch.finfo(torch.float32).eps * scale


def test_the_same_padding_changes_the_unpatched_hosts_output():
    host = build_tiny_v3().to(torch.float64)
    stage = V3ICLStage()  # tabpfn's calls, here on the unpatched blocks
    drifts, carriers, keys = unpatched_padding_drifts(host, stage, _model_sets())
    # The longest-train dataset has no padded keys, but every other one drifts.
    assert sorted(drifts)[1] > 1e-3, drifts
    with pytest.raises(UnsupportedArchitectureError, match="no null-padded ICL stage"):
        run_padded_icl(host, carriers, keys)


# ---- v2: per-cell carriers, between-items attention closed ------------------------------


def _v2_sets(seed=0):
    g = torch.Generator().manual_seed(seed)
    shapes = [(10, 4, 3), (25, 7, 4), (6, 2, 3), (18, 5, 4)]  # 2 or 3 feature groups
    return [
        (
            torch.randn(n + m, 1, c, generator=g, dtype=torch.float64),
            torch.randn(n, generator=g, dtype=torch.float64),
        )
        for n, m, c in shapes
    ]


def _v2_padded(model, stage, sets):
    """Each trailing carrier shape (feature groups) in one padded forward."""
    carriers = [stage.embed(model, x, y) for x, y in sets]
    out = {}
    for shape in {tuple(c.shape[2:]) for c in carriers}:
        idx = [i for i, c in enumerate(carriers) if tuple(c.shape[2:]) == shape]
        outs = run_padded_icl(model, [carriers[i] for i in idx], [sets[i][1].shape[0] for i in idx])
        out.update(zip(idx, outs, strict=True))
    return [out[i] for i in range(len(sets))]


@pytest.mark.parametrize("mode", ["oattention", "full-o"])
def test_v2_zero_padded_rows_give_each_dataset_its_own_output(mode):
    # The v2 item attention projects every column's rows as one matrix: other
    # heights round differently in the last place (measured: 2.2e-16, 1 ulp).
    model = build_tiny_v2().double()
    retrofit.patch(model, mode)
    stage = icl_stage_for(model)
    sets = _v2_sets()
    with torch.no_grad(), reference_kernel():
        alone = [model(x, y) for x, y in sets]
        split = [
            stage.decode(
                model, stage.run_blocks(model, stage.embed(model, x, y), len(y))[:, len(y) :]
            )
            for x, y in sets
        ]
        padded = _v2_padded(model, stage, sets)
    for a, b, c in zip(alone, split, padded, strict=True):
        assert torch.equal(a, b)  # the split is tabpfn's forward
        assert_within_ulps(c, a, ulps=MODEL_ULPS[torch.float64])


def test_v2_the_same_padding_changes_the_unpatched_host():
    host = build_tiny_v2().double()
    sets = _v2_sets()[:3:2]  # two datasets with the same feature groups
    stage = V2ICLStage()
    with torch.no_grad():
        alone = [host(x, y) for x, y in sets]
        carriers = [stage.embed(host, x, y) for x, y in sets]
        x_BRCD, n_max = pad_carriers(carriers, [len(y) for _, y in sets])
        out = stage.run_blocks(host, x_BRCD, n_max)
    m = len(sets[1][0]) - len(sets[1][1])
    padded = stage.decode(host, out[1:2, n_max : n_max + m])
    assert ((alone[1] - padded).abs().max() / alone[1].abs().max()).item() > 1e-3
    with pytest.raises(UnsupportedArchitectureError, match="no null-padded ICL stage"):
        run_padded_icl(host, carriers, [len(y) for _, y in sets])


def test_v2_ragged_predict_batched_matches_per_dataset_predict(tmp_path):
    path = save_tiny_v2_checkpoint(build_tiny_v2(), tmp_path / "tiny_v2_regressor.safetensors")
    sets = _datasets([(30, 7, 3), (50, 12, 5), (12, 3, 2), (40, 9, 4), (22, 5, 3)])
    for dtype, tol in ((torch.float64, 4 * 2.2e-16), (torch.float32, FP32_LOGIT_RTOL)):
        kwargs = {"model_path": str(path), "n_estimators": 2, "inference_precision": dtype}
        with reference_kernel() if dtype == torch.float64 else contextlib.nullcontext():
            alone = _per_dataset(sets, **kwargs)
            batched = predict_batched(
                _est(**kwargs).fit(*sets[0][:2]).batched_host(), *_lists(sets), output_type="full"
            )
        assert batched.padded and batched.stats.padded_rows > batched.stats.real_rows
        for a, b in zip(alone, batched.results, strict=True):
            assert _logit_gap(a["logits"].numpy(), b["logits"].numpy()) <= tol


# ---- buckets ------------------------------------------------------------------------------


@pytest.mark.parametrize("bound", [0.0, 0.1, 0.25, 0.5])
def test_every_bucket_pads_at_most_the_stated_fraction(bound):
    rng = np.random.default_rng(1)
    shapes = [(int(n), int(m)) for n, m in rng.integers(2, 2000, size=(200, 2))]
    buckets = plan_buckets(shapes, max_padded_fraction=bound)
    assert sorted(i for b in buckets for i in b) == list(range(len(shapes)))
    total = PaddingStats()
    for bucket in buckets:
        stats = PaddingStats()
        stats.add([shapes[i] for i in bucket])
        total.add([shapes[i] for i in bucket])
        assert stats.padded_row_fraction <= bound + 1e-12
        assert stats.padded_cell_fraction <= bound + 1e-12
    assert total.padded_cell_fraction <= bound + 1e-12
    if bound >= 0.25:
        assert len(buckets) < len(shapes) / 2  # the bound still lets datasets share


def test_bucket_rows_are_capped_and_a_bad_bound_is_refused():
    shapes = [(100, 10)] * 10
    assert all(len(b) <= 3 for b in plan_buckets(shapes, max_rows=330))
    with pytest.raises(ValueError, match="max_padded_fraction"):
        plan_buckets(shapes, max_padded_fraction=1.0)


# ---- the estimator ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mode", "fit_mode"),
    cross_section(
        product(["oattention", "full-o"], ["fit_preprocessors", "fit_with_cache"]),
        fast=[("oattention", "fit_with_cache"), ("full-o", "fit_preprocessors")],
    ),
)
def test_ragged_predict_batched_equals_per_dataset_predict_in_float64(mode, fit_mode):
    # fit_with_cache with an unquantized cache: the int8 default rounds the
    # cached keys, which a full forward does not (next test).
    kwargs = {
        "mode": mode,
        "fit_mode": fit_mode,
        "inference_precision": torch.float64,
        "kv_cache_precision": "auto" if fit_mode == "fit_with_cache" else None,
    }
    sets = _datasets()
    with reference_kernel():
        alone = _per_dataset(sets, **kwargs)
        est = _est(**kwargs).fit(*sets[0][:2])
        batched = predict_batched(est.batched_host(), *_lists(sets), output_type="full")
    assert batched.padded and batched.stats.padded_rows > batched.stats.real_rows
    for a, b in zip(alone, batched.results, strict=True):
        assert_same_prediction(b, a, ulps=MODEL_ULPS[torch.float64])


def test_fit_with_cache_int8_differs_from_batched_only_by_the_cache_rounding():
    sets = _datasets()
    kwargs = {"fit_mode": "fit_with_cache", "inference_precision": torch.float64}
    alone = _per_dataset(sets, **kwargs)
    est = _est(**kwargs).fit(*sets[0][:2])
    batched = predict_batched(est.batched_host(), *_lists(sets), output_type="full").results
    gaps = [
        (a["logits"] - b["logits"]).abs().max().item() for a, b in zip(alone, batched, strict=True)
    ]
    assert 0 < max(gaps) <= 5e-3, gaps  # int8 keys/values: measured 3.9e-4


@pytest.mark.parametrize("output_type", OUTPUT_TYPES)
def test_ragged_predict_batched_matches_predict_in_float32_for_every_output_type(output_type):
    sets = _datasets()
    est = _est().fit(*sets[0][:2])
    batched = est.predict_batched(*_lists(sets), output_type=output_type)
    alone = _per_dataset(sets, output_type=output_type)
    assert len(batched) == len(sets)
    for (_, y, _), a, b in zip(sets, alone, batched, strict=True):
        assert type(a) is type(b)
        scale = float(np.std(y))
        for x, z in zip(flat_prediction(a), flat_prediction(b), strict=True):
            assert x.shape == z.shape
            if output_type == "full" and x is flat_prediction(a)[-1]:
                assert _logit_gap(x, z) <= FP32_LOGIT_RTOL
            elif output_type == "mode":
                # argmax of bucket densities: a tie broken by rounding moves one bucket.
                assert np.mean(np.abs(x - z) <= FP32_OUTPUT_TOL * scale) >= 0.9
            else:
                assert np.abs(x - z).max() <= FP32_OUTPUT_TOL * scale


def test_the_embedded_host_batches_ragged_datasets_exactly():
    sets = _datasets([(30, 6, 3), (50, 10, 4), (12, 4, 2)], seed=3)
    kwargs = {"model_path": "embedded", "n_estimators": 2, "inference_precision": torch.float64}
    with reference_kernel():
        alone = _per_dataset(sets, **kwargs)
        batched = _est(**kwargs).predict_batched(*_lists(sets), output_type="full")
    for a, b in zip(alone, batched, strict=True):
        assert_same_prediction(b, a, ulps=MODEL_ULPS[torch.float64])
    # and the fast fp32 kernel
    kwargs["inference_precision"] = torch.float32
    alone = _per_dataset(sets, **kwargs)
    batched = _est(**kwargs).predict_batched(*_lists(sets), output_type="full")
    for a, b in zip(alone, batched, strict=True):
        assert _logit_gap(a["logits"].numpy(), b["logits"].numpy()) <= FP32_LOGIT_RTOL


def test_predict_batched_leaves_an_unfitted_estimator_unfitted():
    sets = _datasets()
    est = _est()
    out = est.predict_batched(*_lists(sets))
    assert not hasattr(est, "models_")
    assert [len(o) for o in out] == [m for _, m, _ in RAGGED]


def test_same_shape_input_is_answered_by_tabpfns_predict_batched_in_every_mode():
    sets = _datasets([(30, 6, 3)] * 3)
    for mode in ("none", "oattention", "full-o"):
        est = _est(mode=mode).fit(*sets[0][:2])
        ours = predict_batched(est.batched_host(), *_lists(sets))
        theirs = est.batched_host().predict_batched(*_lists(sets))
        assert not ours.padded
        for a, b in zip(ours.results, theirs, strict=True):
            np.testing.assert_array_equal(a, b)


def test_unpatched_host_keeps_tabpfns_ragged_error():
    est = _est(mode="none").fit(*_datasets()[0][:2])
    with pytest.raises(ValueError, match="ragged batches are not supported"):
        est.predict_batched(*_lists(_datasets()))
    with pytest.raises(UnsupportedArchitectureError, match="no null-padded ICL stage"):
        predict_batched(est.batched_host(), *_lists(_datasets()), padded=True)


# ---- errors -------------------------------------------------------------------------------


def _ragged_with(index, **replace):
    X_tr, y_tr, X_te = (list(v) for v in _lists(_datasets()))
    for name, value in replace.items():
        {"X": X_tr, "y": y_tr, "X_test": X_te}[name][index] = value
    return X_tr, y_tr, X_te


@pytest.mark.parametrize(
    ("lists", "match"),
    [
        (
            lambda: (_lists(_datasets())[0], _lists(_datasets())[1][:3], _lists(_datasets())[2]),
            "equal length; got 4, 3 and 4",
        ),
        (lambda: ([], [], []), "empty"),
        (lambda: _ragged_with(2, X=np.ones((1, 2)), y=np.ones(1)), "dataset 2: needs at least 2"),
        (lambda: _ragged_with(1, y=np.r_[np.nan, np.ones(49)]), "dataset 1: y_train has 1 NaN"),
        (lambda: _ragged_with(3, y=np.ones(7)), "dataset 3: y_train has 7 values for 40"),
        (lambda: _ragged_with(0, X_test=np.ones((4, 9))), "dataset 0: "),
    ],
    ids=["lengths", "empty", "one-row", "nan-target", "target-length", "test-features"],
)
def test_bad_input_is_refused_naming_the_dataset(lists, match):
    est = _est().fit(*_datasets()[0][:2])
    with pytest.raises(BatchInputError, match=match):
        est.predict_batched(*lists())


def test_a_constant_target_is_answered_as_tabpfn_answers_it():
    X_tr, y_tr, X_te = _ragged_with(1, y=np.full(50, 3.5))
    est = _est().fit(*_datasets()[0][:2])
    for output_type in OUTPUT_TYPES:
        batched = est.predict_batched(X_tr, y_tr, X_te, output_type=output_type)
        alone = _est().fit(X_tr[1], y_tr[1]).predict(X_te[1], output_type=output_type)
        for x, y in zip(flat_prediction(alone), flat_prediction(batched[1]), strict=True):
            np.testing.assert_array_equal(x, y)
