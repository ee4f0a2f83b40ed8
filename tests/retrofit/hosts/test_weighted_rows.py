"""A train row of weight ``w`` under ``retrofit.row_weights`` is the row given ``w`` times.

Every host class tabpfn 9.2 ships (v2, v2.5, v2.6, v3, v3.5), as a regressor and
as a classifier, tiny, random, float64, zero-initialised projections perturbed
(tests/helpers/tiny_hosts.py), both modes, with NaN in some feature cells (so
the imputation means are read):

* (a) random integer weights in 0..3 on every row, a different draw per batch
  element, against each element's context with every row repeated that many
  times (0: removed): every test row's output within ``MODEL_ULPS[float64]``
  ulps of the reference's largest magnitude (tests/helpers/exactness.py: a
  context of another length is blocked otherwise by the BLAS); one row of
  weight 2 or 3 against that row repeated;
* (b) every weight 1, as ``(N,)`` or ``(B, N)``, is the forward without weights
  bit for bit (the same code path);
* (c) controls: each cross-row stage's weighting switched off on its own (its
  weights replaced by ones, or no source weights) misses (a) by more than
  1e6 ulps, so each is needed and the proof can fail;
* the KV cache of ``fit_with_cache`` built under weights gives the repeated
  context's predictions from the test rows alone; the row-chunked and
  peak-memory-chunked paths; a NaN train target imputed with the weighted
  mean; the split ICL stage of a ragged batch; what is refused.

Shape letters: R rows, B batch, C features, N train rows, M test rows.
"""

from __future__ import annotations

import contextlib
import dataclasses

import numpy as np
import pytest
import torch

import retrofit
from retrofit.hosts.common import row_weights as row_weights_module
from retrofit.hosts.v2 import model as v2_model
from retrofit.hosts.v2.block import OTabPFNBlockV2
from retrofit.hosts.v3 import icl_host
from retrofit.hosts.v3.icl_block import OICLBlock
from retrofit.hosts.v3.many_class_decoder import OManyClassDecoder
from tests.helpers.exactness import MODEL_ULPS, deviation_in_ulps
from tests.helpers.tiny_hosts import HOST_NAMES, build_task_host

TASKS = ("regression", "multiclass")
MODES = ("oattention", "full-o")
F64_ULPS = MODEL_ULPS[torch.float64]
# vote_weights are float32 (as the host's): a few of its ulps of weights up to 1.
MODULE_ATOL = 16 * torch.finfo(torch.float32).eps
R, N, B, C, CLASSES = 14, 9, 2, 4, 4
NAN_CELLS = ((1, 0), (4, 2), (11, 1))  # (row, column): two train cells and a test cell


def _model(name: str, task: str, mode: str = "full-o"):
    model = build_task_host(name, task, CLASSES)
    retrofit.patch(model, mode)
    return model


