"""O-Closure proofs on TabPFN's classifiers: every class tabpfn 9.2 ships, tiny random, float64.

Each model is built from its own config class with ``max_num_classes > 0`` (a
classifier) and its zero-initialised projections perturbed
(``lab.calibration.perturb_zero_init``), so a patch really acts.

* v2, v2.5, v2.6: the blocks are the regressor's; the readout is per test row.
  A zero train row inserted at block 0's entry (and taken out after the last
  block) leaves every other row's carrier unchanged and stays exactly 0.
* v3, v3.5: a zero train row inserted at the ICL entry (after the class-target
  injection) is kept through the ICL blocks *and* the ``ManyClassDecoder``
  (with a class label, so it is a key of the retrieval attention): the test
  rows' logits are unchanged, the row's own final carrier is exactly 0. The
  learned length scaling of the decoder is on (``decoder_use_softmax_scaling``),
  so it must see ``n_eff``. Inserted before the injection, only Full-O keeps
  it null (OInject of the class embedding).

The unpatched host fails each proof (the control), an identity-configured
patch reproduces the host and a real one changes it. The same proofs at each
class's published size with random weights and 10 classes are marked slow
(``-m slow``), as the regressor's are. Bounds: other rows
within ``MODEL_ULPS[float64]`` ulps of their largest magnitude (a sequence
one row longer is blocked differently by the BLAS; tests/helpers/exactness.py).

Shape letters: B batch, R rows, N train rows, C features, M test rows, T classes.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from tabpfn.architectures.tabpfn_v3 import ManyClassDecoder, TabPFNV3
from tabpfn.architectures.tabpfn_v3_5 import TabPFNV3p5

import retrofit
from lab.calibration import PUBLISHED_CONFIGS, build_random_host
from patches import oattention_reference, presence
from retrofit.hosts.v3.many_class_decoder import OManyClassDecoder
from tests.helpers.exactness import MODEL_ULPS, assert_exactly_zero, deviation_in_ulps
from tests.helpers.null_row_hooks import FinalCarriers, LastBlockOutput, NullRowAtBlockEntry
from tests.helpers.tiny_hosts import TINY, TINY_V2, build_host
from tests.helpers.tiny_models import build_tiny_v3, tiny_v3_config

MODES = ("oattention", "full-o")
F64_ULPS = MODEL_ULPS[torch.float64]
R, N, B, C, CLASSES = 14, 9, 2, 4, 4
POS = 3  # where the null train row goes

V2_FAMILY = {
    "tabpfn_v2": {**TINY_V2, "max_num_classes": CLASSES},
    "tabpfn_v2_5": {**TINY["tabpfn_v2_5"], "max_num_classes": CLASSES},
    "tabpfn_v2_6": {**TINY["tabpfn_v2_6"], "max_num_classes": CLASSES},
}
#: The v3-family classifiers, with the decoder's learned length scaling on.
V3_FAMILY = ("tabpfn_v3", "tabpfn_v3_5")


def _data(seed=0):
    g = torch.Generator().manual_seed(seed)
    x_RBC = torch.randn(R, B, C, generator=g, dtype=torch.float64)
    y_NB = torch.randint(0, 3, (N, B), generator=g).double()
    return x_RBC, y_NB


def _v3_family(name: str, mode: str, **patch_kwargs):
    if name == "tabpfn_v3":
        config = tiny_v3_config(
            nlayers=3,
            max_num_classes=CLASSES,
            decoder_head_dim=4,
            decoder_num_heads=2,
            decoder_use_softmax_scaling=True,
        )
        model = build_tiny_v3(config).double()
    else:
        model = build_host(name, decoder_use_softmax_scaling=True).double()
    if mode != "none":
        retrofit.patch(model, mode, **patch_kwargs)
    return model


def _kwargs(model) -> dict:
    return {"task_type": "multiclass"} if isinstance(model, TabPFNV3p5) else {}


def _host_class(model) -> type:
    return TabPFNV3p5 if isinstance(model, TabPFNV3p5) else TabPFNV3


def _scale(t):
    return t.double().abs().max().item()


def _drift(a, b):
    return deviation_in_ulps(a, b, scale=_scale(b))


# ---- v2, v2.5, v2.6 ------------------------------------------------------------------


def _v2_drift(name: str, mode: str):
    model = build_host(name, config=V2_FAMILY[name]).double()
    if mode != "none":
        retrofit.patch(model, mode)
    x, y = _data()
    thinking = getattr(getattr(model, "add_thinking_rows", None), "num_thinking_rows", 0)
    with torch.inference_mode():
        rec = LastBlockOutput(model)
        try:
            logits = model(x, y)
        finally:
            rec.close()
        ins = NullRowAtBlockEntry(model, thinking + POS, as_train=True)
        try:
            model(x, y)
        finally:
            ins.close()
    return _drift(ins.final, rec.final), ins.null, logits


@pytest.mark.parametrize("name", sorted(V2_FAMILY))
@pytest.mark.parametrize("mode", MODES)
def test_a_v2_family_classifier_keeps_a_null_train_row_null(name, mode):
    drift, null, logits = _v2_drift(name, mode)
    base_drift, _, base_logits = _v2_drift(name, "none")
    assert logits.shape == (R - N, B, CLASSES)
    assert drift <= F64_ULPS
    assert_exactly_zero(null)
    assert base_drift > 1e6 * F64_ULPS, (drift, base_drift)  # the control fails the proof
    assert (logits - base_logits).abs().max() > 1e-4  # a real patch changes the output


# ---- v3, v3.5: the null row reaches the ManyClassDecoder -----------------------------------


def _insert_null_train_row(monkeypatch, model, *, at_icl_entry: bool) -> None:
    """Every forward of ``model`` gets one more train row, zero when it leaves stage 2.

    The caller passes ``y`` with the extra row's label at ``POS``; stages 0-2
    run on the other rows (their label removed) and a zero row joins their
    output at ``POS``. With ``at_icl_entry`` its class-target embedding is
    zeroed too, so the row enters the ICL blocks as the null carrier.
    """
    host = _host_class(model)
    stages, embed = host._stages_0_to_2, host._embed_icl_y

    def stages_with_zero_row(self, x_RiBC, y, *args, **kwargs):
        x_BRiClE, *rest = stages(self, x_RiBC, torch.cat([y[:POS], y[POS + 1 :]]), *args, **kwargs)
        zero = x_BRiClE.new_zeros(x_BRiClE.shape[0], 1, *x_BRiClE.shape[2:])
        return (torch.cat([x_BRiClE[:, :POS], zero, x_BRiClE[:, POS:]], 1), *rest)

    def embed_without_row(self, y_BN, *args, **kwargs):
        emb_BND = embed(self, y_BN, *args, **kwargs)
        if at_icl_entry:
            emb_BND = emb_BND.clone()
            emb_BND[:, POS] = 0
        return emb_BND

    monkeypatch.setattr(host, "_stages_0_to_2", stages_with_zero_row)
    monkeypatch.setattr(host, "_embed_icl_y", embed_without_row)


def _with_label(y):
    return torch.cat([y[:POS], y[:1], y[POS:]])  # an existing class: same one-hot width


def _v3_run(monkeypatch, model, *, at_icl_entry=True, dtype=torch.float64, **forward_kwargs):
    """(reference logits, logits with the null train row, its final ICL carrier)."""
    x, y = (t.to(dtype) for t in _data())
    with torch.inference_mode():
        ref = model(x, y, **_kwargs(model), **forward_kwargs)
    with monkeypatch.context() as m:
        _insert_null_train_row(m, model, at_icl_entry=at_icl_entry)
        rec = FinalCarriers(model)
        try:
            with torch.inference_mode():
                out = model(x, _with_label(y), **_kwargs(model), **forward_kwargs)
        finally:
            rec.close()
    return ref, out, rec.final_BRE[:, POS]


@pytest.mark.parametrize("support", ["count", "mass"])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", V3_FAMILY)
def test_a_null_train_row_at_the_icl_entry_changes_no_logit(monkeypatch, name, mode, support):
    ref, out, null_BE = _v3_run(monkeypatch, _v3_family(name, mode, support=support))
    assert out.shape == ref.shape == (R - N, B, CLASSES)
    assert _drift(out, ref) <= F64_ULPS
    assert_exactly_zero(null_BE)


# Not bfloat16: one more train row moves the tiny unpatched classifier's logits by
# about 1.5 bf16 ulps, inside bf16's bound, so the control could not fail there
# (the bf16 proof on the ICL carriers is tests/retrofit/hosts/v3/test_null_row.py's).
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", V3_FAMILY)
def test_the_proof_holds_in_reduced_precision(monkeypatch, name, mode, dtype):
    """The whole model cast to ``dtype``: logits within ``MODEL_ULPS[dtype]``, the control beyond.

    Compared on the classes present in the train labels (0-2): an absent
    class's logit is the constant floor ``log(4e-5)``, whose magnitude would
    set the ulp scale and hide a real change in bfloat16.
    """
    ref, out, null_BE = _v3_run(monkeypatch, _v3_family(name, mode).to(dtype), dtype=dtype)
    base_ref, base_out, _ = _v3_run(monkeypatch, _v3_family(name, "none").to(dtype), dtype=dtype)
    present = slice(0, 3)
    drift = _drift(out[..., present], ref[..., present])
    base_drift = _drift(base_out[..., present], base_ref[..., present])
    assert null_BE.dtype == dtype
    assert_exactly_zero(null_BE)
    assert drift <= MODEL_ULPS[dtype], (drift, base_drift)
    assert base_drift > MODEL_ULPS[dtype], (drift, base_drift)


@pytest.mark.parametrize("name", V3_FAMILY)
def test_the_unpatched_v3_family_classifier_fails_the_proof(monkeypatch, name):
    ref, out, null_BE = _v3_run(monkeypatch, _v3_family(name, "none"))
    assert _drift(out, ref) > 1e6 * F64_ULPS
    assert null_BE.abs().max() > 0


@pytest.mark.parametrize("name", V3_FAMILY)
def test_full_o_gates_the_class_target_embedding(monkeypatch, name):
    ref, out, null_BE = _v3_run(monkeypatch, _v3_family(name, "full-o"), at_icl_entry=False)
    assert _drift(out, ref) <= F64_ULPS
    assert_exactly_zero(null_BE)


@pytest.mark.parametrize("name", V3_FAMILY)
def test_hidden_carrier_oattention_lets_the_class_embedding_revive_the_row(monkeypatch, name):
    ref, out, null_BE = _v3_run(monkeypatch, _v3_family(name, "oattention"), at_icl_entry=False)
    assert _drift(out, ref) > 1e6 * F64_ULPS  # the injected class makes it a live row
    assert null_BE.abs().max() > 1e-3


# Presence rounds to exactly 1 for every non-null carrier with tau = 1e-30, so
# n_eff = n and, with eps_den = 0, OAttention is softmax attention.
IDENTITY = {"tau": 1e-30, "eps_den": 0.0, "support": "count"}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", V3_FAMILY)
def test_identity_reproduces_the_classifier_and_a_real_patch_changes_it(name, mode):
    x, y = _data()
    with torch.inference_mode():
        ref = _v3_family(name, "none")(x, y, **_kwargs(_v3_family(name, "none")))
        model = _v3_family(name, mode, **IDENTITY)
        identity = model(x, y, **_kwargs(model))
        model = _v3_family(name, mode)
        changed = model(x, y, **_kwargs(model))
    assert _drift(identity, ref) <= F64_ULPS
    assert (changed - ref).abs().max() > 1e-4


@pytest.mark.parametrize("name", V3_FAMILY)
def test_the_decoder_is_swapped_and_unpatch_restores_it(name):
    model = _v3_family(name, "none")
    path = "many_class_decoder" if name == "tabpfn_v3" else "heads.many_class_decoder"
    original = model.get_submodule(path)
    keys = set(model.state_dict())
    report = retrofit.patch(model, "oattention")
    assert isinstance(model.get_submodule(path), OManyClassDecoder)
    assert path in [entry.path for entry in report.modules]
    assert set(model.state_dict()) == keys
    retrofit.unpatch(model)
    assert model.get_submodule(path) is original


# ---- the decoder on its own ---------------------------------------------------------------


def test_a_null_train_embedding_gets_no_mass_and_no_count_in_the_decoder():
    torch.manual_seed(0)
    host = ManyClassDecoder(max_num_classes=5, input_size=8, head_dim=4, num_heads=2)
    host.softmax_scaling_layer = _v3_family(
        "tabpfn_v3", "none"
    ).many_class_decoder.softmax_scaling_layer
    host = host.double()
    patched = OManyClassDecoder.from_module(host, tau=1.0)
    g = torch.Generator().manual_seed(1)
    train_BNE = torch.randn(B, N, 8, generator=g, dtype=torch.float64)
    test_BME = torch.randn(B, 5, 8, generator=g, dtype=torch.float64)
    y_BN = torch.randint(0, 4, (B, N), generator=g).double()
    with_null = torch.cat([train_BNE[:, :2], train_BNE.new_zeros(B, 1, 8), train_BNE[:, 2:]], 1)
    y_null = torch.cat([y_BN[:, :2], y_BN[:, :1], y_BN[:, 2:]], 1)

    def logits(decoder, train, y):
        with torch.inference_mode():
            return decoder(decoder.project_keys(train), test_BME, y)

    ref = logits(patched, train_BNE, y_BN)
    assert _drift(logits(patched, with_null, y_null), ref) <= F64_ULPS
    base = logits(host, train_BNE, y_BN)
    assert _drift(logits(host, with_null, y_null), base) > 1e6 * F64_ULPS
    weights = patched.attention_weights(patched.project_keys(with_null), test_BME)
    assert_exactly_zero(weights[:, :, 2])


def test_classes_wider_than_a_head_are_read_as_the_float64_oracle_reads_them():
    # 7 classes over head dim 4: the one-hot values are attended as two head-wide
    # chunks folded into the batch; the oracle takes all 7 columns at once.
    torch.manual_seed(0)
    host = ManyClassDecoder(max_num_classes=10, input_size=8, head_dim=4, num_heads=2).double()
    patched = OManyClassDecoder.from_module(host, tau=1.0)
    g = torch.Generator().manual_seed(2)
    train_BNE = torch.randn(B, N, 8, generator=g, dtype=torch.float64)
    train_BNE[:, POS] = 0.0  # a null train row too
    test_BME = torch.randn(B, 5, 8, generator=g, dtype=torch.float64)
    y_BN = torch.randint(0, 7, (B, N), generator=g).double()
    y_BN[0, :7] = torch.arange(7.0)  # every class present
    with torch.inference_mode():
        keys_BNHD = patched.project_keys(train_BNE)
        logits_MBT = patched(keys_BNHD, test_BME, y_BN)
        q_BMHD, k_BNHD, p_BN = patched._queries(keys_BNHD, test_BME)
        v_BHNT = torch.nn.functional.one_hot(y_BN.long(), 7).double()[:, None].expand(-1, 2, -1, -1)
        out_BHMT = oattention_reference(
            q_BMHD.transpose(1, 2),
            k_BNHD.transpose(1, 2),
            v_BHNT,
            presence(test_BME, 1.0),
            p_BN,
            eps_den=patched.eps_den,
        )
    expected_BMT = torch.nn.functional.pad(out_BHMT.mean(1), (0, 3))
    expected_MBT = torch.log(torch.clamp(expected_BMT.transpose(0, 1), min=1e-5) + 3e-5)
    assert logits_MBT.shape == expected_MBT.shape == (5, B, 10)
    assert deviation_in_ulps(logits_MBT, expected_MBT) <= F64_ULPS


# ---- fit_with_cache: the decoder keys' presence travels with the cache ---------------------


@pytest.mark.parametrize("kv_dtype", [None, torch.int8])
@pytest.mark.parametrize("name", V3_FAMILY)
def test_a_null_train_row_in_the_kv_cache_changes_no_logit(monkeypatch, name, kv_dtype):
    model = _v3_family(name, "full-o")
    x, y = _data()
    opts = dataclasses.replace(model.get_default_performance_options(), kv_cache_dtype=kv_dtype)
    kwargs = {**_kwargs(model), "performance_options": opts}

    def from_cache(insert: bool):
        labels = _with_label(y) if insert else y
        with monkeypatch.context() as m:
            if insert:
                _insert_null_train_row(m, model, at_icl_entry=True)
            with torch.inference_mode():
                _, cache = model(x[:N], labels, return_kv_cache=True, **kwargs)
        with torch.inference_mode():
            out = model(x[N:], labels, kv_cache=cache, x_is_test_only=True, **kwargs)
        return out, cache

    ref, _ = from_cache(insert=False)
    out, cache = from_cache(insert=True)
    assert cache.decoder_presence.shape == (B, N + 1)
    assert bool((cache.decoder_presence[:, POS] == 0).all())
    assert _drift(out, ref) <= F64_ULPS


# ---- the published classifier configurations, random weights (slow) ------------------------

#: Each class at its published size as a classifier (``lab.calibration.PUBLISHED_CONFIGS``
#: with 10 classes; v3 and v3.5 with the decoder's length scaling on, the harder case).
PUBLISHED_CLASSIFIERS = {
    name: {
        **PUBLISHED_CONFIGS[name],
        "max_num_classes": 10,
        **({"decoder_use_softmax_scaling": True} if name in V3_FAMILY else {}),
    }
    for name in PUBLISHED_CONFIGS
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(PUBLISHED_CLASSIFIERS))
def test_a_published_size_classifier_keeps_a_null_train_row_null(monkeypatch, name):
    torch.set_num_threads(2)
    model = build_random_host(name, PUBLISHED_CLASSIFIERS[name]).double()
    x, y = _data()
    for mode in retrofit.PATCH_MODES:
        retrofit.patch(model, mode)
        if name in V3_FAMILY:
            ref, out, null = _v3_run(monkeypatch, model)
        else:
            thinking = getattr(getattr(model, "add_thinking_rows", None), "num_thinking_rows", 0)
            with torch.inference_mode():
                rec = LastBlockOutput(model)
                try:
                    model(x, y)
                finally:
                    rec.close()
                ins = NullRowAtBlockEntry(model, thinking + POS, as_train=True)
                try:
                    model(x, y)
                finally:
                    ins.close()
            ref, out, null = rec.final, ins.final, ins.null
        retrofit.unpatch(model)
        assert _drift(out, ref) <= F64_ULPS, (name, mode)
        assert_exactly_zero(null)
