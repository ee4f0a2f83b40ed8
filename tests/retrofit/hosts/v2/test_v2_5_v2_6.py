"""The TabPFN v2.5 and v2.6 hosts (``TabPFNV2p5``, ``TabPFNV2p6``): thinking rows, proofs, undo.

Tiny random models built from each module's config class (``tests.helpers.tiny_hosts.TINY``,
3 thinking rows) with the zero-initialised projections perturbed, float64. A
zero row (every cell zero) is inserted by hooks at the entry of block 0, after
the thinking rows were prepended, and taken out after the last block: in train
and test positions, both modes, the full forward, memory-saving chunks and the
KV cache. The target is a column of every row here, not an additive injection,
so (B) of the v3 hosts has no counterpart.

Shape letters: B batch, R rows (thinking, train, test), T thinking rows, N train
rows, C columns (feature groups + target), E embedding.
"""

from __future__ import annotations

import pytest
import torch
from tabpfn.architectures import tabpfn_v2_5, tabpfn_v2_6

import retrofit
from retrofit.hosts.v2.block import SUPPORTED_V2_BLOCKS
from retrofit.settings import DEFAULT_TAU_BY_HOST
from tests.helpers.exactness import MODEL_ULPS, assert_exactly_zero, deviation_in_ulps
from tests.helpers.null_row_hooks import LastBlockOutput, NullRowAtBlockEntry
from tests.helpers.tiny_hosts import build_host

MODES = ("oattention", "full-o")
HOSTS = ("tabpfn_v2_5", "tabpfn_v2_6")
HOST_CLASSES = {"tabpfn_v2_5": tabpfn_v2_5.TabPFNV2p5, "tabpfn_v2_6": tabpfn_v2_6.TabPFNV2p6}
BLOCK_CLASSES = {"tabpfn_v2_5": tabpfn_v2_5.TabPFNBlock, "tabpfn_v2_6": tabpfn_v2_6.TabPFNBlock}
T, N, M, B, F = 3, 8, 4, 2, 4  # thinking, train, test rows, batch, features
IDENTITY = {"tau": 1e-30, "eps_den": 0.0}


