"""The retrofit's settings (retrofit/settings.py): the range of tau, refused up front."""

from __future__ import annotations

import numpy as np
import pytest

import retrofit
from retrofit import settings
from retrofit.errors import (
    InvalidPatchConfigError,
)
from retrofit.settings import RetrofitSettings
from tests.helpers.estimators import small_regressor
from tests.helpers.tiny_models import build_tiny_v3, tiny_v3_checkpoint

X = np.arange(12.0).reshape(6, 2)


@pytest.mark.parametrize("tau", [1e39, 1e300, 1e-300, 1e-39])
def test_a_tau_outside_the_normal_float32_range_is_refused_up_front(tmp_path, tau):
    """Such a tau is refused, not run all-null or all-present."""
    with pytest.raises(InvalidPatchConfigError, match="tau must lie in"):
        RetrofitSettings("full-o", tau)
    with pytest.raises(InvalidPatchConfigError, match="tau"):
        retrofit.patch(build_tiny_v3(), "full-o", tau=tau)
    with pytest.raises(InvalidPatchConfigError, match="tau"):
        small_regressor(tiny_v3_checkpoint(tmp_path), tau=tau).fit(X, np.arange(6.0))


def test_the_ends_of_the_tau_range_are_accepted_and_patch():
    for tau in settings.TAU_RANGE:
        assert RetrofitSettings("full-o", tau).tau == tau
        model = build_tiny_v3()
        assert retrofit.patch(model, "full-o", tau=tau).tau == tau
