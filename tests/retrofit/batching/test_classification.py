"""Ragged ``predict_proba_batched`` for classifiers (retrofit.batching.classification).

The claims, each a test here:

* one dataset through a classifier's split stage (``embed``, ``run_blocks``,
  ``decode_classes``) equals the host's ``forward`` bit for bit, on every
  classifier host class (fails when tabpfn's forward changes under the split);
* five datasets of different rows, features and class counts, padded with
  zero ICL rows and run in fused forwards on a patched tiny classifier of
  every host class (v2, v2.5, v2.6 decode per row; v3 and v3.5 with the
  many-class decoder over each dataset's own train rows), give each dataset's
  own ``predict_proba``: within ``CLASSIFIER_PROBA_ULPS`` of
  ``tests/helpers/exactness.py`` in float64 (the reference OAttention kernel)
  and in float32 (the fast kernel) (README's room: a cross-section of the hosts x
  modes x dtypes, the slow tier the rest, ``tests/helpers/tiers.py``);
* the same padding on the unpatched host moves the probabilities far beyond
  that bound (the control that keeps the equivalence from passing vacuously);
* class sets may differ on the padded path (each dataset keeps its classes as
  columns; labels equal ``predict``'s); the model's class limit still binds;
* under tabpfn's default ``inference_precision="auto"`` the batch stays within
  ``CLASSIFIER_AUTO_PROBA_BF16_ULPS`` where "auto" runs bf16 autocast, and
  within the float32 bound where it runs float32 (a CPU without hardware bf16);
* same-shape input of one class set is tabpfn's own method in every mode;
  same-shape input of other class sets (or integer labels beside text) takes
  the padded path on a patched host and is refused naming the dataset with
  ``mode="none"``, which keeps tabpfn's ragged error;
* more classes than the model's own limit (``MAX_NUMBER_OF_CLASSES`` raised
  above it) and missing labels are refused naming the dataset, on both paths;
* a host whose stage decodes no classes is refused, never decoded wrongly.
"""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
import torch
from tabpfn import TabPFNClassifier

import retrofit
import retrofit.hosts.common.base
from retrofit import OTabPFNClassifier
from retrofit.batching.bounds import (
    DEFAULT_MAX_PADDED_FRACTION,
    DEFAULT_MAX_PADDED_FRACTION_BY_DEVICE,
)
from retrofit.batching.classification import predict_batched_labels, predict_proba_batched
from retrofit.errors import BatchInputError, UnsupportedArchitectureError
from retrofit.hosts.common.base import icl_stage_for
from retrofit.hosts.v2.icl_stage import V2ICLStage
from tests.helpers.exactness import (
    CLASSIFIER_AUTO_PROBA_BF16_ULPS,
    CLASSIFIER_PROBA_ULPS,
    assert_within_ulps,
    deviation_in_ulps,
)
from tests.helpers.padding import reference_kernel
from tests.helpers.tiers import cross_section
from tests.helpers.tiny_hosts import TINY_MAX_CLASSES, tiny_classifier_specs

# (train rows, test rows, features, classes): five shapes, four class counts.
RAGGED = [(30, 7, 3, 2), (50, 12, 4, 4), (12, 3, 3, 3), (40, 9, 4, 7), (22, 5, 6, 5)]
HOSTS = ["tabpfn_v2", "tabpfn_v2_5", "tabpfn_v2_6", "tabpfn_v3", "tabpfn_v3_5"]


@pytest.fixture(autouse=True)
def _pad_as_on_an_accelerator(monkeypatch):
    """Buckets pad up to 25 %, as on an accelerator (the CPU's 5 % would mostly not pad)."""
    monkeypatch.setitem(DEFAULT_MAX_PADDED_FRACTION_BY_DEVICE, "cpu", DEFAULT_MAX_PADDED_FRACTION)


