"""Bad input gets a message that says what is wrong."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from torch import nn

import retrofit
from retrofit import settings
from retrofit.errors import (
    CheckpointNotFoundError,
    InvalidInputError,
    InvalidPatchConfigError,
    NotPatchedError,
    UnsupportedArchitectureError,
)
from retrofit.models import loading
from retrofit.regressor import OTabPFNRegressor
from retrofit.settings import RetrofitSettings
from retrofit.validation import check_numeric_target
from tests.helpers.tiny_models import build_tiny_v3, tiny_v3_checkpoint

X = np.arange(12.0).reshape(6, 2)


def _estimator(model_path, **kwargs) -> OTabPFNRegressor:
    return OTabPFNRegressor(
        model_path=str(model_path),
        n_estimators=1,
        device="cpu",
        inference_precision=torch.float32,
        **kwargs,
    )


@pytest.mark.parametrize(
    "y",
    [
        ["a", "b", "c", "d", "e", "f"],
        pd.Series(["x", "y", "x", "y", "x", "y"], dtype="string"),
        np.array([1.0, 2.0, "three", 4.0, 5.0, 6.0], dtype=object),
        [b"a", b"b", b"c", b"d", b"e", b"f"],
        pd.Series(pd.date_range("2020-01-01", periods=6)),
    ],
    ids=["list", "pandas-string", "object-mixed", "bytes", "dates"],
)
def test_a_string_target_is_refused_as_not_numeric(tmp_path, y):
    """A string target in the API says "y must be numeric"."""
    with pytest.raises(InvalidInputError, match="y must be numeric"):
        _estimator(tiny_v3_checkpoint(tmp_path)).fit(X, y)
    assert issubclass(InvalidInputError, ValueError)


@pytest.mark.parametrize(
    "y",
    [
        np.arange(6.0),
        list(range(6)),
        pd.Series(np.arange(6.0)),
        np.arange(6.0).astype(object),
        # Numbers as text are numbers, as tabpfn takes them.
        pd.Series(["0", "1", "2", "3", "4", "5.0"]),
        np.array(["0", "1", "2", "3", "4", "5.0"]),
    ],
    ids=["float", "int-list", "series", "object-floats", "text-series", "text-array"],
)
def test_numeric_targets_pass_the_target_check(y):
    assert np.array_equal(np.asarray(check_numeric_target(y), dtype=np.float64), np.arange(6.0))


def test_patching_something_that_is_not_a_module_is_an_unsupported_architecture():
    """``patch(object(), ...)`` is UnsupportedArchitectureError."""
    with pytest.raises(UnsupportedArchitectureError, match=r"nn\.Module"):
        retrofit.patch(object(), "full-o")
    with pytest.raises(UnsupportedArchitectureError):
        retrofit.patch(None, "oattention")
    assert not retrofit.is_patched(object())
    with pytest.raises(NotPatchedError):
        retrofit.unpatch(object())
    with pytest.raises(UnsupportedArchitectureError, match="Linear"):
        retrofit.patch(nn.Linear(2, 2), "full-o")


def test_a_directory_without_retrofit_json_says_that_file_is_missing(tmp_path):
    """A directory given as a model names the missing retrofit.json."""
    folder = tmp_path / "weights_dir"
    folder.mkdir()
    tiny_v3_checkpoint(folder)  # a checkpoint inside does not make it a saved directory
    with pytest.raises(CheckpointNotFoundError, match=r"retrofit\.json is missing"):
        loading.resolve_model(str(folder))
    with pytest.raises(CheckpointNotFoundError, match=r"retrofit\.json"):
        _estimator(folder).fit(X, np.arange(6.0))


@pytest.mark.parametrize("tau", [1e39, 1e300, 1e-300, 1e-39])
def test_a_tau_outside_the_normal_float32_range_is_refused_up_front(tmp_path, tau):
    """Such a tau is refused, not run all-null or all-present."""
    with pytest.raises(InvalidPatchConfigError, match="tau must lie in"):
        RetrofitSettings("full-o", tau)
    with pytest.raises(InvalidPatchConfigError, match="tau"):
        retrofit.patch(build_tiny_v3(), "full-o", tau=tau)
    with pytest.raises(InvalidPatchConfigError, match="tau"):
        _estimator(tiny_v3_checkpoint(tmp_path), tau=tau).fit(X, np.arange(6.0))


def test_the_ends_of_the_tau_range_are_accepted_and_patch():
    for tau in settings.TAU_RANGE:
        assert RetrofitSettings("full-o", tau).tau == tau
        model = build_tiny_v3()
        assert retrofit.patch(model, "full-o", tau=tau).tau == tau
