"""O-Closure proofs on the real TabPFN v3 architecture (tiny random, perturbed models).

A zero row is inserted by forward hooks:

* (A) at the entry of ICL block 0, after the target injection: a pre-hook on
  every ICL block inserts the row once and adds 1 to the train count when it
  is a train row; a hook after the last block takes it out again. Both modes
  must leave every other row unchanged and the null row exactly 0.
* (B) before the target injection (a train row whose target is embedded and
  added): only Full-O gates the injection, hidden-carrier OAttention revives it.

Also: identity (presence forced to 1, ``eps_den=0``, ``n_eff = n``) reproduces
the unpatched model, and a real patch changes predictions.

The null row's own carrier is exactly 0 (the gates). The other rows are
unchanged by the mathematics, but every block projects the whole sequence at
once and a BLAS may block a sequence one row longer differently, so they are
checked within ``MODEL_ULPS[dtype]`` ulps of their largest magnitude
(tests/helpers/exactness.py); the unpatched host's drift under the same insertion must
exceed that bound, or the check would show nothing.

Shape letters: B batch, R rows, N train rows, C features, E ICL width.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from tabpfn.architectures.tabpfn_v3 import TabPFNV3

import retrofit
import retrofit.models.embedded
from retrofit.hosts.v3.icl_block import OICLBlock
from tests.helpers.exactness import (
    MODEL_ULPS,
    assert_exactly_zero,
    assert_within_ulps,
    deviation_in_ulps,
)
from tests.helpers.null_row_hooks import FinalCarriers, NullRow
from tests.helpers.tiny_models import build_tiny_v3, tiny_v3_config

MODES = ("oattention", "full-o")
R, N, B, C = 14, 9, 2, 4


def _data(dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    x_RBC = torch.randn(R, B, C, generator=g, dtype=torch.float64).to(dtype)
    y_NB = torch.randn(N, B, generator=g, dtype=torch.float64).to(dtype)
    return x_RBC, y_NB


def _model(mode, dtype=torch.float64, config=None, **patch_kwargs):
    model = build_tiny_v3(config or tiny_v3_config(nlayers=3)).to(dtype)
    if mode != "none":
        retrofit.patch(model, mode, **patch_kwargs)
    return model


def _run(model, x, y, recorder_factory, **kwargs):
    rec = recorder_factory(model)
    try:
        with torch.inference_mode():
            out = model(x, y, **kwargs)
    finally:
        rec.close()
    return out, rec


def _rel(a, b):
    """Relative change ``max|a - b| / max|b|`` (for changes far above rounding)."""
    return ((a.double() - b.double()).abs().max() / b.double().abs().max()).item()


def _scale(t):
    return t.double().abs().max().item()


def _drift_ulps(a, b):
    """``max|a - b|`` in ulps of ``b``'s dtype at ``max|b|`` (tests/helpers/exactness.py)."""
    return deviation_in_ulps(a, b, scale=_scale(b))


def _insertion_drift(mode, pos, as_train, dtype=torch.float64, config=None, **kwargs):
    """(drift of the other rows' final carriers in ulps, null row's final carrier)."""
    x, y = _data(dtype)
    model = _model(mode, dtype, config, **kwargs.pop("patch_kwargs", {}))
    _, ref = _run(model, x, y, FinalCarriers, **kwargs)
    _, ins = _run(model, x, y, lambda m: NullRow(m, pos, as_train=as_train), **kwargs)
    return _drift_ulps(ins.final_BRE, ref.final_BRE), ins.null_BE


F64_ULPS = MODEL_ULPS[torch.float64]


@pytest.mark.parametrize("support", ["count", "mass"])
@pytest.mark.parametrize("mode", MODES)
def test_A_null_train_row_at_icl_entry_changes_nothing(mode, support):
    drift, null_BE = _insertion_drift(mode, 3, True, patch_kwargs={"support": support})
    base_drift, base_null = _insertion_drift("none", 3, True)
    assert drift <= F64_ULPS
    assert base_drift > 1e6 * F64_ULPS, (drift, base_drift)
    assert_exactly_zero(null_BE)
    assert base_null.abs().max() > 0


@pytest.mark.parametrize("mode", MODES)
def test_A_null_test_row_at_icl_entry_changes_nothing(mode):
    drift, null_BE = _insertion_drift(mode, N + 2, False)
    _, base_null = _insertion_drift("none", N + 2, False)
    assert drift <= F64_ULPS
    assert_exactly_zero(null_BE)
    assert base_null.abs().max() > 0.1  # an unpatched null query gets the mean of the values


