"""The TabPFN v3.5 host (``TabPFNV3p5``): patch table, O-Closure proofs, cache, identity, undo.

Tiny random models built from ``TabPFNV3p5Config`` (``tests.helpers.tiny_hosts.TINY``) with
the zero-initialised projections perturbed, in float64 unless a dtype is the
subject. A zero row is inserted by forward hooks at the entry of ICL block 0
(``tests.helpers.null_row_hooks.NullRow``): (A) after the target injection, in
train and test positions, both modes, every fit path (full forward, memory
saving chunks, KV cache in float, int8 and fp8); (B) before the injection,
where only Full-O gates ``icl_y_layernorm(icl_y_encoder(y))``.

Shape letters: B batch, R rows, N train rows, C features, E ICL width.
"""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch
from tabpfn.architectures.kv_cache import FP8_KV_DTYPE
from tabpfn.architectures.tabpfn_v3_5 import ICLTransformerBlock, TabPFNV3p5, TabPFNV3p5Cache

import retrofit
from retrofit.hosts.common.presence_cache import (
    PresenceKVCacheEntry,
    PresenceQuantizedKVCacheEntry,
    PresenceTabPFNV3p5Cache,
)
from retrofit.hosts.v3.icl_block import OICLBlock, OICLBlockForV3p5
from retrofit.hosts.v3.v3_5 import OTabPFNV3p5
from tests.helpers.null_row_hooks import FinalCarriers, NullRow
from tests.helpers.tiny_hosts import build_host

MODES = ("oattention", "full-o")
R, N, B, C = 14, 9, 2, 4
TASK = {"task_type": "regression"}
# Presence rounds to exactly 1 for every non-null carrier, n_eff = n, eps_den = 0:
# OAttention is softmax attention.
IDENTITY = {"tau": 1e-30, "eps_den": 0.0, "support": "count"}