def _data(seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(N + M, B, F, generator=g, dtype=torch.float64).to(dtype)
    return x, torch.randn(N, B, generator=g, dtype=torch.float64).to(dtype)


def _model(name, mode="none", dtype=torch.float64, **patch_kwargs):
    model = build_host(name).to(dtype)
    if mode != "none":
        retrofit.patch(model, mode, **patch_kwargs)
    return model


def _predict(model, x, y, **kwargs):
    with torch.inference_mode():
        return model(x, y, **kwargs)


def _rel(a, b):
    return ((a - b).abs().max() / b.abs().max()).item()


def _drift(model, pos, as_train, **kwargs):
    x, y = _data()
    results = []
    for factory in (LastBlockOutput, lambda m: NullRowAtBlockEntry(m, pos, as_train=as_train)):
        rec = factory(model)
        try:
            _predict(model, x, y, **kwargs)
        finally:
            rec.close()
        results.append(rec)
    ref, ins = results
    # In float64 ulps of max(1, max|carrier|) (tests/helpers/exactness.py), and relative.
    return deviation_in_ulps(ins.final, ref.final), _rel(ins.final, ref.final), ins.null


# ---- structure -----------------------------------------------------------------------------


@pytest.mark.parametrize("name", HOSTS)
@pytest.mark.parametrize("mode", MODES)
def test_patch_swaps_every_block_and_knows_the_thinking_rows(name, mode):
    model = build_host(name)
    keys = list(model.state_dict())
    report = retrofit.patch(model, mode)
    # The class swap of the encoder under row presence keeps the host's class name.
    assert isinstance(model, HOST_CLASSES[name]) and type(model) is not HOST_CLASSES[name]
    assert type(model).__name__ == HOST_CLASSES[name].__name__
    assert all(type(b) is SUPPORTED_V2_BLOCKS[BLOCK_CLASSES[name]] for b in model.blocks)
    assert all(b.learned_rows == T for b in model.blocks)
    assert [m.path for m in report.modules] == ["blocks.0", "blocks.1", ""]
    retrofit.unpatch(model)
    assert type(model) is HOST_CLASSES[name]
    assert report.host == HOST_CLASSES[name].__name__
    assert list(model.state_dict()) == keys


def test_the_default_tau_of_v2_6_follows_its_learned_norm_weight():
    model = build_host("tabpfn_v2_6")
    assert retrofit.patch(model, "oattention").tau == DEFAULT_TAU_BY_HOST["TabPFNV2p6"]
    retrofit.unpatch(model)
    with torch.no_grad():
        for block in model.blocks:
            block.layernorm_mha1.weight.mul_(0.1)  # carriers ||h||^2 shrink 100-fold
    tau = retrofit.patch(model, "oattention").tau
    assert tau == pytest.approx(DEFAULT_TAU_BY_HOST["TabPFNV2p6"] * 0.01, rel=1e-6)


def test_with_a_smaller_norm_weight_the_default_keeps_the_active_path_close():
    """The issue's failure: a fixed tau moves a v2.6 whose gamma is 0.1 far more than one at 1."""
    x, y = _data()

    def movement(scale, tau):
        model = build_host("tabpfn_v2_6").double()
        with torch.no_grad():
            for block in model.blocks:
                for norm in (block.layernorm_mha1, block.layernorm_mha2, block.layernorm_mlp):
                    norm.weight.mul_(scale)
        ref = _predict(model, x, y)
        retrofit.patch(model, "full-o", tau=tau)
        return _rel(_predict(model, x, y), ref)

    fixed = DEFAULT_TAU_BY_HOST["TabPFNV2p6"]
    at_unit = movement(1.0, None)
    assert movement(0.1, None) <= 2 * at_unit  # tau scaled with ||gamma||^2
    assert movement(0.1, fixed) >= 5 * at_unit  # a fixed tau would not be


# ---- the presence rule for thinking rows --------------------------------------------------------


@pytest.mark.parametrize("name", HOSTS)
def test_thinking_rows_have_presence_one_and_travel_in_the_cache(name):
    x, y = _data(dtype=torch.float32)
    model = _model(name, "oattention", torch.float32, tau=1e6)  # live rows far below 1
    block = model.blocks[0]
    x_BcRE = torch.randn(B * 3, T + N, 8)
    p = block._presence(x_BcRE, T)
    assert torch.equal(p[:, :T], torch.ones(B * 3, T))
    assert bool((p[:, T:] < 1e-3).all())
    _, cache = _predict(model, x[:N], y, return_kv_cache=True)
    for entry in cache.kv.values():
        assert entry.presence.shape == (B * 3, T + N)  # B * (2 feature groups + target)
        assert torch.equal(entry.presence[:, :T], torch.ones(B * 3, T))


# ---- (A) a null row at block 0's entry ---------------------------------------------------


@pytest.mark.parametrize("name", HOSTS)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    ("pos", "as_train"),
    [(T, True), (T + 4, True), (T + N, False), (T + N + M, False)],
    ids=["train-first", "train-mid", "test-first", "end"],
)
def test_A_null_row_at_block_entry_changes_nothing(name, mode, pos, as_train):
    # float64: the projections see one more row, so other rows agree to the
    # rounding of a different matmul shape (a model-level ulps bound); the null
    # row is exactly 0 by the receiver gate.
    drift_ulps, _, null = _drift(_model(name, mode), pos, as_train)
    base_ulps, base_rel, base_null = _drift(_model(name), pos, as_train)
    assert drift_ulps <= MODEL_ULPS[torch.float64]
    assert_exactly_zero(null)
    # The host fails the proof: a null query is revived, a null key dilutes the others.
    assert base_null.abs().max() > 1e-2
    if as_train:
        assert base_rel > 1e-4 and base_ulps > MODEL_ULPS[torch.float64]
    else:
        # A test row is no key, so the host's other rows move by the same rounding
        # only: bit-identical on AVX-512; not with ATen at `default` and MKL at SSE4.2,
        # nor on an AMD Zen 4 CPU (2.5e-16).
        assert base_ulps <= MODEL_ULPS[torch.float64]