def _datasets(shapes=RAGGED, seed=0, labels=None):
    """``(X_train, y_train, X_test)`` per shape; every class occurs in the train rows."""
    rng = np.random.default_rng(seed)
    out = []
    for n, m, c, k in shapes:
        X = rng.normal(size=(n + m, c))
        y = rng.integers(0, k, size=n + m)
        y[:k] = np.arange(k)
        y = y if labels is None else np.asarray(labels)[y]
        out.append((X[:n], y[:n], X[n:]))
    return out


def _lists(sets):
    return [s[0] for s in sets], [s[1] for s in sets], [s[2] for s in sets]


def _plain(name="tabpfn_v2", mode="full-o", dtype=torch.float32, **kwargs):
    """A ``TabPFNClassifier`` over a fresh tiny classifier, patched unless ``mode="none"``."""
    specs = tiny_classifier_specs(name)
    if mode != "none":
        retrofit.patch(specs.model, mode)
    base = {"device": "cpu", "inference_precision": dtype, "n_estimators": 3}
    return TabPFNClassifier(model_path=specs, **{**base, **kwargs})


def _ours(mode="full-o", dtype=torch.float32, name="tabpfn_v2", **kwargs):
    base = {"device": "cpu", "inference_precision": dtype, "n_estimators": 3}
    specs = tiny_classifier_specs(name)
    return OTabPFNClassifier(mode=mode, model_path=specs, **{**base, **kwargs})


def _alone(sets, method="predict_proba", **kwargs):
    return [getattr(_plain(**kwargs).fit(X, y), method)(Xt) for X, y, Xt in sets]


@pytest.mark.parametrize("mode", ["oattention", "full-o"])
@pytest.mark.parametrize("name", HOSTS)
def test_one_dataset_through_the_split_classifier_stage_equals_the_host_forward(name, mode):
    model = tiny_classifier_specs(name).model.double()
    retrofit.patch(model, mode)
    stage = icl_stage_for(model)
    task = {"task_type": "multiclass"} if name == "tabpfn_v3_5" else {}
    g = torch.Generator().manual_seed(0)
    with torch.inference_mode():
        for n, m, c, k in RAGGED[:3]:
            x = torch.randn(n + m, 2, c, generator=g, dtype=torch.float64)
            y = torch.randint(0, k, (n, 2), generator=g).double()
            carriers = stage.embed(model, x, y, task_type="multiclass")
            keys = carriers.shape[1] - m
            out = stage.run_blocks(model, carriers, keys)
            split = stage.decode_classes(model, out[:, :keys], out[:, keys:], y)
            assert torch.equal(split, model(x, y, **task))


@pytest.mark.parametrize(
    ("name", "mode", "dtype"),
    # Both modes on one host per decoder kind; Full-O, the default, on the others. README's
    # room runs every host, both modes and both dtypes (float64 on both decoder kinds).
    cross_section(
        [
            (name, mode, dtype)
            for name, mode in [(name, "full-o") for name in HOSTS]
            + [("tabpfn_v2", "oattention"), ("tabpfn_v3", "oattention")]
            for dtype in (torch.float64, torch.float32)
        ],
        fast=[
            ("tabpfn_v2", "oattention", torch.float64),
            ("tabpfn_v2_5", "full-o", torch.float32),
            ("tabpfn_v2_6", "full-o", torch.float32),
            ("tabpfn_v3", "full-o", torch.float32),
            ("tabpfn_v3_5", "full-o", torch.float64),
        ],
    ),
)
def test_ragged_predict_proba_batched_equals_each_datasets_predict_proba(name, mode, dtype):
    sets = _datasets()
    kernel = reference_kernel() if dtype == torch.float64 else contextlib.nullcontext()
    with kernel:
        alone = _alone(sets, name=name, mode=mode, dtype=dtype)
        batched = predict_proba_batched(_plain(name, mode, dtype), *_lists(sets))
    assert batched.padded and batched.stats.padded_rows > batched.stats.real_rows
    assert any(len(bucket) > 1 for bucket in batched.buckets)
    for (_, y, X_test), a, b in zip(sets, alone, batched.results, strict=True):
        assert b.shape == a.shape == (len(X_test), len(np.unique(y)))
        assert b.dtype == a.dtype
        assert_within_ulps(
            torch.from_numpy(b),
            torch.from_numpy(a),
            ulps=CLASSIFIER_PROBA_ULPS[dtype],
            dtype=torch.float32,
        )


