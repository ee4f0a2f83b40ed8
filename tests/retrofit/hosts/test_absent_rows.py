"""A train row marked absent by ``retrofit.row_presence`` is inert from the model's input on.

Every host class tabpfn 9.2 ships (v2, v2.5, v2.6, v3, v3.5), as a regressor and
as a classifier, tiny, random, float64, zero-initialised projections perturbed
(tests/helpers/tiny_hosts.py), both modes:

* (a) with rows J marked absent, every other row's final block carrier and every
  test row's output equal those of the same patched model run on the context
  with rows J removed, within ``MODEL_ULPS[float64]`` ulps of the reference's
  largest magnitude (tests/helpers/exactness.py: a sequence of another length
  is blocked otherwise by the BLAS);
* (b) the absent rows are exactly 0 at the entry of block 0 and after every
  block;
* (c) controls: the unpatched host, and the patched host with rows J zeroed
  only where the blocks start (the stages before them still reading rows J:
  the in-model scaler, the inducing points, the encoder's statistics), both
  miss (a) by more than 1e6 ulps;
* (d) every row present reproduces the patched output bit for bit, an
  identity-configured patch reproduces the host, and ``unpatch`` restores it.

Also: a presence pattern per batch element, the split ICL stage a ragged batch
runs through, a NaN train target (imputed from the present rows), and the
validation of ``present_BN`` where it enters (values, shape, nesting, a KV cache
of several patterns).

Shape letters: R rows, B batch, C features, N train rows, M test rows, T
thinking rows, E embedding.
"""

from __future__ import annotations

import pytest
import torch
from tabpfn.architectures.tabpfn_v3 import TabPFNV3

import retrofit
from tests.helpers.exactness import MODEL_ULPS, assert_exactly_zero, deviation_in_ulps
from tests.helpers.tiny_hosts import HOST_NAMES, build_task_host

HOSTS = HOST_NAMES
TASKS = ("regression", "multiclass")
MODES = ("oattention", "full-o")
F64_ULPS = MODEL_ULPS[torch.float64]
R, N, B, C, CLASSES = 14, 9, 2, 4, 4
ABSENT = (2, 5)  # labels 2 and 2 (y = row % 3): the present rows keep every class
# Presence rounds to 1 for every non-null carrier with tau = 1e-30, so n_eff = n and,
# with eps_den = 0, OAttention is softmax attention: the patch computes the host.
IDENTITY = {"tau": 1e-30, "eps_den": 0.0, "support": "count"}


def _model(name: str, task: str, mode: str = "none", **patch_kwargs):
    model = build_task_host(name, task, CLASSES)
    if mode != "none":
        retrofit.patch(model, mode, **patch_kwargs)
    return model