@pytest.mark.parametrize("name", HOSTS)
@pytest.mark.parametrize("mode", MODES)
def test_A_holds_under_memory_saving_chunks(name, mode):
    from tabpfn.architectures.interface import PerformanceOptions

    options = PerformanceOptions(save_peak_memory_factor=3)
    model = _model(name, mode)
    drift_ulps, _, null = _drift(model, T + 2, True, performance_options=options)
    assert drift_ulps <= MODEL_ULPS[torch.float64]
    assert_exactly_zero(null)
    x, y = _data()
    chunked = _predict(model, x, y, performance_options=options)
    assert _rel(chunked, _predict(model, x, y)) <= 1e-12


@pytest.mark.parametrize("name", HOSTS)
@pytest.mark.parametrize("mode", MODES)
def test_A_null_train_row_in_the_kv_cache_changes_no_prediction(name, mode):
    x, y = _data()
    model = _model(name, mode)

    def predict_from_cache(insert: bool):
        rec = NullRowAtBlockEntry(model, T + 2, as_train=True) if insert else LastBlockOutput(model)
        try:
            _, cache = _predict(model, x[:N], y, return_kv_cache=True)
        finally:
            rec.close()
        return _predict(model, x[N:], None, kv_cache=cache, x_is_test_only=True), cache

    ref, _ = predict_from_cache(False)
    out, cache = predict_from_cache(True)
    assert all(bool((e.presence[:, T + 2] == 0).all()) for e in cache.kv.values())
    assert _rel(out, ref) <= 1e-12
    assert _rel(ref, _predict(model, x, y)) <= 1e-12  # the cache path is the full forward


# ---- identity, a real change, undo ---------------------------------------------------------------


@pytest.mark.parametrize("name", HOSTS)
@pytest.mark.parametrize("mode", MODES)
def test_identity_configuration_reproduces_the_host_in_float64(name, mode):
    # Measured bit-identical on this draw; asserted to a bound in case a kernel regroups.
    x, y = _data()
    ref = _predict(_model(name), x, y)
    assert _rel(_predict(_model(name, mode, **IDENTITY), x, y), ref) <= 1e-14
    assert _rel(_predict(_model(name, mode), x, y), ref) > 1e-3  # a real patch is not the host


@pytest.mark.parametrize("name", HOSTS)
@pytest.mark.parametrize("mode", MODES)
def test_unpatch_is_bit_identical_and_restores_the_originals(name, mode):
    x, y = _data()
    model = _model(name)
    reference = _predict(model, x, y)
    originals = list(model.blocks)
    retrofit.patch(model, mode)
    assert _rel(_predict(model, x, y), reference) > 1e-3
    retrofit.unpatch(model)
    assert all(a is b for a, b in zip(model.blocks, originals, strict=True))
    assert all(type(b) is BLOCK_CLASSES[name] for b in model.blocks)
    assert torch.equal(_predict(model, x, y), reference)


@pytest.mark.parametrize("name", HOSTS)
def test_force_recompute_layer_path_runs_patched_blocks(name):
    from tabpfn.architectures.interface import PerformanceOptions

    x, y = _data()
    model = _model(name, "full-o")
    options = PerformanceOptions(save_peak_memory_factor=None, force_recompute_layer=True)
    with torch.no_grad():
        recomputed = model(x, y, performance_options=options)
    assert _rel(recomputed, _predict(model, x, y)) <= 1e-12