@pytest.mark.parametrize("cpu", ["this-cpu", "no-hardware-bf16"])
@pytest.mark.parametrize("name", ["tabpfn_v2", "tabpfn_v3"])  # per-row and many-class decoders
def test_ragged_predict_proba_batched_under_auto_is_within_its_stated_bound(name, cpu, monkeypatch):
    if cpu == "no-hardware-bf16":
        # tabpfn's probe of the CPU answers as on one without hardware bf16.
        monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)
    sets = _datasets()
    alone = _alone(sets, name=name, dtype="auto")
    batched = predict_proba_batched(_plain(name, dtype="auto"), *_lists(sets))
    assert batched.padded and batched.stats.padded_rows > batched.stats.real_rows
    bf16 = _plain(name, dtype="auto").fit(*sets[0][:2]).use_autocast_
    assert cpu == "this-cpu" or not bf16  # "auto" is float32 without hardware bf16
    for (_, y, X_test), a, b in zip(sets, alone, batched.results, strict=True):
        assert b.shape == a.shape == (len(X_test), len(np.unique(y)))
        assert a.dtype == b.dtype == np.float32
        if bf16:
            # "auto" runs bf16 autocast on both sides: the bound in bf16 ulps.
            assert_within_ulps(
                torch.from_numpy(b),
                torch.from_numpy(a),
                ulps=CLASSIFIER_AUTO_PROBA_BF16_ULPS,
                dtype=torch.bfloat16,
            )
        else:
            # "auto" is float32 here, on both sides: float32's bound.
            assert_within_ulps(
                torch.from_numpy(b),
                torch.from_numpy(a),
                ulps=CLASSIFIER_PROBA_ULPS[torch.float32],
                dtype=torch.float32,
            )
    if bf16:
        # bf16 did run: "auto" moved predict_proba itself beyond float32's rounding.
        in_float32 = _alone(sets, name=name, dtype=torch.float32)
        moved = [
            deviation_in_ulps(torch.from_numpy(a), torch.from_numpy(f), dtype=torch.float32)
            for a, f in zip(alone, in_float32, strict=True)
        ]
        assert max(moved) > 10 * CLASSIFIER_PROBA_ULPS[torch.float32]


def test_the_same_padding_on_the_unpatched_classifier_moves_its_probabilities(monkeypatch):
    sets = _datasets()
    alone = _alone(sets, mode="none")
    # Let the padded path take the unpatched host: only the patch makes padding exact.
    monkeypatch.setattr(retrofit.hosts.common.base, "is_patched", lambda model: True)
    batched = predict_proba_batched(_plain(mode="none"), *_lists(sets), padded=True)
    drifts = [
        deviation_in_ulps(torch.from_numpy(b), torch.from_numpy(a), dtype=torch.float32)
        for a, b in zip(alone, batched.results, strict=True)
    ]
    # Null train rows reach every dataset of a bucket but its longest (test rows are no keys).
    rows = [len(X) for X, _, _ in sets]
    keys_padded = [i for b in batched.buckets for i in b if rows[i] < max(rows[j] for j in b)]
    assert keys_padded
    assert all(drifts[i] > 100 * CLASSIFIER_PROBA_ULPS[torch.float32] for i in keys_padded)


def test_the_estimator_batches_ragged_datasets_with_other_class_sets_and_labels():
    names = np.array(["ant", "bee", "cat", "dog", "eel", "fox", "gnu"])
    sets = _datasets(labels=names)
    est = _ours(dtype=torch.float64)
    with reference_kernel():
        probas = est.predict_proba_batched(*_lists(sets))
        labels = est.predict_batched(*_lists(sets))
        alone = _alone(sets, dtype=torch.float64)
        alone_labels = _alone(sets, method="predict", dtype=torch.float64)
    assert not hasattr(est, "models_")  # self is left unfitted
    assert isinstance(probas, list) and len(probas) == len(sets)
    for (_, y, _), a, b, la, lb in zip(sets, alone, probas, alone_labels, labels, strict=True):
        assert b.shape[1] == len(np.unique(y))
        assert_within_ulps(
            torch.from_numpy(b),
            torch.from_numpy(a),
            ulps=CLASSIFIER_PROBA_ULPS[torch.float64],
            dtype=torch.float32,
        )
        np.testing.assert_array_equal(lb, la)
        assert set(lb) <= set(y)


