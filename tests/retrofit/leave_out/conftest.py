"""Fixtures of the leave-out tests."""

from __future__ import annotations

import pytest


@pytest.fixture
def regression_host(request, tiny_v3_path):
    """A tiny regressor host named by the test's parameter (``indirect``): ``"v3"``, the v3
    checkpoint's path, or a tiny host's name (``"tabpfn_v2_6"``)."""
    return tiny_v3_path if request.param == "v3" else request.param
