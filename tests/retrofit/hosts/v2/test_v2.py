"""The TabPFN v2 host: patch table, null-row proofs, identity, cache, unpatch, loading.

Tiny random ``TabPFNV2`` models with perturbed zero-initialised projections
(otherwise every block is the identity and a swap tests nothing). Carriers are
per cell, ``(B, R, C, E)``; the null token is a row whose cells are all zero.
"""

from __future__ import annotations

import pytest
import torch
from tabpfn import model_loading
from tabpfn.architectures.kv_cache import KVCacheEntry
from tabpfn.architectures.tabpfn_v2 import TabPFNBlock, TabPFNV2

import retrofit
from retrofit.errors import MissingPresenceError
from retrofit.hosts.v2.block import OTabPFNBlockForV2, OTabPFNBlockV2
from tests.helpers.tiny_hosts import TINY_V2, build_tiny_v2, save_tiny_v2_checkpoint

MODES = ("oattention", "full-o")
B, R, N, C, E = 2, 9, 6, 3, 8  # batch, rows, train rows, columns (cells per row), embedding


def _carriers(seed=0, rows=R) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(B, rows, C, E, generator=g)


def _with_null_row(x_BRCE: torch.Tensor, at: int) -> torch.Tensor:
    null = torch.zeros(B, 1, C, E, dtype=x_BRCE.dtype)
    return torch.cat([x_BRCE[:, :at], null, x_BRCE[:, at:]], dim=1)


def _run_blocks(model, x_BRCE, single_eval_pos, factor=None) -> torch.Tensor:
    h = x_BRCE.clone()
    with torch.inference_mode():
        for block in model.blocks:
            container = [h]
            h, _ = block(container, single_eval_pos, factor)
            assert container == []  # the list form is emptied with pop(0), as in tabpfn
    return h


