"""retrofit.patch / unpatch on TabPFN v3: structure, sharing, undo, copies, errors."""

from __future__ import annotations

import copy
import dataclasses
import io
import pickle

import pytest
import torch
from tabpfn.architectures.tabpfn_v3 import ICLTransformerBlock, TabPFNV3, TabPFNV3Cache

import retrofit
from retrofit.errors import MissingPresenceError
from retrofit.hosts.common.presence_cache import (
    PresenceKVCacheEntry,
    PresenceQuantizedKVCacheEntry,
    PresenceTabPFNV3Cache,
)
from retrofit.hosts.v3.icl_block import OICLBlockForV3
from retrofit.hosts.v3.v3 import OTabPFNV3
from tests.helpers.tiny_models import build_tiny_v3, tiny_v3_config

MODES = ("oattention", "full-o")


def _data(R=12, N=8, B=2, C=4, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    x_RBC = torch.randn(R, B, C, generator=g).to(dtype)
    y_NB = torch.randn(N, B, generator=g).to(dtype)
    return x_RBC, y_NB


def _predict(model, x, y, **kwargs):
    with torch.inference_mode():
        return model(x, y, **kwargs)


@pytest.mark.parametrize("mode", MODES)
def test_patch_swaps_every_block_and_reports(mode):
    model = build_tiny_v3(tiny_v3_config(nlayers=3))
    originals = list(model.icl_blocks)
    report = retrofit.patch(model, mode, tau=2.0, support="mass", eps_den=1e-5)

    assert type(model) is OTabPFNV3
    assert all(type(b) is OICLBlockForV3 for b in model.icl_blocks)
    swaps = [m for m in report.modules if m.kind == "swap"]
    assert [m.path for m in swaps] == ["icl_blocks.0", "icl_blocks.1", "icl_blocks.2"]
    assert {(m.old_class, m.new_class) for m in swaps} == {("ICLTransformerBlock", "OICLBlock")}
    n_block = sum(p.numel() for p in originals[0].parameters())
    assert all(m.shared_parameters == n_block for m in swaps)
    assert (report.mode, report.tau, report.support, report.eps_den) == (mode, 2.0, "mass", 1e-5)
    assert ("icl_y_encoder" in {m.path for m in report.modules}) == (mode == "full-o")
    assert model.retrofit_report is report
    assert len(report.digest()) == 16
    assert report.to_dict()["digest"] == report.digest()


def test_digest_is_stable_and_sensitive():
    r1 = retrofit.patch(build_tiny_v3(), "oattention")
    r2 = retrofit.patch(build_tiny_v3(seed=5), "oattention")
    r3 = retrofit.patch(build_tiny_v3(), "oattention", tau=3.0)
    assert r1.digest() == r2.digest()  # same structure and settings
    assert r1.digest() != r3.digest()


@pytest.mark.parametrize("mode", MODES)
def test_parameters_shared_frozen_and_state_dict_keys_unchanged(mode):
    model = build_tiny_v3()
    keys = list(model.state_dict().keys())
    ptrs = {name: p.data_ptr() for name, p in model.named_parameters()}
    grads = {name: p.requires_grad for name, p in model.named_parameters()}
    retrofit.patch(model, mode)
    assert list(model.state_dict().keys()) == keys
    assert {name: p.data_ptr() for name, p in model.named_parameters()} == ptrs
    for name, p in model.named_parameters():
        frozen = name.startswith("icl_blocks.") or (
            mode == "full-o" and name.startswith("icl_y_encoder.")
        )
        assert p.requires_grad == (grads[name] and not frozen), name
    retrofit.unpatch(model)
    assert {name: p.requires_grad for name, p in model.named_parameters()} == grads


@pytest.mark.parametrize("mode", MODES)
def test_unpatch_is_bit_identical_and_restores_the_originals(mode):
    x, y = _data()
    model = build_tiny_v3()
    reference = _predict(build_tiny_v3(), x, y)
    originals = list(model.icl_blocks)
    retrofit.patch(model, mode)
    patched = _predict(model, x, y)
    assert not torch.allclose(patched, reference, rtol=0, atol=1e-6)  # a real patch changes it
    removed = retrofit.unpatch(model)
    assert removed.mode == mode
    assert type(model) is TabPFNV3
    assert all(a is b for a, b in zip(model.icl_blocks, originals, strict=True))
    assert not hasattr(model, "retrofit_report")
    assert torch.equal(_predict(model, x, y), reference)
    retrofit.patch(model, mode)  # patchable again
    assert torch.equal(_predict(model, x, y), patched)


def test_patching_twice_and_unpatching_unpatched_raise():
    model = build_tiny_v3()
    retrofit.patch(model, "oattention")
    with pytest.raises(retrofit.AlreadyPatchedError, match="TabPFNV3 is already patched"):
        retrofit.patch(model, "full-o")
    retrofit.unpatch(model)
    with pytest.raises(retrofit.NotPatchedError):
        retrofit.unpatch(model)


def test_an_unknown_class_is_refused_naming_every_supported_host():
    with pytest.raises(retrofit.UnsupportedArchitectureError) as info:
        retrofit.patch(torch.nn.Linear(2, 2), "oattention")
    for name in ("TabPFNV2", "TabPFNV2p5", "TabPFNV2p6", "TabPFNV3", "TabPFNV3p5"):
        assert name in str(info.value)


def test_a_subclass_or_foreign_module_is_unsupported():
    class MyV3(TabPFNV3):
        pass

    model = build_tiny_v3()
    model.__class__ = MyV3
    with pytest.raises(retrofit.UnsupportedArchitectureError, match="MyV3"):
        retrofit.patch(model, "oattention")
    with pytest.raises(retrofit.UnsupportedArchitectureError, match="Linear"):
        retrofit.patch(torch.nn.Linear(2, 2), "oattention")


def test_nothing_matched_and_changed_blocks_raise_untouched():
    model = build_tiny_v3()
    model.icl_blocks = torch.nn.ModuleList()
    with pytest.raises(retrofit.NothingMatchedError, match="TabPFNV3"):
        retrofit.patch(model, "oattention")

    model = build_tiny_v3(tiny_v3_config(nlayers=2))
    first = model.icl_blocks[0]
    model.icl_blocks[1] = torch.nn.Identity()
    with pytest.raises(retrofit.UnsupportedArchitectureError, match=r"icl_blocks\.1"):
        retrofit.patch(model, "oattention")
    # Planned first, committed all at once: block 0 was not swapped.
    assert model.icl_blocks[0] is first and type(model) is TabPFNV3


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"mode": "oa"}, "mode must be one of"),
        ({"mode": "none"}, "mode must be one of"),
        ({"mode": "oattention", "tau": 0.0}, "tau"),
        ({"mode": "oattention", "tau": -1.0}, "tau"),
        ({"mode": "oattention", "tau": float("nan")}, "tau"),
        ({"mode": "oattention", "support": "size"}, "support"),
        ({"mode": "oattention", "eps_den": -1e-6}, "eps_den"),
    ],
)
def test_bad_settings_raise_typed_errors(kwargs, match):
    model = build_tiny_v3()
    mode = kwargs.pop("mode")
    with pytest.raises(retrofit.InvalidPatchConfigError, match=match):
        retrofit.patch(model, mode, **kwargs)
    assert type(model) is TabPFNV3


