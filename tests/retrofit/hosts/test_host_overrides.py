"""The tabpfn code the retrofit overrides or re-implements is the code it was written against.

The v3 and v3.5 tables override five tabpfn methods (one place:
``retrofit.hosts.v3.icl_host.OICLModelMixin``, see ``OVERRIDDEN_METHODS``), the
v2 family's three each (``retrofit.hosts.v2.model``: its encoder), and
the O-blocks re-implement the forward of tabpfn's blocks around OAttention
(``retrofit.hosts.v3.icl_block``, ``retrofit.hosts.v2.v2``), as the O-decoder does
the classifiers' ``ManyClassDecoder`` (``retrofit.hosts.v3.many_class_decoder``),
so a tabpfn release that changes any of them can silently break the retrofit.
A replacement subclasses the block or decoder class it replaces, so every host
method it does not override runs on it as the host's: those are named here too.
Each is pinned here by the SHA-256 (first 16 hex digits) of its source in
tabpfn 9.2.0: when this test fails, read the changed method, update the
retrofit to match, then the digest.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect

import pytest

from retrofit.hosts.v3.icl_host import OVERRIDDEN_METHODS, OICLModelMixin

PINNED: dict[tuple[str, str], str] = {
    # tabpfn passes task_type only to a forward whose signature names it.
    ("inference", "_model_expectes_task_type_arg"): "6b4e1fe1222130b2",
    ("tabpfn_v3", "TabPFNV3.forward"): "eeeaf654801cc6c4",
    ("tabpfn_v3", "TabPFNV3._stages_0_to_2"): "f26ac4bdead7f910",
    ("tabpfn_v3", "TabPFNV3._prepare_y"): "46a0575e6f1187fa",
    ("tabpfn_v3", "TabPFNV3._embed_icl_y"): "340a722c4a828d10",
    ("tabpfn_v3_5", "TabPFNV3p5.forward"): "03bf5782b5534c76",
    ("tabpfn_v3_5", "TabPFNV3p5._stages_0_to_2"): "39e2507535c38e1d",
    ("tabpfn_v3_5", "TabPFNV3p5._prepare_y"): "0c5266a2c1b7047d",
    ("tabpfn_v3_5", "TabPFNV3p5._embed_icl_y"): "e0bcf72ad3999992",
    ("tabpfn_v3", "ICLTransformerBlock.forward"): "b1be155d081f16e8",
    ("tabpfn_v3", "ICLAttention.forward"): "f50efd0793eec3e8",
    ("tabpfn_v3", "SoftmaxScalingMLP.forward"): "0349202618e6e725",
    ("tabpfn_v3_5", "ICLTransformerBlock.forward"): "e505e9be09f0abbb",
    ("tabpfn_v3_5", "ICLAttention.forward"): "f816d51427509454",
    ("tabpfn_v3_5", "SoftmaxScalingMLP.forward"): "0349202618e6e725",
    ("tabpfn_v3", "TabPFNV3Cache.to"): "b979a08b5bfb3184",
    ("tabpfn_v3", "TabPFNV3Cache.quantize"): "de8a6bad998a2f42",
    ("tabpfn_v3", "TabPFNV3Cache.concatenate"): "4f193d70fd7c0215",
    ("tabpfn_v3_5", "TabPFNV3p5Cache.to"): "3b3e9372fa36fabc",
    ("tabpfn_v3_5", "TabPFNV3p5Cache.quantize"): "00435445ff3381ed",
    ("tabpfn_v3_5", "TabPFNV3p5Cache.concatenate"): "bc9ba4cc3b43479d",
    # The v2 family's encoder under row presence (retrofit/hosts/v2/model.py).
    ("tabpfn_v2", "TabPFNV2.forward"): "9512f30298ea56d8",
    ("tabpfn_v2", "TabPFNV2._embed_features"): "a082228478bb6120",
    ("tabpfn_v2", "TabPFNV2._embed_targets"): "a9d3d5ff269ed56d",
    ("tabpfn_v2_5", "TabPFNV2p5.forward"): "01b1dbde06c24e1d",
    ("tabpfn_v2_5", "TabPFNV2p5._preprocess_and_embed_features"): "f26e4bf38cbcafba",
    ("tabpfn_v2_5", "TabPFNV2p5._preprocess_and_embed_targets"): "88f3148ae7812ad2",
    ("tabpfn_v2_6", "TabPFNV2p6.forward"): "13e26e10e4fe4610",
    ("tabpfn_v2_6", "TabPFNV2p6._preprocess_and_embed_features"): "63a11bb40b55e01c",
    ("tabpfn_v2_6", "TabPFNV2p6._preprocess_and_embed_targets"): "88f3148ae7812ad2",
    ("tabpfn_v2", "TabPFNBlock.forward"): "cd65c1ca49760e6a",
    ("tabpfn_v2", "AlongColumnAttention.forward"): "acaf4c5f67aa3677",
    ("tabpfn_v2_5", "TabPFNBlock.forward"): "4a1c01ab1650bc67",
    ("tabpfn_v2_5", "AlongColumnAttention.forward"): "ef483c68c1fbda9a",
    ("tabpfn_v2_5", "AddThinkingRows.forward"): "6f187836cf41327e",
    ("tabpfn_v2_6", "TabPFNBlock.forward"): "4a1c01ab1650bc67",
    ("tabpfn_v2_6", "AlongColumnAttention.forward"): "ef483c68c1fbda9a",
    ("tabpfn_v2_6", "AddThinkingRows.forward"): "6f187836cf41327e",
    # The classifier readout OManyClassDecoder re-implements
    # (retrofit/hosts/v3/many_class_decoder.py).
    ("tabpfn_v3", "ManyClassDecoder.forward"): "5ac6ed7560a807e0",
    ("tabpfn_v3", "ManyClassDecoder.project_keys"): "fcda9610d7feeedf",
    ("tabpfn_v3", "ManyClassDecoder.attention_weights"): "1c35f7b225bfb852",
    ("tabpfn_v3_5", "ManyClassDecoder.forward"): "a353b2e7066c2b71",
    ("tabpfn_v3_5", "ManyClassDecoder.project_keys"): "83d535d244994f51",
    ("tabpfn_v3_5", "ManyClassDecoder.attention_weights"): "082aae2db3ebbe8c",
    ("tabpfn_v3_5", "MultiTaskHeads.project_decoder_keys"): "af027ead81cd0262",
    # Host methods a replacement inherits unchanged (retrofit/hosts/common/replacement.py):
    # the decoders' query projections and dtype guard, which read no presence.
    ("tabpfn_v3", "ManyClassDecoder._project_q"): "e5167dc0ec058582",
    ("tabpfn_v3_5", "ManyClassDecoder._project_queries"): "720e1b62ea16bcfa",
    ("kv_cache", "KVCacheEntry"): "2be25c8b369819ef",
    ("kv_cache", "QuantizedKVCacheEntry"): "61450ee44ed38fe2",
    # Row weights (retrofit/hosts/common/row_weights.py): the overrides that fit the in-model
    # preprocessing weighted, the inducing points' attention re-implemented with weighted
    # keys (retrofit/hosts/v3/weighted_inducing.py) and the paths that call it, and the
    # statistics re-implemented weighted (retrofit/hosts/common/weighted_stats.py).
    ("tabpfn_v3", "TabPFNV3._preprocess_raw"): "53942dbb3061c8e2",
    ("tabpfn_v3_5", "TabPFNV3p5._preprocess_raw"): "472b9c49066d49ec",
    ("tabpfn_v3", "CrossAttention.forward"): "8be40c214ea1e408",
    ("tabpfn_v3_5", "CrossAttention.forward"): "6a11d1f6667f0928",
    ("tabpfn_v3", "InducedSelfAttentionBlock._induced_attention"): "9b386941aeb2a435",
    ("tabpfn_v3_5", "InducedSelfAttentionBlock._induced_attention"): "9f6a8ca8f0aa7066",
    ("tabpfn_v3", "TabPFNV3._process_col_chunk"): "b9ea678fb5f7a710",
    ("tabpfn_v3_5", "TabPFNV3p5._process_col_chunk"): "33d1c3c9f163b7de",
    ("tabpfn_v3", "_impute_nan_and_inf_with_mean"): "1936013399f79fbc",
    ("tabpfn_v3_5", "_impute_nan_and_inf_with_mean"): "1936013399f79fbc",
    ("tabpfn_v3", "_impute_target_nan_and_inf"): "6394ca13762a5f3c",
    ("tabpfn_v3_5", "_impute_target_nan_and_inf"): "6394ca13762a5f3c",
    ("tabpfn_v3_5", "_build_ecdf_context"): "8924f16d72e6f61a",
    ("tabpfn_v2", "_impute_nan_and_inf_with_mean"): "3478a575984f505d",
    ("tabpfn_v2_5", "_impute_nan_and_inf_with_mean"): "07681d2a6cbbe5d8",
    ("tabpfn_v2_6", "_impute_nan_and_inf_with_mean"): "07681d2a6cbbe5d8",
    ("tabpfn_v2_5", "_impute_target_nan_and_inf"): "1741b9f0cec0aa41",
    ("tabpfn_v2_6", "_impute_target_nan_and_inf"): "1741b9f0cec0aa41",
    ("tabpfn_v2", "TabPFNV2._embed_nan_target"): "5eface249423e961",
    ("preprocessing.torch.torch_standard_scaler", "TorchStandardScaler.fit"): "50edd51ef5ffbe01",
    ("preprocessing.torch.ops", "torch_nanmean"): "a7a498a45388d86f",
    ("preprocessing.torch.ops", "torch_nanstd"): "95542e5afce6a8bf",
}


def _source_digest(module: str, qualname: str) -> str:
    package = "tabpfn" if module == "inference" or "." in module else "tabpfn.architectures"
    obj = importlib.import_module(f"{package}.{module}")
    for part in qualname.split("."):
        obj = getattr(obj, part)
    obj = inspect.unwrap(getattr(obj, "__func__", obj))
    return hashlib.sha256(inspect.getsource(obj).encode()).hexdigest()[:16]


@pytest.mark.parametrize(("module", "qualname"), sorted(PINNED))
def test_tabpfn_code_the_retrofit_relies_on_is_unchanged(module, qualname):
    assert _source_digest(module, qualname) == PINNED[(module, qualname)], (
        f"tabpfn.architectures.{module}.{qualname} changed: re-read it and update retrofit/hosts/"
    )


def test_every_override_of_the_icl_hosts_lives_in_the_mixin_and_is_pinned():
    own = {
        name
        for name, value in vars(OICLModelMixin).items()
        if inspect.isfunction(value) and not name.startswith("__")
    }
    assert own == set(OVERRIDDEN_METHODS)
    for host, cls in (("tabpfn_v3", "TabPFNV3"), ("tabpfn_v3_5", "TabPFNV3p5")):
        assert {(host, f"{cls}.{name}") for name in OVERRIDDEN_METHODS} <= set(PINNED)


def test_every_override_of_the_v2_family_is_named_and_pinned():
    from retrofit.hosts.v2.model import (
        OVERRIDDEN_METHODS_V2,
        OVERRIDDEN_METHODS_V2P5,
        OTabPFNV2,
        OTabPFNV2p5,
        OTabPFNV2p6,
    )

    for module, cls, names in (
        ("tabpfn_v2", OTabPFNV2, OVERRIDDEN_METHODS_V2),
        ("tabpfn_v2_5", OTabPFNV2p5, OVERRIDDEN_METHODS_V2P5),
        ("tabpfn_v2_6", OTabPFNV2p6, OVERRIDDEN_METHODS_V2P5),
    ):
        own = {
            name
            for klass in cls.__mro__[:-1]
            if klass.__module__.startswith("retrofit.")
            for name, value in vars(klass).items()
            if inspect.isfunction(value) and not name.startswith("__")
        }
        assert own == set(names)
        host = cls.__bases__[-1].__name__
        assert {(module, f"{host}.{name}") for name in names} <= set(PINNED)


def test_the_patched_classes_override_nothing_themselves():
    from retrofit.hosts.v3.v3 import OTabPFNV3
    from retrofit.hosts.v3.v3_5 import OTabPFNV3p5

    for cls in (OTabPFNV3, OTabPFNV3p5):
        methods = {n for n, v in vars(cls).items() if inspect.isfunction(v) and n[:2] != "__"}
        assert methods == set()


#: The host methods replacements inherit without overriding (``__init__`` never runs on them).
INHERITED_HOST_METHODS = {
    ("tabpfn_v3", "ManyClassDecoder._project_q"),
    ("tabpfn_v3_5", "ManyClassDecoder._project_queries"),
}


def test_every_host_method_a_replacement_inherits_is_named_and_pinned():
    from retrofit.hosts.v2.block import SUPPORTED_V2_BLOCKS
    from retrofit.hosts.v3.icl_block import SUPPORTED_ICL_BLOCKS
    from retrofit.hosts.v3.many_class_decoder import SUPPORTED_DECODERS

    inherited = set()
    for table in (SUPPORTED_ICL_BLOCKS, SUPPORTED_V2_BLOCKS, SUPPORTED_DECODERS):
        for host, replacement in table.items():
            assert replacement.replaced_class is host and issubclass(replacement, host)
            for name, value in vars(host).items():
                if inspect.isfunction(value) and name != "__init__":
                    if getattr(replacement, name) is value:  # not overridden by the family
                        module = host.__module__.rpartition(".")[2]
                        inherited.add((module, f"{host.__name__}.{name}"))
    assert inherited == INHERITED_HOST_METHODS
    assert INHERITED_HOST_METHODS <= set(PINNED)


def test_tabpfn_still_sees_task_type_in_the_patched_forward():
    from retrofit.hosts.v3.v3 import OTabPFNV3
    from retrofit.hosts.v3.v3_5 import OTabPFNV3p5

    for cls in (OTabPFNV3, OTabPFNV3p5):
        assert "task_type" in inspect.signature(cls.forward).parameters


def test_each_registry_holds_one_entry_per_host_class_and_refuses_a_second():
    from tabpfn.architectures.tabpfn_v2 import TabPFNV2

    from retrofit.errors import DuplicateHostError
    from retrofit.hosts.common import base
    from retrofit.hosts.v2.icl_stage import V2ICLStage
    from retrofit.hosts.v2.v2 import V2Patcher

    before = (base.registered_host_patchers(), dict(base._ICL_STAGES))
    with pytest.raises(DuplicateHostError, match="TabPFNV2 has a patch table already"):
        base.register_host_patcher(V2Patcher())
    with pytest.raises(DuplicateHostError, match="TabPFNV2 has a null-padded ICL stage already"):
        base.register_icl_stage(TabPFNV2, V2ICLStage())
    assert (base.registered_host_patchers(), dict(base._ICL_STAGES)) == before