def _data(task: str, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    x_RBC = torch.randn(R, B, C, generator=g, dtype=torch.float64)
    for row, column in NAN_CELLS:
        x_RBC[row, :, column] = float("nan")
    if task == "multiclass":
        y_NB = (torch.arange(N) % 3).double()[:, None].expand(N, B).contiguous()
    else:
        y_NB = torch.randn(N, B, generator=g, dtype=torch.float64)
    return x_RBC, y_NB


def _counts(seed: int) -> torch.Tensor:
    """Integer weights 0..3 per batch element: every element has a 0 and a weight >= 2."""
    g = torch.Generator().manual_seed(seed)
    counts_BN = torch.randint(0, 4, (B, N), generator=g).double()
    counts_BN[:, 0], counts_BN[:, 3] = 0.0, 3.0
    counts_BN[:, 1] = 1.0  # a row of every class stays (y = row % 3)
    return counts_BN


def _kwargs(model, task: str) -> dict:
    return {"task_type": task} if "V3p5" in type(model).__qualname__ else {}


def _forward(model, x, y, task, weights=None, **kwargs):
    with torch.inference_mode():
        if weights is None:
            return model(x, y, **_kwargs(model, task), **kwargs)
        with retrofit.row_weights(model, weights):
            return model(x, y, **_kwargs(model, task), **kwargs)


def _repeated(x_RBC, y_NB, counts_N):
    """The context with train row ``j`` given ``counts_N[j]`` times, then the test rows."""
    rows = [j for j in range(N) for _ in range(int(counts_N[j]))]
    return torch.cat([x_RBC[rows], x_RBC[N:]]), y_NB[rows]


def _repetition_drift(model, task, counts_BN, x, y, **kwargs) -> float:
    """Ulps between the weighted forward and each element's repeated context."""
    out = _forward(model, x, y, task, counts_BN, **kwargs)
    worst = 0.0
    for b in range(B):
        xr, yr = _repeated(x[:, b : b + 1], y[:, b : b + 1], counts_BN[b])
        ref = _forward(model, xr, yr, task, **kwargs)
        scale = ref.double().abs().max().item()
        worst = max(worst, deviation_in_ulps(out[:, b : b + 1], ref, scale=scale))
    return worst


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("task", TASKS)
@pytest.mark.parametrize("name", HOST_NAMES)
def test_integer_weights_are_the_rows_repeated(name, task, mode):
    model = _model(name, task, mode)
    x, y = _data(task)
    assert _repetition_drift(model, task, _counts(seed=1), x, y) <= F64_ULPS
    # One row of weight k (the others 1), the same weights for every element.
    for k in (2.0, 3.0):
        w_N = torch.ones(N, dtype=torch.float64)
        w_N[4] = k
        assert _repetition_drift(model, task, w_N.expand(B, N), x, y) <= F64_ULPS


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("task", TASKS)
@pytest.mark.parametrize("name", HOST_NAMES)
def test_every_weight_one_is_the_forward_without_weights_bit_for_bit(name, task, mode):
    model = _model(name, task, mode)
    x, y = _data(task)
    today = _forward(model, x, y, task)
    assert torch.equal(_forward(model, x, y, task, torch.ones(N)), today)
    assert torch.equal(_forward(model, x, y, task, np.ones((B, N))), today)
    host = build_task_host(name, task, CLASSES)
    assert (today - _forward(host, x, y, task)).abs().max() > 1e-4  # a real patch


def _ones_weights(function):
    """``function`` with its row weights replaced by ones: that stage reads rows unweighted."""

    def unweighted(x, w, *args):
        return function(x, torch.ones_like(w), *args)

    return unweighted


def _no_inducing_weights(model, w):
    return contextlib.nullcontext()


# (stage, the hosts it exists in, how its weighting is switched off). Each control
# switches off exactly one stage; the feature scaler reads the data imputed with the
# (still weighted) means, and the imputation means read the NaN cells of _data.
STAGES = {
    "feature imputation means": (
        HOST_NAMES,
        [
            (icl_host, "weighted_finite_mean"),
            (v2_model, "weighted_finite_mean"),
        ],
    ),
    "standard scaler": (
        HOST_NAMES,
        [(icl_host, "weighted_scaler_fit"), (v2_model, "weighted_scaler_fit")],
    ),
    "ECDF ranks": (("tabpfn_v3_5",), [(icl_host, "weighted_ecdf_context")]),
    "inducing points": (("tabpfn_v3", "tabpfn_v3_5"), [(icl_host, "weighted_inducing_points")]),
    "target mean": (
        ("tabpfn_v2", "tabpfn_v2_5", "tabpfn_v2_6"),
        [(v2_model, "weighted_target_mean")],
    ),
    "ICL sources and n_eff": (
        ("tabpfn_v3", "tabpfn_v3_5"),
        [(OICLBlock, "source_weights_or_none")],
    ),
    "row attention sources": (
        ("tabpfn_v2", "tabpfn_v2_5", "tabpfn_v2_6"),
        [(OTabPFNBlockV2, "source_weights_or_none")],
    ),
    "decoder sources and n_eff": (
        ("tabpfn_v3", "tabpfn_v3_5"),
        [(OManyClassDecoder, "source_weights_or_none")],
    ),
}
CONTROLS = [
    (stage, name) for stage, (hosts, _) in STAGES.items() for name in HOST_NAMES if name in hosts
]


def _switch_off(monkeypatch, stage: str) -> None:
    for owner, attr in STAGES[stage][1]:
        if attr == "source_weights_or_none":
            monkeypatch.setattr(owner, attr, lambda self: None)
        elif attr == "weighted_inducing_points":
            monkeypatch.setattr(owner, attr, _no_inducing_weights)
        else:
            monkeypatch.setattr(owner, attr, _ones_weights(getattr(owner, attr)))


@pytest.mark.parametrize(("stage", "name"), CONTROLS)
def test_each_weighted_stage_is_needed(stage, name, monkeypatch):
    task = "multiclass" if stage.startswith("decoder") else "regression"
    model = _model(name, task)
    x, y = _data(task)
    counts_BN = _counts(seed=1)
    assert _repetition_drift(model, task, counts_BN, x, y) <= F64_ULPS
    _switch_off(monkeypatch, stage)
    assert _repetition_drift(model, task, counts_BN, x, y) > 1e6 * F64_ULPS


@pytest.mark.parametrize("name", HOST_NAMES)
def test_a_nan_train_target_is_imputed_with_the_weighted_mean(name, monkeypatch):
    model = _model(name, "regression")
    x, y = _data("regression")
    y = y.clone()
    y[2] = float("nan")
    y[3] = 20.0  # weight 3 and far from the others: an unweighted mean would move
    counts_BN = _counts(seed=2)
    if name == "tabpfn_v2":
        with pytest.raises(retrofit.InvalidRowWeightsError, match="non-finite train target"):
            _forward(model, x, y, "regression", counts_BN)
        return
    assert _repetition_drift(model, "regression", counts_BN, x, y) <= F64_ULPS
    owner = icl_host if "v3" in name else v2_model
    monkeypatch.setattr(owner, "weighted_target_mean", _ones_weights(owner.weighted_target_mean))
    assert _repetition_drift(model, "regression", counts_BN, x, y) > 1e6 * F64_ULPS


def _options(model, **changes):
    return dataclasses.replace(model.get_default_performance_options(), **changes)


@pytest.mark.parametrize("name", HOST_NAMES)
def test_the_chunked_paths_weight_each_chunk(name):
    # The blocks' peak-memory chunks take consecutive slices of the batch (and v2's of
    # its columns); v3's and v3.5's row chunks read precomputed inducing states, built
    # per column chunk.
    model = _model(name, "multiclass")
    x, y = _data("multiclass")
    options = _options(model, save_peak_memory_factor=2)
    if hasattr(model, "inference_chunk_cells"):
        model.inference_chunk_cells = 3 * B * C  # three rows a chunk
        model.inference_col_chunk_size = 1
    drift = _repetition_drift(
        model, "multiclass", _counts(seed=3), x, y, performance_options=options
    )
    assert drift <= F64_ULPS


def _cache_prediction(model, task, x, y, weights=None):
    """Build the KV cache from the train rows (under ``weights``), then predict the test rows."""
    n = y.shape[0]
    with torch.inference_mode():
        with (
            retrofit.row_weights(model, weights)
            if weights is not None
            else contextlib.nullcontext()
        ):
            _, cache = model(x[:n], y, return_kv_cache=True, **_kwargs(model, task))
        return model(x[n:], y, kv_cache=cache, x_is_test_only=True, **_kwargs(model, task)), cache


@pytest.mark.parametrize("task", TASKS)
@pytest.mark.parametrize("name", HOST_NAMES)
def test_a_kv_cache_built_under_weights_is_the_repeated_context(name, task):
    model = _model(name, task)
    x, y = _data(task)
    w_N = torch.tensor([0.0, 1, 2, 3, 1, 2, 0, 1, 3], dtype=torch.float64)
    out, cache = _cache_prediction(model, task, x, y, w_N)
    xr, yr = _repeated(x, y, w_N)
    ref = _forward(model, xr, yr, task)
    assert deviation_in_ulps(out, ref, scale=ref.abs().max().item()) <= F64_ULPS
    # The entries carry the weights through what tabpfn does to a cache.
    entries = list(cache.kv.values())
    assert all(e.weights is not None for e in entries)
    moved = entries[0].quantize().dequantize(torch.float64)
    assert torch.equal(moved.weights, entries[0].weights)
    with pytest.raises(retrofit.InvalidRowWeightsError, match="KV cache"):
        with torch.inference_mode(), retrofit.row_weights(model, w_N):
            model(x[N:], y, kv_cache=cache, x_is_test_only=True, **_kwargs(model, task))


@pytest.mark.parametrize("name", HOST_NAMES)
def test_the_split_icl_stage_honours_row_weights(name):
    # The route of a ragged batch (retrofit.batching): embed under the weights, the blocks
    # under the source weights; v2.5 and v2.6 carry their thinking rows first.
    from retrofit.hosts.common.base import icl_stage_for

    model = _model(name, "regression")
    x, y = _data("regression")
    kwargs = _kwargs(model, "regression")
    stage = icl_stage_for(model)
    thinking = getattr(model, "add_thinking_rows", None)
    offset = 0 if thinking is None else int(thinking.num_thinking_rows)
    w_N = torch.tensor([1.0, 2, 0, 3, 1, 1, 2, 0, 1], dtype=torch.float64)
    with torch.inference_mode():
        with retrofit.row_weights(model, w_N):
            carriers = stage.embed(model, x, y, **kwargs)
        with row_weights_module.source_weights(model, w_N.expand(B, N)):
            blocks_out = stage.run_blocks(model, carriers, offset + N, **kwargs)
        out = stage.decode(model, blocks_out[:, offset + N :])
    xr, yr = _repeated(x, y, w_N)
    ref = _forward(model, xr, yr, "regression")
    assert deviation_in_ulps(out, ref, scale=ref.abs().max().item()) <= F64_ULPS


def test_real_weights_interpolate_and_scale_as_copies():
    # Frequency semantics: every weight times c is c copies of the data; a real weight
    # lies between its integer neighbours (the model is smooth in it).
    model = _model("tabpfn_v3_5", "regression")
    x, y = _data("regression")
    w_N = torch.tensor([0.5, 1.5, 2.25, 1, 0.75, 1, 2, 1, 1], dtype=torch.float64)
    half = _forward(model, x, y, "regression", w_N)
    double = _forward(model, x, y, "regression", 2 * w_N)
    reps = _forward(model, x, y, "regression", 4 * w_N)  # integers: the rows repeated
    assert torch.isfinite(half).all() and not torch.equal(half, double)
    xr, yr = _repeated(x, y, 4 * w_N)
    ref = _forward(model, xr, yr, "regression")
    assert deviation_in_ulps(reps, ref, scale=ref.abs().max().item()) <= F64_ULPS


@pytest.mark.parametrize(
    ("weights", "match"),
    [
        (torch.full((N,), -1.0), "negative"),
        (torch.full((N,), float("nan")), "NaN or infinity"),
        (torch.full((N,), float("inf")), "NaN or infinity"),
        (torch.zeros(B, N), "every weight 0"),
        (torch.ones(B, N, 1), r"\(B, N\) or \(N,\)"),
        (torch.ones(0), "at least one train row"),
        (np.array(["a"] * N), "numeric"),
        ([1.0] * N, r"\(B, N\) or \(N,\)"),
    ],
)
def test_row_weights_are_validated_where_they_enter(weights, match):
    model = _model("tabpfn_v3", "regression")
    with pytest.raises(retrofit.InvalidRowWeightsError, match=match):
        with retrofit.row_weights(model, weights):
            pass
    assert issubclass(retrofit.InvalidRowWeightsError, (retrofit.InvalidInputError, ValueError))


@pytest.mark.parametrize("name", HOST_NAMES)
def test_what_row_weights_refuse(name):
    model = _model(name, "regression")
    x, y = _data("regression")
    kwargs = _kwargs(model, "regression")
    w_BN = _counts(seed=1)
    with pytest.raises(retrofit.InvalidRowWeightsError, match="does not fit"):
        _forward(model, x, y[:-1], "regression", w_BN)
    with retrofit.row_weights(model, w_BN):
        with pytest.raises(retrofit.InvalidRowWeightsError, match="already active"):
            with retrofit.row_presence(model, torch.ones(N)):
                pass
        # Two patterns of rows of weight 0: no one context for a cache.
        with (
            pytest.raises(retrofit.InvalidRowWeightsError, match="KV cache"),
            torch.inference_mode(),
        ):
            model(x[:N], y, return_kv_cache=True, **kwargs)
    with pytest.raises(retrofit.NotPatchedError):
        with retrofit.row_weights(build_task_host(name, "regression"), w_BN):
            pass
    # The caller's array is copied where it enters: changing it inside changes nothing.
    expected = _forward(model, x, y, "regression", w_BN)
    weights = w_BN.clone()
    with torch.inference_mode(), retrofit.row_weights(model, weights):
        weights.fill_(5.0)
        assert torch.equal(model(x, y, **kwargs), expected)


@pytest.mark.parametrize("name", ["tabpfn_v3", "tabpfn_v3_5"])
def test_n_eff_as_presence_mass_counts_the_weights_too(name):
    model = build_task_host(name, "multiclass", CLASSES)
    retrofit.patch(model, "full-o", support="mass")
    x, y = _data("multiclass")
    assert _repetition_drift(model, "multiclass", _counts(seed=4), x, y) <= F64_ULPS


def test_the_inducing_points_are_the_host_s_again_after_a_weighted_forward():
    model = _model("tabpfn_v3", "regression")
    x, y = _data("regression")
    attentions = [
        layer.cross_attn_block1.attn for layer in model.feature_distribution_embedder.layers
    ]
    classes = [type(a) for a in attentions]
    with pytest.raises(RuntimeError, match="boom"), torch.inference_mode():
        with retrofit.row_weights(model, _counts(seed=1) + 1):
            model.column_aggregator.register_forward_pre_hook(_boom)
            model(x, y)
    assert [type(a) for a in attentions] == classes
    assert all(row_weights_module.SOURCE_WEIGHTS_ATTR not in a.__dict__ for a in attentions)


def _boom(module, args):
    raise RuntimeError("boom")


@pytest.mark.parametrize("name", ["tabpfn_v3", "tabpfn_v3_5"])
def test_the_decoder_s_vote_of_a_weighted_row_is_its_copies_votes_together(name):
    model = _model(name, "multiclass")
    decoder = model.get_submodule(model.decoder_path)
    g = torch.Generator().manual_seed(5)
    train_NE = torch.randn(1, N, decoder.input_size, generator=g, dtype=torch.float64)
    test_ME = torch.randn(1, 4, decoder.input_size, generator=g, dtype=torch.float64)
    w_N = _counts(seed=6)[0]
    rows = [j for j in range(N) for _ in range(int(w_N[j]))]
    with torch.inference_mode():
        with row_weights_module.source_weights(model, w_N[None]):
            weighted = decoder.vote_weights(decoder.project_keys(train_NE), test_ME)
        copies = decoder.vote_weights(decoder.project_keys(train_NE[:, rows]), test_ME)
    together = torch.zeros_like(weighted).index_add_(-1, torch.tensor(rows), copies)
    torch.testing.assert_close(weighted, together, rtol=0, atol=MODULE_ATOL)