@pytest.mark.parametrize("mode", MODES)
def test_deepcopy_pickle_and_to_keep_the_patch(mode):
    x, y = _data()
    model = build_tiny_v3()
    retrofit.patch(model, mode)
    expected = _predict(model, x, y)

    clone = copy.deepcopy(model)
    buf = io.BytesIO()
    torch.save(model, buf)
    buf.seek(0)
    loaded = torch.load(buf, weights_only=False)
    unpickled = pickle.loads(pickle.dumps(model))
    for other in (clone, loaded, unpickled):
        assert type(other) is OTabPFNV3
        assert torch.equal(_predict(other, x, y), expected)
        # the copy's kept originals share the copy's parameters, not the source's
        retrofit.unpatch(other)
        ptrs = {p.data_ptr() for p in other.parameters()}
        assert ptrs.isdisjoint(p.data_ptr() for p in model.parameters())
        assert torch.equal(_predict(other, x, y), _predict(build_tiny_v3(), x, y))

    moved = model.to(torch.float64)
    assert moved is model
    out64 = _predict(model, x.double(), y.double())
    assert out64.dtype == torch.float64
    retrofit.unpatch(model)
    assert all(p.dtype == torch.float64 for p in model.icl_blocks[0].parameters())


def test_state_dict_of_patched_model_loads_into_unpatched():
    x, y = _data()
    model = build_tiny_v3(seed=1)
    retrofit.patch(model, "full-o")
    fresh = build_tiny_v3(seed=2)
    fresh.load_state_dict(model.state_dict())
    retrofit.unpatch(model)
    assert torch.equal(_predict(fresh, x, y), _predict(model, x, y))


