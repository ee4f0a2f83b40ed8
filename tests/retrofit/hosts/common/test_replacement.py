"""A swapped module is an instance of the tabpfn class it replaced, so client lookups find it.

Client code finds tabpfn's modules by type (``isinstance(m, ManyClassDecoder)``) or
by class name (``type(m).__name__ == "ManyClassDecoder"``, as tabpfn-extensions'
decoder readout does); both must find the replacement where they found the
original, with the host's parameters, ``state_dict`` keys and an exact unpatch,
on tiny random classifiers of every host class the patcher supports (the
classifiers hold every swap: blocks and, for v3/v3.5, the decoder). The readout
contract is reproduced by its behaviour: a forward pre-hook on the decoder found
by name reads its weights during ``predict_proba`` and collapses them by label.
"""

from __future__ import annotations

import collections
import pickle

import numpy as np
import pytest
import torch
from tabpfn.architectures import tabpfn_v3, tabpfn_v3_5

import retrofit
from retrofit import OTabPFNClassifier
from retrofit.hosts.common.base import patch_config_of, registered_host_patchers
from retrofit.hosts.common.replacement import replacement_name
from retrofit.hosts.v2.block import OTabPFNBlockV2
from retrofit.hosts.v3.icl_block import OICLBlock
from retrofit.hosts.v3.many_class_decoder import OManyClassDecoder
from tests.helpers.exactness import decoder_vote_bound
from tests.helpers.tiny_hosts import tiny_classifier_specs

HOSTS = ("tabpfn_v2", "tabpfn_v2_5", "tabpfn_v2_6", "tabpfn_v3", "tabpfn_v3_5")
DECODER_HOSTS = {
    "tabpfn_v3": tabpfn_v3.ManyClassDecoder,
    "tabpfn_v3_5": tabpfn_v3_5.ManyClassDecoder,
}
FAMILIES = (OICLBlock, OTabPFNBlockV2, OManyClassDecoder)
MODES = ("oattention", "full-o")


def _host(name: str) -> torch.nn.Module:
    return tiny_classifier_specs(name).model


def _names_below_the_root(model: torch.nn.Module) -> collections.Counter:
    return collections.Counter(type(m).__name__ for m in list(model.modules())[1:])


def test_the_hosts_here_are_every_host_class_the_patcher_supports():
    assert {type(_host(name)) for name in HOSTS} == set(registered_host_patchers())


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", HOSTS)
def test_every_swapped_module_is_an_instance_of_the_class_it_replaced(name, mode):
    model = _host(name)
    before = dict(model.named_modules())
    keys = list(model.state_dict())
    names = _names_below_the_root(model)
    report = retrofit.patch(model, mode)
    swaps = [m for m in report.modules if m.kind == "swap"]
    assert (DECODER_HOSTS.get(name) is not None) == any("decoder" in m.path for m in swaps)
    for entry in swaps:
        original, replacement = before[entry.path], model.get_submodule(entry.path)
        assert replacement is not original and isinstance(replacement, FAMILIES)
        assert isinstance(replacement, type(original)) and type(replacement) is not type(original)
        assert type(replacement).__name__ == type(original).__name__ == entry.old_class
        assert replacement_name(replacement) == entry.new_class  # reports name the retrofit class
        assert [id(p) for p in replacement.parameters()] == [id(p) for p in original.parameters()]
    # Lookups by class name see the same tree as before (the root is the patched class).
    assert _names_below_the_root(model) == names
    assert list(model.state_dict()) == keys
    copied = pickle.loads(pickle.dumps(model))
    assert [type(copied.get_submodule(m.path)) for m in swaps] == [
        type(model.get_submodule(m.path)) for m in swaps
    ]
    retrofit.unpatch(model)
    assert all(model.get_submodule(m.path) is before[m.path] for m in swaps)
    assert dict(model.named_modules()) == before
    assert list(model.state_dict()) == keys


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", ["tabpfn_v3", "tabpfn_v3_5"])
def test_a_patched_icl_model_keeps_the_host_class_name_and_type(name, mode):
    model = _host(name)
    host_class = type(model)
    report = retrofit.patch(model, mode)
    assert type(model) is not host_class and isinstance(model, host_class)
    assert type(model).__name__ == host_class.__name__
    assert repr(model).startswith(f"{host_class.__name__}(")
    (swap,) = [m for m in report.modules if m.kind == "class"]
    # The report names the retrofit class (its digest is unchanged); pickling finds it.
    assert swap.old_class == host_class.__name__ and swap.new_class == f"O{host_class.__name__}"
    assert type(pickle.loads(pickle.dumps(model))) is type(model)
    retrofit.unpatch(model)
    assert type(model) is host_class