def test_same_shape_input_is_tabpfns_own_predict_proba_batched_in_every_mode():
    sets = _datasets([(30, 6, 3, 3)] * 3)
    for mode in ("none", "oattention", "full-o"):
        est = _ours(mode=mode)
        ours = est.predict_proba_batched(*_lists(sets))
        host = est.batched_host()
        theirs = TabPFNClassifier.predict_proba_batched(host, *_lists(sets))
        assert isinstance(ours, np.ndarray) and ours.shape == (3, 6, 3)
        np.testing.assert_array_equal(ours, theirs)
        through = predict_proba_batched(host, *_lists(sets))
        assert not through.padded
        np.testing.assert_array_equal(np.stack(through.results), theirs)
        labels = predict_batched_labels(host, *_lists(sets)).results
        for lab, p in zip(labels, theirs, strict=True):
            np.testing.assert_array_equal(lab, np.argmax(p, axis=1))


def _other_class_sets(kind):
    """Two same-shape datasets: of 3 and 2 classes, or integer labels beside text ones."""
    if kind == "other-classes":
        return _datasets([(30, 6, 3, 3), (30, 6, 3, 2)])
    ints, text = _datasets([(30, 6, 3, 3)] * 2)
    return [ints, (text[0], np.array(["ant", "bee", "cat"])[text[1]], text[2])]


@pytest.mark.parametrize("kind", ["other-classes", "int-beside-text"])
def test_same_shape_datasets_of_other_class_sets_take_the_padded_path(kind):
    sets = _other_class_sets(kind)
    alone = _alone(sets)
    batched = predict_proba_batched(_plain(), *_lists(sets))
    assert batched.padded
    est = _ours()
    probas = est.predict_proba_batched(*_lists(sets))
    labels = est.predict_batched(*_lists(sets))
    assert isinstance(probas, list)
    for (_, y, _), a, b, p, lab in zip(sets, alone, batched.results, probas, labels, strict=True):
        assert b.shape == p.shape == a.shape == (6, len(np.unique(y)))
        for got in (b, p):
            assert_within_ulps(
                torch.from_numpy(got),
                torch.from_numpy(a),
                ulps=CLASSIFIER_PROBA_ULPS[torch.float32],
                dtype=torch.float32,
            )
        np.testing.assert_array_equal(lab, np.unique(y)[np.argmax(p, axis=1)])


@pytest.mark.parametrize("kind", ["other-classes", "int-beside-text"])
def test_other_class_sets_are_refused_naming_the_dataset_where_tabpfns_method_answers(kind):
    sets = _other_class_sets(kind)
    match = "dataset 1: its classes .* are not dataset 0's .*same set of classes"
    for call in (
        lambda: _ours(mode="none").predict_proba_batched(*_lists(sets)),
        lambda: _ours(mode="none").predict_batched(*_lists(sets)),
        lambda: predict_proba_batched(_plain(mode="none"), *_lists(sets)),
        lambda: predict_proba_batched(_plain(), *_lists(sets), padded=False),
    ):
        with pytest.raises(BatchInputError, match=match):
            call()


@pytest.mark.parametrize(
    ("shapes", "match"),
    [
        ([(n, m, c, 3) for n, m, c, _ in RAGGED], "ragged batches are not supported"),
        (RAGGED, "same set of classes"),  # tabpfn checks the class sets first
    ],
    ids=["ragged", "ragged-other-classes"],
)
def test_mode_none_keeps_tabpfns_errors(shapes, match):
    sets = _datasets(shapes)
    with pytest.raises(ValueError, match=match):
        TabPFNClassifier.predict_proba_batched(_plain(mode="none"), *_lists(sets))
    with pytest.raises(ValueError, match=match):
        _ours(mode="none").predict_proba_batched(*_lists(sets))
    with pytest.raises(ValueError, match=match):
        _ours(mode="none").predict_batched(*_lists(sets))
    with pytest.raises(UnsupportedArchitectureError, match="not patched"):
        predict_proba_batched(_plain(mode="none"), *_lists(sets), padded=True)


