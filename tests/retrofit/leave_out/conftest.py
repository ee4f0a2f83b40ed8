"""Fixtures of the leave-out tests."""

from __future__ import annotations

import pytest


@pytest.fixture(params=["v3", "tabpfn_v2_6"])
def regression_host(request, tiny_v3_path):
    """A tiny regressor host: the v3 checkpoint's path or the v2.6 host's name."""
    return tiny_v3_path if request.param == "v3" else request.param