@pytest.mark.parametrize("name", sorted(DECODER_HOSTS))
def test_the_decoder_is_found_by_type_and_by_class_name_in_a_patched_classifier(name):
    model = _host(name)
    retrofit.patch(model, "full-o")
    decoder = model.get_submodule(type(model).decoder_path)
    assert isinstance(decoder, OManyClassDecoder)
    by_type = [m for m in model.modules() if isinstance(m, DECODER_HOSTS[name])]
    by_name = [m for m in model.modules() if type(m).__name__ == "ManyClassDecoder"]
    assert by_type == by_name == [decoder]


@pytest.mark.parametrize("name", HOSTS)
def test_patching_a_patched_model_or_one_holding_a_replacement_is_refused_untouched(name):
    model = _host(name)
    retrofit.patch(model, "oattention")
    tree = dict(model.named_modules())
    with pytest.raises(retrofit.AlreadyPatchedError, match="already patched"):
        retrofit.patch(model, "full-o")
    assert dict(model.named_modules()) == tree and patch_config_of(model).mode == ("oattention")
    # A replacement is an instance of the host class, never taken for an original.
    fresh = _host(name)
    blocks = "icl_blocks" if hasattr(fresh, "icl_blocks") else "blocks"
    first = model.get_submodule(f"{blocks}.0")
    fresh.get_submodule(blocks)[0] = first
    fresh_tree = dict(fresh.named_modules())
    with pytest.raises(
        retrofit.UnsupportedArchitectureError, match=rf"{blocks}\.0: .* retrofit replacement"
    ):
        retrofit.patch(fresh, "oattention")
    assert dict(fresh.named_modules()) == fresh_tree and not retrofit.is_patched(fresh)
    family = next(f for f in FAMILIES if isinstance(first, f))
    with pytest.raises(retrofit.UnsupportedArchitectureError, match="retrofit replacement"):
        family.from_module(first, **({} if family is OManyClassDecoder else {"mode": "full-o"}))


def test_a_retrofit_family_class_is_not_itself_a_replacement():
    block = _host("tabpfn_v3").icl_blocks[0]
    with pytest.raises(TypeError, match="from_module"):
        OICLBlock(block, mode="full-o", tau=1.0)


def _readout(est, X_test):
    """Each ensemble member's raw and vote weights, read off the decoder found by name."""
    (decoder,) = [m for m in est.model_.modules() if type(m).__name__ == "ManyClassDecoder"]
    raw, vote = [], []

    def hook(module, args):
        raw.append(module.attention_weights(args[0], args[1]))
        if isinstance(module, OManyClassDecoder):
            vote.append(module.vote_weights(args[0], args[1]))

    handle = decoder.register_forward_pre_hook(hook)
    try:
        proba = est.predict_proba(X_test)
    finally:
        handle.remove()
    raw_BMN = torch.cat(raw).double().numpy()
    vote_BMN = torch.cat(vote).double().numpy() if vote else None
    return proba, raw_BMN, vote_BMN


def _class_vote(w_BMN, y_train, classes):
    w_MN = w_BMN.mean(0)
    return np.stack([w_MN[:, y_train == c].sum(1) for c in classes], axis=1)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", sorted(DECODER_HOSTS))
def test_the_vote_weights_match_the_patched_predict_proba(name, mode):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 3))
    y = (X[:, 0] > 0).astype(int) + (X[:, 1] > 0.5)
    X_train, y_train, X_test = X[:40], y[:40], X[40:]
    settings = {
        "device": "cpu",
        "inference_precision": torch.float32,
        "n_estimators": 3,
        "softmax_temperature": 1.0,
        "balance_probabilities": False,
    }

    def fit(m, **retrofit_settings):
        specs = tiny_classifier_specs(name)
        est = OTabPFNClassifier(mode=m, model_path=specs, **settings, **retrofit_settings)
        return est.fit(X_train, y_train)

    # Control: the host's own weights sum to 1 and their vote is predict_proba.
    base = fit("none")
    proba, raw, _ = _readout(base, X_test)
    K = len(base.classes_)
    assert np.abs(raw.sum(-1) - 1).max() < 1e-5
    assert np.abs(_class_vote(raw, y_train, base.classes_) - proba).max() <= decoder_vote_bound(
        K, 1.0
    )

    # tau 4: presence about 0.8 on these tiny carriers, so the patch is far from the host.
    est = fit(mode, tau=4.0)
    proba, raw, vote = _readout(est, X_test)
    row_sum = raw.sum(-1)  # each test row's presence, less eps_den's share
    bound = decoder_vote_bound(K, row_sum.min())
    assert np.abs(proba - base.predict_proba(X_test)).max() > 10 * bound  # a real patch
    assert row_sum.max() < 1 - 100 * bound  # so the raw weights' vote misses predict_proba
    assert np.abs(_class_vote(raw, y_train, est.classes_) - proba).max() > 10 * bound
    np.testing.assert_allclose(vote.sum(-1), 1.0, rtol=0, atol=1e-6)
    np.testing.assert_allclose(vote * row_sum[..., None], raw, rtol=0, atol=1e-7)
    assert np.abs(_class_vote(vote, y_train, est.classes_) - proba).max() <= bound