@pytest.mark.parametrize("mode", MODES)
def test_A_predictions_unchanged_with_gqa_and_test_kv_heads(mode):
    config = tiny_v3_config(nlayers=2, icl_num_heads=4, icl_num_kv_heads=2, icl_num_kv_heads_test=1)
    x, y = _data()
    model = _model(mode, config=config)
    with torch.inference_mode():
        ref = model(x, y)
    for pos, as_train in ((0, True), (N - 1, True), (N, False), (R, False)):
        out, rec = _run(model, x, y, lambda m, p=pos, t=as_train: NullRow(m, p, as_train=t))
        assert_within_ulps(out, ref, ulps=F64_ULPS, scale=_scale(ref))
        assert_exactly_zero(rec.null_BE)


@pytest.mark.parametrize("mode", MODES)
def test_A_holds_under_memory_saving_chunks(mode):
    model = _model("none")
    opts = dataclasses.replace(model.get_default_performance_options(), save_peak_memory_factor=2)
    drift, null_BE = _insertion_drift(mode, 4, True, performance_options=opts)
    assert drift <= F64_ULPS
    assert_exactly_zero(null_BE)


def test_n_eff_is_per_batch_element():
    """A null source in batch element 0 only must not change element 0's other rows."""
    model = _model("oattention", config=tiny_v3_config(nlayers=1))
    block = model.icl_blocks[0]
    assert isinstance(block, OICLBlock)
    g = torch.Generator().manual_seed(1)
    x_BRE = torch.randn(2, 8, 16, generator=g, dtype=torch.float64) * 3
    with torch.inference_mode():
        alone, _ = block(x_BRE[:1].clone(), 5)
        with_null = x_BRE.clone()
        with_null_0 = torch.cat([x_BRE[:1, :2], torch.zeros(1, 1, 16, dtype=torch.float64)], 1)
        with_null_0 = torch.cat([with_null_0, x_BRE[:1, 2:]], 1)  # 9 rows, 6 train
        other = torch.cat([x_BRE[1:, :2], x_BRE[1:, 1:2] * 0.5, x_BRE[1:, 2:]], 1)
        batch = torch.cat([with_null_0, other], 0)
        out, _ = block(batch, 6)
    kept = torch.cat([out[:1, :2], out[:1, 3:]], 1)
    assert_within_ulps(kept, alone, ulps=F64_ULPS, scale=_scale(alone))
    assert_exactly_zero(out[0, 2])
    del with_null


# ---- (B) before the target injection -----------------------------------------------


def _insert_before_injection(monkeypatch, mode):
    """Drift of the other rows when a zero train row enters before the target embedding."""
    pos, extra_target = 2, 1.5
    x, y = _data()
    y_aug = torch.cat([y[:pos], torch.full((1, B), extra_target, dtype=y.dtype), y[pos:]])
    original = TabPFNV3._stages_0_to_2

    def stages_with_zero_row(self, x_RiBC, y_in, **kwargs):
        # Stages 0-2 see the original rows; the zero row joins their output.
        y_orig = torch.cat([y_in[:pos], y_in[pos + 1 :]])
        x_BRiClE, *rest = original(self, x_RiBC, y_orig, **kwargs)
        zero = x_BRiClE.new_zeros(x_BRiClE.shape[0], 1, *x_BRiClE.shape[2:])
        return (torch.cat([x_BRiClE[:, :pos], zero, x_BRiClE[:, pos:]], 1), *rest)

    model = _model(mode)
    _, ref = _run(model, x, y, FinalCarriers)
    monkeypatch.setattr(TabPFNV3, "_stages_0_to_2", stages_with_zero_row)
    _, ins = _run(model, x, y_aug, lambda m: NullRow(m, pos, as_train=True, at_entry=False))
    return ins.final_BRE, ref.final_BRE, ins.null_BE


def test_B_full_o_gates_the_target_injection(monkeypatch):
    ins, ref, null_BE = _insert_before_injection(monkeypatch, "full-o")
    assert_within_ulps(ins, ref, ulps=F64_ULPS, scale=_scale(ref))
    assert_exactly_zero(null_BE)


def test_B_hidden_carrier_oattention_is_revived_by_the_injection(monkeypatch):
    ins, ref, null_BE = _insert_before_injection(monkeypatch, "oattention")
    assert _rel(ins, ref) > 1e-4  # the injected target makes the row a live source
    assert null_BE.abs().max() > 1e-3