def _data(dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    x_RBC = torch.randn(R, B, C, generator=g, dtype=torch.float64).to(dtype)
    y_NB = torch.randn(N, B, generator=g, dtype=torch.float64).to(dtype)
    return x_RBC, y_NB


def _model(mode, dtype=torch.float64, seed=0, **patch_kwargs):
    model = build_host("tabpfn_v3_5", seed, nlayers=3).to(dtype)
    if mode != "none":
        retrofit.patch(model, mode, **patch_kwargs)
    return model


def _run(model, x, y, recorder_factory, **kwargs):
    rec = recorder_factory(model)
    try:
        with torch.inference_mode():
            out = model(x, y, **TASK, **kwargs)
    finally:
        rec.close()
    return out, rec


def _predict(model, x, y, **kwargs):
    with torch.inference_mode():
        return model(x, y, **TASK, **kwargs)


def _rel(a, b):
    return ((a - b).abs().max() / b.abs().max()).item()


def _insertion_drift(mode, pos, as_train, dtype=torch.float64, model=None, **kwargs):
    x, y = _data(dtype)
    model = model if model is not None else _model(mode, dtype)
    _, ref = _run(model, x, y, FinalCarriers, **kwargs)
    _, ins = _run(model, x, y, lambda m: NullRow(m, pos, as_train=as_train), **kwargs)
    return _rel(ins.final_BRE, ref.final_BRE), ins.null_BE


# ---- structure -------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_patch_swaps_every_icl_block_and_reports_the_gated_target_embedding(mode):
    model = build_host("tabpfn_v3_5", nlayers=3)
    keys = list(model.state_dict())
    ptrs = {name: p.data_ptr() for name, p in model.named_parameters()}
    frozen_before = {name for name, p in model.named_parameters() if not p.requires_grad}
    report = retrofit.patch(model, mode, tau=2.0)
    assert type(model) is OTabPFNV3p5
    assert all(type(b) is OICLBlockForV3p5 and b.qk_norm for b in model.icl_blocks)
    swaps = [m.path for m in report.modules if m.kind == "swap"]
    # v3.5's heads serve both tasks, so its classifier decoder is always swapped too.
    assert swaps == ["icl_blocks.0", "icl_blocks.1", "icl_blocks.2", "heads.many_class_decoder"]
    gated = {m.path for m in report.modules if m.kind == "override"}
    assert gated == ({"icl_y_encoder", "icl_y_layernorm"} if mode == "full-o" else set())
    assert report.host == "TabPFNV3p5" and report.tau == 2.0
    assert list(model.state_dict()) == keys
    assert {name: p.data_ptr() for name, p in model.named_parameters()} == ptrs
    frozen = {name for name, p in model.named_parameters() if not p.requires_grad}
    frozen -= frozen_before  # the host's own frozen RoPE frequencies
    assert all(
        n.startswith(("icl_blocks.", "heads.many_class_decoder."))
        for n in frozen
        if not n.startswith("icl_y_")
    )
    assert any(n.startswith("icl_y_layernorm.") for n in frozen) == (mode == "full-o")


# ---- (A) a null row at the ICL entry ------------------------------------------------------


@pytest.mark.parametrize("support", ["count", "mass"])
@pytest.mark.parametrize("mode", MODES)
def test_A_null_train_row_at_icl_entry_changes_nothing(mode, support):
    drift, null_BE = _insertion_drift(mode, 3, True, model=_model(mode, support=support))
    base_drift, base_null = _insertion_drift("none", 3, True)
    assert drift <= 1e-12
    assert drift * 1e6 <= base_drift, (drift, base_drift)
    assert torch.equal(null_BE, torch.zeros_like(null_BE))
    assert base_null.abs().max() > 0


@pytest.mark.parametrize("pos", [N, N + 2, R])
@pytest.mark.parametrize("mode", MODES)
def test_A_null_test_row_at_icl_entry_changes_nothing(mode, pos):
    drift, null_BE = _insertion_drift(mode, pos, False)
    _, base_null = _insertion_drift("none", pos, False)
    assert drift <= 1e-12
    assert torch.equal(null_BE, torch.zeros_like(null_BE))
    assert base_null.abs().max() > 0.1  # an unpatched null query gets the mean of the values


@pytest.mark.parametrize("mode", MODES)
def test_A_holds_under_memory_saving_chunks(mode):
    model = _model(mode)
    opts = dataclasses.replace(model.get_default_performance_options(), save_peak_memory_factor=2)
    drift, null_BE = _insertion_drift(mode, 4, True, model=model, performance_options=opts)
    assert drift <= 1e-12
    assert torch.equal(null_BE, torch.zeros_like(null_BE))


@pytest.mark.parametrize("kv_dtype", [None, torch.int8, FP8_KV_DTYPE], ids=["float", "int8", "fp8"])
@pytest.mark.parametrize("mode", MODES)
def test_A_null_train_row_in_the_kv_cache_changes_no_prediction(mode, kv_dtype):
    x, y = _data()
    model = _model(mode)
    opts = dataclasses.replace(model.get_default_performance_options(), kv_cache_dtype=kv_dtype)

    def predict_from_cache(insert: bool):
        rec = NullRow(model, 4, as_train=True) if insert else FinalCarriers(model)
        try:
            _, cache = _predict(model, x[:N], y, return_kv_cache=True, performance_options=opts)
        finally:
            rec.close()
        out = _predict(
            model, x[N:], y, kv_cache=cache, x_is_test_only=True, performance_options=opts
        )
        return out, cache

    ref, _ = predict_from_cache(insert=False)
    out, cache = predict_from_cache(insert=True)
    assert isinstance(cache, PresenceTabPFNV3p5Cache)
    entry_cls = PresenceKVCacheEntry if kv_dtype is None else PresenceQuantizedKVCacheEntry
    assert all(type(e) is entry_cls for e in cache.kv.values())
    assert all(e.presence.shape == (B, N + 1) for e in cache.kv.values())
    assert all(bool((e.presence[:, 4] == 0).all()) for e in cache.kv.values())
    # The null row's key and value are 0, so the quantization scales are unchanged too.
    assert _rel(out, ref) <= 1e-12


@pytest.mark.parametrize("kv_dtype", [None, torch.int8], ids=["float", "int8"])
@pytest.mark.parametrize("mode", MODES)
def test_cache_path_matches_the_full_forward(mode, kv_dtype):
    x, y = _data(torch.float32)
    model = _model(mode, torch.float32)
    full = _predict(model, x, y)
    opts = dataclasses.replace(model.get_default_performance_options(), kv_cache_dtype=kv_dtype)
    _, cache = _predict(model, x[:N], y, return_kv_cache=True, performance_options=opts)
    out = _predict(model, x[N:], y, kv_cache=cache, x_is_test_only=True, performance_options=opts)
    tol = 1e-5 if kv_dtype is None else 5e-2
    torch.testing.assert_close(out, full, rtol=tol, atol=tol)


def test_cache_to_quantize_and_concatenate_keep_presence():
    """v3.5's cache rebuilds itself as ``TabPFNV3p5Cache`` in each of these; ours does not."""
    x, y = _data(torch.float32)
    model = _model("oattention", torch.float32)
    _, c1 = _predict(model, x[:N], y, return_kv_cache=True)
    _, c2 = _predict(model, x[:N].flip(1), y.flip(1), return_kv_cache=True)
    p1, p2 = c1.kv[0].presence.clone(), c2.kv[0].presence.clone()
    q1, q2 = c1.quantize(FP8_KV_DTYPE).to("cpu"), c2.quantize(FP8_KV_DTYPE).to("cpu")
    assert type(q1) is PresenceTabPFNV3p5Cache
    assert type(q1.kv[0]) is PresenceQuantizedKVCacheEntry
    merged = PresenceTabPFNV3p5Cache.concatenate([q1, q2])
    assert type(merged) is PresenceTabPFNV3p5Cache
    assert merged.train_shape == (2 * B, N)
    assert torch.equal(merged.kv[0].presence, torch.cat([p1, p2]))
    dense = merged.kv[1].dequantize(torch.float32)
    assert type(dense) is PresenceKVCacheEntry and dense.presence.shape == (2 * B, N)


def test_a_host_cache_without_presence_is_refused():
    x, y = _data(torch.float32)
    _, cache = _predict(_model("none", torch.float32), x[:N], y, return_kv_cache=True)
    assert type(cache) is TabPFNV3p5Cache
    model = _model("oattention", torch.float32)
    with pytest.raises(retrofit.MissingPresenceError, match=r"icl_blocks\.0"):
        _predict(model, x[N:], y, kv_cache=cache, x_is_test_only=True)


# ---- (B) before the target injection --------------------------------------------------------


def _insert_before_injection(monkeypatch, mode):
    """Drift of the other rows when a zero train row enters before the target embedding."""
    pos, extra_target = 2, 1.5
    x, y = _data()
    y_aug = torch.cat([y[:pos], torch.full((1, B), extra_target, dtype=y.dtype), y[pos:]])
    original = TabPFNV3p5._stages_0_to_2

    def stages_with_zero_row(self, x_RiBC, y_in, task_type, **kwargs):
        # Stages 0-2 see the original rows; the zero row joins their output.
        y_orig = torch.cat([y_in[:pos], y_in[pos + 1 :]])
        x_BRiClE, *rest = original(self, x_RiBC, y_orig, task_type, **kwargs)
        zero = x_BRiClE.new_zeros(x_BRiClE.shape[0], 1, *x_BRiClE.shape[2:])
        return (torch.cat([x_BRiClE[:, :pos], zero, x_BRiClE[:, pos:]], 1), *rest)

    model = _model(mode)
    _, ref = _run(model, x, y, FinalCarriers)
    monkeypatch.setattr(TabPFNV3p5, "_stages_0_to_2", stages_with_zero_row)
    _, ins = _run(model, x, y_aug, lambda m: NullRow(m, pos, as_train=True, at_entry=False))
    return _rel(ins.final_BRE, ref.final_BRE), ins.null_BE


def test_B_full_o_gates_the_target_encoder_and_its_layernorm(monkeypatch):
    drift, null_BE = _insert_before_injection(monkeypatch, "full-o")
    assert drift <= 1e-12
    assert torch.equal(null_BE, torch.zeros_like(null_BE))


def test_B_hidden_carrier_oattention_is_revived_by_the_affine_layernorm(monkeypatch):
    drift, null_BE = _insert_before_injection(monkeypatch, "oattention")
    assert drift > 1e-4  # LayerNorm's bias makes the row a live source
    assert null_BE.abs().max() > 1e-3


# ---- identity, the q/k norms, a real change, undo ----------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_identity_configuration_reproduces_the_host_in_float64(mode):
    # Measured: 2.9e-16 relative (4.4e-16 absolute) on these logits, from the fused
    # attention kernels' rounding; each block alone is bit-identical to the host's.
    x, y = _data()
    ref = _predict(_model("none"), x, y)
    out = _predict(_model(mode, **IDENTITY), x, y)
    assert _rel(out, ref) <= 1e-14
    assert _rel(_predict(_model(mode), x, y), ref) > 1e-3  # a real patch is not the host


def test_identity_block_is_bit_identical_to_the_host_block():
    block = build_host("tabpfn_v3_5").double().icl_blocks[0]
    patched = OICLBlock.from_module(block, mode="full-o", **IDENTITY)
    x_BRE = torch.randn(B, R, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    with torch.inference_mode():
        assert torch.equal(patched(x_BRE, N)[0], block(x_BRE, N)[0])


def test_a_block_that_skipped_the_qk_norms_would_fail_the_identity_test():
    """The identity test has teeth: reading the projections without v3.5's q/k norms."""
    x, y = _data()
    ref = _predict(_model("none"), x, y)
    model = _model("oattention", **IDENTITY)
    for block in model.icl_blocks:
        block.qk_norm = False
    assert _rel(_predict(model, x, y), ref) > 1e-3


def test_a_v3_5_block_without_its_qk_norms_is_refused():
    block = build_host("tabpfn_v3_5").icl_blocks[0]
    del block.icl_attention.q_norm
    with pytest.raises(retrofit.UnsupportedArchitectureError, match="q/k norms"):
        OICLBlock.from_module(block, mode="oattention")


@pytest.mark.parametrize("mode", MODES)
def test_unpatch_is_bit_identical_and_restores_the_originals(mode):
    x, y = _data()
    model = _model("none")
    reference = _predict(model, x, y)
    originals = list(model.icl_blocks)
    retrofit.patch(model, mode)
    assert _rel(_predict(model, x, y), reference) > 1e-3
    assert retrofit.unpatch(model).mode == mode
    assert type(model) is TabPFNV3p5
    assert all(a is b for a, b in zip(model.icl_blocks, originals, strict=True))
    assert all(type(b) is ICLTransformerBlock for b in model.icl_blocks)
    assert torch.equal(_predict(model, x, y), reference)


def test_deepcopy_keeps_the_patch():
    x, y = _data(torch.float32)
    model = _model("full-o", torch.float32)
    clone = copy.deepcopy(model)
    assert type(clone) is OTabPFNV3p5
    assert torch.equal(_predict(clone, x, y), _predict(model, x, y))


# ---- enable_icl_bf16 -----------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_icl_bf16_runs_the_patched_blocks_and_keeps_a_null_row_null(mode):
    model = _model(mode, torch.float32)
    model.enable_icl_bf16()
    assert all(p.dtype == torch.bfloat16 for p in model.icl_blocks.parameters())
    drift, null_BE = _insertion_drift(mode, 3, True, dtype=torch.float32, model=model)
    base = _model("none", torch.float32)
    base.enable_icl_bf16()
    base_drift, _ = _insertion_drift("none", 3, True, dtype=torch.float32, model=base)
    assert null_BE.dtype == torch.bfloat16
    assert torch.equal(null_BE, torch.zeros_like(null_BE))
    assert drift <= 1e-2  # bf16 rounding of a different sequence length
    assert drift * 10 <= base_drift, (drift, base_drift)
