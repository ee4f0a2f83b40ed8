"""What ``patch`` / ``unpatch`` (retrofit/patcher.py) refuse: anything that is not a TabPFN host."""

from __future__ import annotations

import pytest
from torch import nn

import retrofit
from retrofit.errors import (
    NotPatchedError,
    UnsupportedArchitectureError,
)


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