def _data(task: str, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    x_RBC = torch.randn(R, B, C, generator=g, dtype=torch.float64)
    if task == "multiclass":
        y_NB = (torch.arange(N) % 3).double()[:, None].expand(N, B).contiguous()
    else:
        y_NB = torch.randn(N, B, generator=g, dtype=torch.float64)
    return x_RBC, y_NB


def _blocks(model):
    return (
        model.icl_blocks
        if isinstance(model, TabPFNV3) or hasattr(model, "icl_blocks")
        else model.blocks
    )


def _thinking_rows(model) -> int:
    return int(getattr(getattr(model, "add_thinking_rows", None), "num_thinking_rows", 0))


class _Carriers:
    """Records block 0's input and every block's output (``(B, rows, ...)``)."""

    def __init__(self, model):
        blocks = _blocks(model)
        self.entry, self.outputs = None, []
        self.handles = [blocks[0].register_forward_pre_hook(self._pre)]
        self.handles += [b.register_forward_hook(self._post) for b in blocks]

    def _pre(self, module, args):
        x = args[0][0] if isinstance(args[0], list) else args[0]
        self.entry = x.clone()

    def _post(self, module, args, output):
        self.outputs.append(output[0].clone())

    def close(self):
        for h in self.handles:
            h.remove()


def _forward(model, x, y, task, present=None, zero_at_entry=()):
    """(output, carriers) of one forward; rows ``zero_at_entry`` zeroed at block 0's entry."""
    kwargs = {"task_type": task} if "V3p5" in type(model).__qualname__ else {}
    offset = _thinking_rows(model) if not hasattr(model, "icl_blocks") else 0
    handles = []
    if zero_at_entry:

        def zero(module, args):
            container = args[0]
            x_BR = container.pop(0) if isinstance(container, list) else container
            x_BR = x_BR.clone()
            x_BR[:, [offset + j for j in zero_at_entry]] = 0
            return ([x_BR] if isinstance(container, list) else x_BR, *args[1:])

        handles.append(_blocks(model)[0].register_forward_pre_hook(zero))
    rec = _Carriers(model)
    try:
        with torch.inference_mode():
            if present is None:
                out = model(x, y, **kwargs)
            else:
                with retrofit.row_presence(model, present):
                    out = model(x, y, **kwargs)
    finally:
        rec.close()
        for h in handles:
            h.remove()
    return out, rec


def _present(absent=ABSENT):
    present = torch.ones(N, dtype=torch.bool)
    present[list(absent)] = False
    return present


def _kept_rows(absent=ABSENT):
    return [r for r in range(R) if r not in absent]


def _drift(out, ref):
    return deviation_in_ulps(out, ref, scale=ref.double().abs().max().item())


def _removed(model, x, y, task, absent=ABSENT):
    """The reference: the same model on the context without rows ``absent``."""
    keep = _kept_rows(absent)
    return _forward(model, x[keep], y[[r for r in range(N) if r not in absent]], task)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("task", TASKS)
@pytest.mark.parametrize("name", HOSTS)
def test_rows_marked_absent_are_the_context_without_them_and_stay_null(name, task, mode):
    model = _model(name, task, mode)
    x, y = _data(task)
    out, rec = _forward(model, x, y, task, present=_present())
    ref, ref_rec = _removed(model, x, y, task)
    offset = _thinking_rows(model) if not hasattr(model, "icl_blocks") else 0
    kept = list(range(offset)) + [offset + r for r in _kept_rows()]
    absent = [offset + j for j in ABSENT]
    # (a) every test row's output and every other row's final carrier
    assert out.shape == ref.shape
    assert _drift(out, ref) <= F64_ULPS
    assert _drift(rec.outputs[-1][:, kept], ref_rec.outputs[-1]) <= F64_ULPS
    # (b) the absent rows are the null carrier from the blocks' entry to the last block
    assert_exactly_zero(rec.entry[:, absent])
    for carriers in rec.outputs:
        assert_exactly_zero(carriers[:, absent])


@pytest.mark.parametrize("task", TASKS)
@pytest.mark.parametrize("name", HOSTS)
def test_rows_absent_per_batch_element_are_each_elements_context_without_them(name, task):
    model = _model(name, task, "full-o")
    x, y = _data(task)
    absent_by_element = [(2, 5), (1,)]
    present_BN = torch.stack([_present(a) for a in absent_by_element])
    out, _ = _forward(model, x, y, task, present=present_BN)
    for b, absent in enumerate(absent_by_element):
        ref, _ = _removed(model, x[:, b : b + 1], y[:, b : b + 1], task, absent)
        assert _drift(out[:, b : b + 1], ref) <= F64_ULPS


@pytest.mark.parametrize("task", TASKS)
@pytest.mark.parametrize("name", HOSTS)
def test_the_controls_miss_the_context_without_the_rows(name, task):
    x, y = _data(task)
    host = _model(name, task)
    with pytest.raises(retrofit.NotPatchedError):
        with retrofit.row_presence(host, _present()):
            pass
    # The unpatched host, rows J zeroed at the blocks' entry: zero rows are not null there.
    out, _ = _forward(host, x, y, task, zero_at_entry=ABSENT)
    ref, _ = _removed(host, x, y, task)
    assert _drift(out, ref) > 1e6 * F64_ULPS
    # The patched host closed from the blocks' entry only: rows J still reach the others
    # through the stages before it.
    model = _model(name, task, "full-o")
    out, _ = _forward(model, x, y, task, zero_at_entry=ABSENT)
    ref, _ = _removed(model, x, y, task)
    assert _drift(out, ref) > 1e6 * F64_ULPS


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("task", TASKS)
@pytest.mark.parametrize("name", HOSTS)
def test_all_present_identity_and_unpatch_reproduce(name, task, mode):
    x, y = _data(task)
    host_out, _ = _forward(_model(name, task), x, y, task)
    model = _model(name, task, mode)
    today, _ = _forward(model, x, y, task)
    all_present, _ = _forward(model, x, y, task, present=torch.ones(B, N))
    assert torch.equal(all_present, today)
    assert (today - host_out).abs().max() > 1e-4  # a real patch changes the output
    identity = _model(name, task, mode, **IDENTITY)
    assert _drift(_forward(identity, x, y, task)[0], host_out) <= F64_ULPS
    retrofit.unpatch(model)
    assert type(model) is type(_model(name, task))
    assert torch.equal(_forward(model, x, y, task)[0], host_out)


@pytest.mark.parametrize("name", HOSTS)
def test_row_presence_is_validated_where_it_enters(name):
    model = _model(name, "regression", "oattention")
    x, y = _data("regression")
    with pytest.raises(retrofit.InvalidInputError, match="0 and 1"):
        with retrofit.row_presence(model, torch.full((N,), 0.5)):
            pass
    with pytest.raises(retrofit.InvalidInputError, match="does not fit"):
        _forward(
            model, x, y, "regression", present=torch.ones(N + 1).index_fill(0, torch.tensor([0]), 0)
        )
    with retrofit.row_presence(model, _present()):
        with pytest.raises(retrofit.InvalidInputError, match="already active"):
            with retrofit.row_presence(model, _present()):
                pass
    kwargs = {"task_type": "regression"} if name == "tabpfn_v3_5" else {}
    # A KV cache holds one context: it is built under one pattern of absent rows at most
    # (tests/retrofit/hosts/test_row_weights.py builds one), never under several.
    several = torch.stack([_present((2, 5)), _present((1,))])
    with pytest.raises(retrofit.InvalidInputError, match="KV cache"):
        with torch.inference_mode(), retrofit.row_presence(model, several):
            model(x, y, return_kv_cache=True, **kwargs)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", HOSTS)
def test_the_split_icl_stage_honours_row_presence(name, mode):
    # The route of a ragged batch (retrofit.batching): embed -> run_blocks -> decode;
    # v2.5 and v2.6 carry their T thinking rows first, keys with the N train rows.
    from retrofit.hosts.common.base import icl_stage_for

    model = _model(name, "regression", mode)
    x, y = _data("regression")
    kwargs = {"task_type": "regression"} if name == "tabpfn_v3_5" else {}
    stage = icl_stage_for(model)
    keep_train = [r for r in range(N) if r not in ABSENT]
    offset = 0 if hasattr(model, "icl_blocks") else _thinking_rows(model)
    with torch.inference_mode():
        with retrofit.row_presence(model, _present()):
            carriers = stage.embed(model, x, y, **kwargs)
            out = stage.decode(
                model, stage.run_blocks(model, carriers, offset + N, **kwargs)[:, offset + N :]
            )
        ref = model(x[_kept_rows()], y[keep_train], **kwargs)
    assert_exactly_zero(carriers[:, [offset + j for j in ABSENT]])
    assert _drift(out, ref) <= F64_ULPS


@pytest.mark.parametrize("name", HOSTS)
def test_a_missing_target_is_imputed_from_the_present_rows(name):
    # A NaN train target is imputed with the mean of the train targets: of the present
    # ones only, as on the context without the absent rows.
    model = _model(name, "regression", "oattention")
    x, y = _data("regression")
    y = y.clone()
    y[0] = float("nan")
    y[list(ABSENT)] = 50.0  # far from the others: their mean would move the imputation
    out, _ = _forward(model, x, y, "regression", present=_present())
    ref, _ = _removed(model, x, y, "regression")
    assert _drift(out, ref) <= F64_ULPS


@pytest.mark.parametrize("name", HOSTS)
def test_a_presence_with_no_present_train_row_is_refused_in_one_line(name):
    # "The context without rows J" for J = every row is a forward on no train row, which no
    # host has (each fails on it in a reshape): so an empty context is refused where the
    # presence enters, for (N,) and (B, N), as is a mask that names no train row.
    model = _model(name, "regression", "full-o")
    x, y = _data("regression")
    kwargs = {"task_type": "regression"} if name == "tabpfn_v3_5" else {}
    with pytest.raises(RuntimeError), torch.inference_mode():
        model(x[N:], y[:0], **kwargs)
    one_empty = torch.ones(B, N, dtype=torch.bool)
    one_empty[1] = False
    for present, match in (
        (torch.zeros(N), "every train row absent"),
        (torch.zeros(B, N, dtype=torch.bool), "every train row of batch element 0 absent"),
        (one_empty, "every train row of batch element 1 absent"),
        (torch.ones(0), r"shape \(0,\) names no train row"),
        (torch.ones(B, 0), rf"shape \({B}, 0\) names no train row"),
    ):
        with pytest.raises(retrofit.InvalidInputError, match=match) as err:
            with retrofit.row_presence(model, present):
                pass
        assert "\n" not in str(err.value)
    one_present = torch.zeros(N)
    one_present[4] = 1  # a context of one row is a context: the model on that row alone
    out, _ = _forward(model, x, y, "regression", present=one_present)
    ref, _ = _removed(model, x, y, "regression", absent=[r for r in range(N) if r != 4])
    assert _drift(out, ref) <= F64_ULPS
