"""What ``patch`` / ``unpatch`` (retrofit/patcher.py) refuse: anything that is not a TabPFN host."""

from __future__ import annotations

import pytest
from torch import nn

import retrofit
from retrofit.errors import (
    NotPatchedError,
    UnsupportedArchitectureError,
)
from tests.helpers.tiny_hosts import build_host
from tests.helpers.tiny_models import build_tiny_v3, tiny_v3_config


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


@pytest.mark.parametrize("name", ["tabpfn_v2_6", "tabpfn_v3", "tabpfn_v3_5"])
def test_a_patch_report_prints_readably_one_module_a_line(name):
    # The dataclass's own repr spelled every module on one line (870 characters for
    # the embedded v3 host).
    model = build_tiny_v3(tiny_v3_config()) if name == "tabpfn_v3" else build_host(name)
    report = retrofit.patch(model, "full-o")
    short = repr(report)
    assert "\n" not in short and len(short) <= 200
    assert f"modules=<{len(report.modules)}:" in short and "mode='full-o'" in short
    lines = str(report).splitlines()
    assert len(lines) == 2 + len(report.modules)
    assert max(len(line) for line in lines) <= 100
    assert report.digest() in lines[0] and "mode full-o" in lines[1]
    for module, line in zip(report.modules, lines[2:], strict=True):
        assert (module.path or "(model)") in line and f"-> {module.new_class}" in line