# ---- identity and a real change ------------------------------------------------------

# Presence is ||h||^2 / (tau + ||h||^2): with tau = 1e-30 it rounds to exactly 1
# for every non-null carrier, so n_eff (count) = n and, with eps_den = 0,
# OAttention is softmax attention.
IDENTITY = {"tau": 1e-30, "eps_den": 0.0, "support": "count"}


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("mode", MODES)
def test_identity_configuration_reproduces_the_host(mode, dtype):
    x, y = _data(dtype)
    with torch.inference_mode():
        ref = _model("none", dtype)(x, y)
        out = _model(mode, dtype, **IDENTITY)(x, y)
        changed = _model(mode, dtype)(x, y)
    # the same formula through another attention kernel: rounding only
    assert_within_ulps(out, ref, ulps=MODEL_ULPS[dtype], scale=_scale(ref))
    assert _rel(changed, ref) > 1e-3  # a real patch is not the host


def test_identity_presence_is_exactly_one():
    from patches import presence

    h = torch.randn(5, 16) * 0.01
    assert torch.equal(presence(h, IDENTITY["tau"]), torch.ones(5))


# ---- precision -------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("mode", MODES)
def test_null_row_proof_in_reduced_precision(mode, dtype):
    """Same proof with the whole model cast to ``dtype`` (tabpfn's forced precision).

    What the dtype can deliver: the other rows within ``MODEL_ULPS[dtype]`` ulps
    (the dtype's rounding of a re-blocked forward pass: which bf16/fp16 kernels
    run, native AVX-512-BF16/AMX or float32 emulation on AVX2, and so where each
    rounding falls, depends on the CPU), while the
    unpatched host under the same insertion drifts by more than that bound (about
    5e-2 relative: 6-8 bf16 ulps, 55 fp16 ulps).
    """
    drift, null_BE = _insertion_drift(mode, 3, True, dtype=dtype)
    base_drift, _ = _insertion_drift("none", 3, True, dtype=dtype)
    assert null_BE.dtype == dtype
    assert_exactly_zero(null_BE)
    assert drift <= MODEL_ULPS[dtype], (drift, base_drift)
    assert base_drift > MODEL_ULPS[dtype], (drift, base_drift)


# ---- fit_with_cache: presence travels with the cached train keys ------------------------


@pytest.mark.parametrize("kv_dtype", [None, torch.int8])
@pytest.mark.parametrize("mode", MODES)
def test_null_train_row_in_the_kv_cache_changes_no_prediction(mode, kv_dtype):
    x, y = _data()
    model = _model(mode)
    opts = dataclasses.replace(model.get_default_performance_options(), kv_cache_dtype=kv_dtype)

    def predict_from_cache(insert: bool):
        rec = NullRow(model, 4, as_train=True) if insert else FinalCarriers(model)
        try:
            with torch.inference_mode():
                _, cache = model(x[:N], y, return_kv_cache=True, performance_options=opts)
        finally:
            rec.close()
        with torch.inference_mode():
            out = model(x[N:], y, kv_cache=cache, x_is_test_only=True, performance_options=opts)
        return out, cache

    ref, _ = predict_from_cache(insert=False)
    out, cache = predict_from_cache(insert=True)
    assert all(entry.presence.shape == (B, N + 1) for entry in cache.kv.values())
    assert all(bool((entry.presence[:, 4] == 0).all()) for entry in cache.kv.values())
    assert_within_ulps(out, ref, ulps=F64_ULPS, scale=_scale(ref))


# ---- the embedded host ---------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_A_on_the_embedded_host(mode):
    from retrofit.models.loading import load_host

    g = torch.Generator().manual_seed(0)
    x = torch.randn(30, 2, 5, generator=g, dtype=torch.float64)
    y = torch.randn(20, 2, generator=g, dtype=torch.float64)
    drifts = {}
    for m in ("none", mode):
        model = load_host("embedded").model.double()
        if m != "none":
            retrofit.patch(model, m)
        _, ref = _run(model, x, y, FinalCarriers)
        _, ins = _run(model, x, y, lambda mdl: NullRow(mdl, 7, as_train=True))
        drifts[m] = _drift_ulps(ins.final_BRE, ref.final_BRE)
        if m != "none":
            assert_exactly_zero(ins.null_BE)
    assert drifts[mode] <= F64_ULPS
    assert drifts["none"] > 1e6 * F64_ULPS, drifts
