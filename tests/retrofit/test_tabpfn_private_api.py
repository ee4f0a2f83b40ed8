"""The two private tabpfn methods OTabPFNRegressor overrides still behave as it relies on.

``retrofit/estimator.py`` overrides ``TabPFNRegressor._initialize_model_variables``
and ``TabPFNRegressor._get_tuning_regressor``, nowhere else. Each test here
fails when tabpfn changes what the override assumes: the signature, where the
method is called from, what it reads and what it sets. The source digests fail
on any edit of the two methods, so a new tabpfn release is re-checked by a
person before the digests are updated.
"""

from __future__ import annotations

import hashlib
import inspect
import textwrap

import numpy as np
import pytest
import torch
from tabpfn import ModelSpecs, TabPFNRegressor
from tabpfn import base as tabpfn_base

from retrofit import OTabPFNRegressor, load_host

# SHA-256 of the dedented source, in tabpfn 9.2.0, of each method overridden and of
# the helper the first one delegates to (it reads ``model_path`` and sets ``models_``).
PINNED_SOURCES = {
    "TabPFNRegressor._initialize_model_variables": (
        "1da50ca2c640aebd8e66226809c2b42431c5b08f0360713324bcf3844d88cc7d"
    ),
    "TabPFNRegressor._get_tuning_regressor": (
        "e12d70ca576fb85370d6ce1d9dfac510785ef6b5200772d0b8b59f6dae99b725"
    ),
    "initialize_model_variables_helper": (
        "b09a14a42950a5bd8194f3d824abf02801eb289991cd33a22ed77311087972c5"
    ),
}
OVERRIDDEN = ("_initialize_model_variables", "_get_tuning_regressor")


def _source_digest(qualified: str) -> str:
    owner, _, name = qualified.rpartition(".")
    function = getattr(TabPFNRegressor if owner else tabpfn_base, name)
    source = textwrap.dedent(inspect.getsource(function))
    return hashlib.sha256(source.encode()).hexdigest()


@pytest.fixture(scope="module")
def checkpoint(tiny_v3_path):
    return tiny_v3_path


def _data(n=40, d=3, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    return X, X @ rng.normal(size=d)


def _kwargs(path) -> dict:
    return {
        "model_path": str(path),
        "n_estimators": 1,
        "device": "cpu",
        "inference_precision": torch.float32,
    }


def test_the_overridden_methods_have_the_signatures_the_overrides_assume():
    init = inspect.signature(TabPFNRegressor._initialize_model_variables)
    assert list(init.parameters) == ["self"]
    assert init.return_annotation in (int, "int")
    tuning = inspect.signature(TabPFNRegressor._get_tuning_regressor)
    assert [(p.name, p.kind) for p in tuning.parameters.values()] == [
        ("self", inspect.Parameter.POSITIONAL_OR_KEYWORD),
        ("overwrite_kwargs", inspect.Parameter.VAR_KEYWORD),
    ]
    own = {name for name, value in vars(OTabPFNRegressor).items() if callable(value)}
    private_overrides = {
        n
        for n in own
        if n.startswith("_") and not n.startswith("__") and hasattr(TabPFNRegressor, n)
    }
    assert private_overrides == set(OVERRIDDEN)


@pytest.mark.parametrize("qualified", sorted(PINNED_SOURCES))
def test_the_overridden_code_is_tabpfn_9_2_0s(qualified):
    assert _source_digest(qualified) == PINNED_SOURCES[qualified], (
        f"tabpfn changed {qualified}: re-check the overrides in retrofit/estimator.py "
        "against it, then update PINNED_SOURCES"
    )


class _Spy(TabPFNRegressor):
    calls: list[str]

    def _initialize_model_variables(self) -> int:
        type(self).calls.append(repr(self.model_path)[:40])
        return super()._initialize_model_variables()


@pytest.mark.parametrize("entry", ["fit", "get_inference_config", "fit_with_differentiable_input"])
def test_every_model_load_goes_through_initialize_model_variables(checkpoint, entry):
    _Spy.calls = []
    est = _Spy(**_kwargs(checkpoint))
    X, y = _data()
    if entry == "fit":
        est.fit(X, y)
    elif entry == "get_inference_config":
        est.get_inference_config()
    else:
        est.set_params(differentiable_input=True, ignore_pretraining_limits=True)
        est.fit_with_differentiable_input(torch.tensor(X).float(), torch.tensor(y).float())
    assert len(_Spy.calls) == 1


def test_initialize_model_variables_reads_model_path_then_and_sets_models(checkpoint):
    # The override hands tabpfn a translated model_path for the call only, and
    # patches self.models_ after it: tabpfn must read the attribute during the
    # call and run exactly the models it leaves in models_.
    specs = load_host(checkpoint)
    est = TabPFNRegressor(**{**_kwargs(checkpoint), "model_path": "unused"})
    est.model_path = specs
    est._initialize_model_variables()
    assert est.models_[0] is specs.model
    X, y = _data()
    est = TabPFNRegressor(**_kwargs(checkpoint)).fit(X, y)
    reference = est.predict(X)
    with torch.no_grad():
        for p in est.models_[0].parameters():
            p.mul_(1.5)  # the executor holds these very models
    assert not np.array_equal(est.predict(X), reference)


def test_get_tuning_regressor_is_built_from_get_params_and_is_what_fit_tunes_with(checkpoint):
    X, y = _data(n=80)
    est = TabPFNRegressor(
        **_kwargs(checkpoint),
        tuning_config={
            "calibrate_temperature": True,
            "tuning_holdout_frac": 0.5,
            "tuning_n_folds": 1,
        },
    )
    built: list[TabPFNRegressor] = []
    original = TabPFNRegressor._get_tuning_regressor

    def spy(self, **kwargs):
        built.append(original(self, **kwargs))
        return built[-1]

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(TabPFNRegressor, "_get_tuning_regressor", spy)
        with pytest.warns(UserWarning):
            est.fit(X, y)
    assert built and all(type(b) is TabPFNRegressor for b in built)
    params = built[0].get_params()
    assert params["model_path"] == est.model_path and params["tuning_config"] is None
    assert params["fit_mode"] == "fit_preprocessors"


def test_the_tuning_regressor_of_otabpfnregressor_keeps_the_retrofit_settings(checkpoint):
    est = OTabPFNRegressor(mode="oattention", tau=0.5, **_kwargs(checkpoint))
    est.categorical_features_indices_ = None  # set by fit before tuning
    tuning = est._get_tuning_regressor()
    view = TabPFNRegressor(
        **{k: v for k, v in est.get_params().items() if hasattr(TabPFNRegressor(), k)}
    )
    view.categorical_features_indices_ = None
    plain = view._get_tuning_regressor()
    assert type(tuning) is OTabPFNRegressor
    assert tuning.mode == "oattention" and tuning.tau == 0.5
    expected = plain.get_params()
    assert {k: v for k, v in tuning.get_params().items() if k in expected} == expected


def test_modelspecs_models_are_used_by_reference(checkpoint):
    # Why the override patches a copy of a ModelSpecs model: tabpfn runs the caller's.
    specs = load_host(checkpoint)
    est = TabPFNRegressor(**{**_kwargs(checkpoint), "model_path": specs}).fit(*_data())
    assert est.models_[0] is specs.model
    assert isinstance(specs, ModelSpecs)