def test_more_classes_than_the_model_scores_are_refused_naming_the_dataset():
    sets = _datasets([(30, 5, 3, 3), (40, 5, 4, TINY_MAX_CLASSES + 1)])
    with pytest.raises(BatchInputError, match="dataset 1: "):
        predict_proba_batched(_plain(), *_lists(sets))


# The padded path (ragged), tabpfn's method on a patched host and on an unpatched
# one (same shape; ragged input on an unpatched host is refused as a whole first).
@pytest.mark.parametrize(
    ("shape", "mode"), [("ragged", "full-o"), ("same-shape", "full-o"), ("same-shape", "none")]
)
@pytest.mark.parametrize("name", ["tabpfn_v2", "tabpfn_v3"])
def test_more_classes_than_the_models_own_limit_are_refused_naming_the_dataset_and_limit(
    name, shape, mode
):
    # tabpfn's fit refuses more than MAX_NUMBER_OF_CLASSES; raised above the
    # decoder's max_num_classes, the decoder's logits were indexed past their end.
    too_many = TINY_MAX_CLASSES + 2
    first = (30, 5, 3, too_many) if shape == "same-shape" else (25, 4, 3, too_many)
    sets = _datasets([first, (30, 5, 3, too_many)])
    raised = {"inference_config": {"MAX_NUMBER_OF_CLASSES": 2 * TINY_MAX_CLASSES}}
    match = (
        f"dataset 0: Number of classes `{too_many}` exceeds the maximum number of classes "
        f"`{TINY_MAX_CLASSES}` .* the model's own class limit \\(its max_num_classes\\)"
    )
    with pytest.raises(BatchInputError, match=match):
        predict_proba_batched(_plain(name, mode, **raised), *_lists(sets))
    with pytest.raises(BatchInputError, match=match):
        _ours(mode=mode, name=name, **raised).predict_proba_batched(*_lists(sets))


@pytest.mark.parametrize(
    ("change", "error", "match"),
    [
        ({"balance_probabilities": True}, NotImplementedError, "balance_probabilities"),
        ({}, BatchInputError, "dataset 1: y_train has 1 missing labels"),
    ],
    ids=["balance", "missing-label"],
)
def test_per_dataset_state_and_missing_labels_are_refused(change, error, match):
    X_tr, y_tr, X_te = _lists(_datasets())
    if not change:
        y_tr[1] = y_tr[1].astype(object)
        y_tr[1][0] = None
    with pytest.raises(error, match=match):
        predict_proba_batched(_plain(**change), X_tr, y_tr, X_te)


@pytest.mark.parametrize("missing", [None, np.nan], ids=["none", "nan"])
@pytest.mark.parametrize("mode", ["full-o", "none"])
def test_a_missing_label_in_same_shape_input_is_named_as_predict_batched_names_it(mode, missing):
    X_tr, y_tr, X_te = _lists(_datasets([(30, 6, 3, 3)] * 3))
    y_tr[1] = y_tr[1].astype(object if missing is None else float)
    y_tr[1][4] = missing
    est = _ours(mode=mode)
    for method in (est.predict_proba_batched, est.predict_batched):
        with pytest.raises(BatchInputError, match="dataset 1: y_train has 1 missing labels"):
            method(X_tr, y_tr, X_te)


def test_a_host_whose_stage_decodes_no_classes_is_refused(monkeypatch):
    monkeypatch.delattr(V2ICLStage, "decode_classes")
    with pytest.raises(UnsupportedArchitectureError, match="decodes no classes"):
        predict_proba_batched(_plain(), *_lists(_datasets()))