def _data(rows=12, train=8, features=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(rows, B, features, generator=g), torch.randn(train, B, generator=g)


# --- structure ----------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_patch_swaps_every_block_sharing_parameters(mode):
    model = build_tiny_v2(nlayers=3)
    originals = list(model.blocks)
    keys = list(model.state_dict())
    ptrs = {name: p.data_ptr() for name, p in model.named_parameters()}
    report = retrofit.patch(model, mode, tau=2.0, eps_den=1e-5)

    assert all(type(b) is OTabPFNBlockForV2 for b in model.blocks)
    swaps = [m for m in report.modules if m.kind == "swap"]
    assert [m.path for m in swaps] == ["blocks.0", "blocks.1", "blocks.2"]
    assert {(m.old_class, m.new_class) for m in swaps} == {("TabPFNBlock", "OTabPFNBlockV2")}
    n_block = sum(p.numel() for p in originals[0].parameters())
    assert all(m.shared_parameters == n_block for m in swaps)
    # The model's class is swapped for the encoder under row presence, named as the host.
    assert [(m.path, m.new_class) for m in report.modules if m.kind == "class"] == [
        ("", "OTabPFNV2")
    ]
    assert type(model).__name__ == "TabPFNV2"
    assert (report.host, report.mode, report.tau, report.eps_den) == ("TabPFNV2", mode, 2.0, 1e-5)
    assert list(model.state_dict()) == keys
    assert {name: p.data_ptr() for name, p in model.named_parameters()} == ptrs
    for name, p in model.named_parameters():
        assert p.requires_grad is not name.startswith("blocks."), name


def test_a_foreign_block_fails_before_anything_is_swapped():
    model = build_tiny_v2()
    first = model.blocks[0]
    model.blocks[1] = torch.nn.Identity()
    with pytest.raises(TypeError, match=r"blocks\.1"):
        retrofit.patch(model, "oattention")
    assert model.blocks[0] is first and not retrofit.is_patched(model)


# --- identity and real change ---------------------------------------------------------


def test_identity_configured_patch_reproduces_the_host():
    # tau -> 0 makes every non-null presence 1 in float32; eps_den = 0 is plain softmax.
    x = _carriers()
    host = _run_blocks(build_tiny_v2(), x, N)
    model = build_tiny_v2()
    retrofit.patch(model, "oattention", tau=1e-30, eps_den=0.0)
    torch.testing.assert_close(_run_blocks(model, x, N), host, rtol=0, atol=5e-6)


@pytest.mark.parametrize("mode", MODES)
def test_a_real_patch_changes_the_output(mode):
    x = _carriers()
    host = _run_blocks(build_tiny_v2(), x, N)
    model = build_tiny_v2()
    retrofit.patch(model, mode)
    assert (_run_blocks(model, x, N) - host).abs().max() > 1e-2


# --- null-row proofs --------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("at", [0, 3, N, R], ids=["train-first", "train-mid", "test-first", "end"])
@pytest.mark.parametrize(("dtype", "atol"), [(torch.float32, 2e-6), (torch.float64, 1e-13)])
def test_inserted_null_row_changes_no_other_row_and_stays_null(mode, at, dtype, atol):
    # The fused kernels see one more row, so other rows agree to the rounding of
    # a different matmul shape (measured: 4.8e-7 in float32, 8.9e-16 in float64);
    # the null row itself is exactly 0.
    x = _carriers(seed=1).to(dtype)
    model = build_tiny_v2().to(dtype)
    retrofit.patch(model, mode)
    base = _run_blocks(model, x, N)
    sep = N + 1 if at < N else N  # a null among the train rows adds a train row
    out = _run_blocks(model, _with_null_row(x, at), sep)
    keep = [i for i in range(R + 1) if i != at]
    torch.testing.assert_close(out[:, keep], base, rtol=0, atol=atol)
    assert torch.equal(out[:, at], torch.zeros_like(out[:, at]))


def test_the_unpatched_host_fails_the_null_row_proof():
    # The proof above has teeth: the host's attention is diluted by a null key
    # and revives a null query.
    x = _carriers(seed=1)
    model = build_tiny_v2()
    base = _run_blocks(model, x, N)
    out = _run_blocks(model, _with_null_row(x, 3), N + 1)
    keep = [i for i in range(R + 1) if i != 3]
    assert (out[:, keep] - base).abs().max() > 1e-2
    assert out[:, 3].abs().max() > 1e-1


@pytest.mark.parametrize("mode", MODES)
def test_chunked_in_place_evaluation_matches(mode):
    x = _carriers(seed=2)
    model = build_tiny_v2()
    retrofit.patch(model, mode)
    plain = _run_blocks(model, x, N)
    torch.testing.assert_close(_run_blocks(model, x, N, factor=3), plain, rtol=0, atol=1e-6)
    with_null = _run_blocks(model, _with_null_row(x, 2), N + 1, factor=2)
    keep = [i for i in range(R + 1) if i != 2]
    torch.testing.assert_close(with_null[:, keep], plain, rtol=0, atol=1e-6)
    assert torch.equal(with_null[:, 2], torch.zeros_like(with_null[:, 2]))


def test_all_train_rows_null_gives_zero_attention_not_nan():
    model = build_tiny_v2()
    retrofit.patch(model, "oattention")
    x = _carriers(seed=3)
    x[:, :N] = 0.0
    out = _run_blocks(model, x, N)
    assert torch.isfinite(out).all()
    assert torch.equal(out[:, :N], torch.zeros_like(out[:, :N]))


# --- model forward, KV cache ----------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_kv_cache_carries_presence_and_matches_the_full_forward(mode):
    x, y = _data()
    model = build_tiny_v2()
    retrofit.patch(model, mode)
    with torch.inference_mode():
        full = model(x, y)
        out, cache = model(x[: len(y)], y, return_kv_cache=True)
        assert all(getattr(e, "presence", None) is not None for e in cache.kv.values())
        assert cache.kv[0].presence.shape == (B * 3, len(y))  # B * (2 feature groups + target)
        cached = model(x[len(y) :], None, kv_cache=cache, x_is_test_only=True)
    torch.testing.assert_close(cached, full, rtol=0, atol=1e-5)
    assert out.shape[0] == 0


def test_cached_entry_without_presence_is_refused():
    block = OTabPFNBlockV2.from_module(build_tiny_v2().blocks[0], mode="oattention")
    entry = KVCacheEntry(key=torch.zeros(B * C, N, 1, E // 2), value=torch.zeros(B * C, N, 1, 4))
    with pytest.raises(MissingPresenceError, match="blocks"):
        block(_carriers()[:, N:], 0, None, cached_kv=entry)


@pytest.mark.parametrize("mode", MODES)
def test_unpatch_restores_originals_bit_identically(mode):
    x, y = _data()
    model = build_tiny_v2()
    with torch.inference_mode():
        reference = model(x, y)
    originals = list(model.blocks)
    retrofit.patch(model, mode)
    with torch.inference_mode():
        patched = model(x, y)
    assert (patched - reference).abs().max() > 1e-3
    assert retrofit.unpatch(model).mode == mode
    assert all(a is b for a, b in zip(model.blocks, originals, strict=True))
    assert all(type(b) is TabPFNBlock for b in model.blocks)
    assert all(p.requires_grad for p in model.parameters())
    with torch.inference_mode():
        assert torch.equal(model(x, y), reference)


def test_force_recompute_layer_path_runs_patched_blocks():
    from tabpfn.architectures.interface import PerformanceOptions

    x, y = _data()
    model = build_tiny_v2()
    retrofit.patch(model, "full-o")
    with torch.inference_mode():
        plain = model(x, y)
    options = PerformanceOptions(save_peak_memory_factor=None, force_recompute_layer=True)
    with torch.no_grad():
        recomputed = model(x, y, performance_options=options)
    torch.testing.assert_close(recomputed, plain, rtol=0, atol=1e-6)


# --- loading a v2 checkpoint through tabpfn -------------------------------------------


def test_a_v2_checkpoint_loads_through_tabpfn_and_patches(tmp_path):
    path = save_tiny_v2_checkpoint(build_tiny_v2(), tmp_path / "tiny_regressor.safetensors")
    assert model_loading.resolve_model_version(path).value == "v2"
    model, criterion, _config, inference_config = model_loading.load_model(
        path=path, estimator_type="regressor"
    )
    assert type(model) is TabPFNV2
    assert criterion.borders.numel() == TINY_V2["num_buckets"] + 1
    assert inference_config.N_ESTIMATORS is not None  # tabpfn's default v2 config
    report = retrofit.patch(model, "full-o")
    assert report.host == "TabPFNV2" and report.n_replaced == TINY_V2["nlayers"]


def test_estimator_fit_modes_agree_on_a_patched_v2_checkpoint(tmp_path):
    import numpy as np

    from retrofit.regressor import OTabPFNRegressor

    path = save_tiny_v2_checkpoint(build_tiny_v2(), tmp_path / "tiny_v2_regressor.safetensors")
    rng = np.random.default_rng(0)
    X = rng.normal(size=(36, 3))
    y = X @ np.array([1.0, -1.0, 2.0])

    def predict(mode, **kwargs):
        estimator = OTabPFNRegressor(
            model_path=str(path),
            mode=mode,
            n_estimators=1,
            device="cpu",
            inference_precision=torch.float32,
            **kwargs,
        )
        return estimator.fit(X[:28], y[:28]).predict(X[28:])

    reference = predict("full-o")
    assert np.abs(reference - predict("none")).max() > 1e-3  # the patch acts
    for kwargs in ({"fit_mode": "fit_with_cache"}, {"memory_saving_mode": True}):
        np.testing.assert_allclose(predict("full-o", **kwargs), reference, rtol=0, atol=1e-5)