# ---- KV cache: presence travels with the cached train keys -----------------------


def _cache_forward(model, x, y, n_train, **kwargs):
    """Builds the cache from the train rows and predicts the test rows from it."""
    opts = dataclasses.replace(model.get_default_performance_options(), **kwargs)
    with torch.inference_mode():
        _, cache = model(x[:n_train], y, return_kv_cache=True, performance_options=opts)
        out = model(x[n_train:], y, kv_cache=cache, x_is_test_only=True, performance_options=opts)
    return cache, out


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kv_dtype", [None, torch.int8])
@pytest.mark.parametrize("kv_heads", [(None, None), (2, 1)])
def test_cache_path_matches_the_full_forward(mode, kv_dtype, kv_heads):
    cfg = tiny_v3_config(icl_num_kv_heads=kv_heads[0], icl_num_kv_heads_test=kv_heads[1])
    x, y = _data(R=12, N=8)
    model = build_tiny_v3(cfg)
    retrofit.patch(model, mode)
    full = _predict(model, x, y)
    cache, out = _cache_forward(model, x, y, 8, kv_cache_dtype=kv_dtype)
    assert isinstance(cache, PresenceTabPFNV3Cache)
    entry_cls = PresenceKVCacheEntry if kv_dtype is None else PresenceQuantizedKVCacheEntry
    assert all(type(e) is entry_cls and e.presence.shape == (2, 8) for e in cache.kv.values())
    tol = 1e-5 if kv_dtype is None else 5e-2  # int8 K/V
    torch.testing.assert_close(out, full, rtol=tol, atol=tol)


def test_cache_concatenate_to_and_quantize_keep_presence():
    x, y = _data(R=12, N=8)
    model = build_tiny_v3()
    retrofit.patch(model, "oattention")
    c1, _ = _cache_forward(model, x, y, 8)
    c2, _ = _cache_forward(model, x.flip(1), y.flip(1), 8)
    p1, p2 = c1.kv[0].presence.clone(), c2.kv[0].presence.clone()
    q1 = c1.quantize().to("cpu")
    q2 = c2.quantize().to("cpu")
    assert type(q1) is PresenceTabPFNV3Cache and type(q1.kv[0]) is PresenceQuantizedKVCacheEntry
    merged = type(q1).concatenate([q1, q2])
    assert type(merged) is PresenceTabPFNV3Cache
    assert torch.equal(merged.kv[0].presence, torch.cat([p1, p2]))
    dense = merged.kv[1].dequantize(torch.float32)
    assert type(dense) is PresenceKVCacheEntry and dense.presence.shape == (4, 8)


def test_a_cache_without_presence_is_refused():
    x, y = _data(R=12, N=8)
    unpatched = build_tiny_v3()
    cache, _ = _cache_forward(unpatched, x, y, 8)
    assert type(cache) is TabPFNV3Cache
    model = build_tiny_v3()
    retrofit.patch(model, "oattention")
    with pytest.raises(MissingPresenceError, match=r"icl_blocks\.0"), torch.inference_mode():
        model(x[8:], y, kv_cache=cache, x_is_test_only=True)


def test_unpatched_block_is_still_an_icl_block_after_unpatch():
    model = build_tiny_v3()
    retrofit.patch(model, "oattention")
    retrofit.unpatch(model)
    assert all(type(b) is ICLTransformerBlock for b in model.icl_blocks)
