"""The helper module (``tests/utils.py``) that tabpfn's test module imports.

tabpfn's source distribution ships its tests but not this helper, so the
runner installs this one, written for this project, in its place. Only the CPU
is tested unless ``RETROFIT_SUITE_DEVICES`` names more (comma-separated).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

import pytest
import torch


def get_pytest_devices() -> list[str]:
    """The devices the parametrised tests run on (``cpu`` by default)."""
    names = os.environ.get("RETROFIT_SUITE_DEVICES", "cpu")
    return [name.strip() for name in names.split(",") if name.strip()]


def _marks(config: tuple[Any, ...]) -> list[pytest.MarkDecorator]:
    return [pytest.mark.slow] if "mps" in config else []


def mark_mps_configs_as_slow(configs: Iterable[Any]) -> list[Any]:
    """One ``pytest.param`` per configuration tuple, marked slow where it names MPS."""
    out = []
    for config in configs:
        values = config if isinstance(config, tuple) else (config,)
        out.append(pytest.param(*values, marks=_marks(values)))
    return out


def get_pytest_devices_with_mps_marked_slow() -> list[Any]:
    """The devices as ``pytest.param``, MPS marked slow."""
    return mark_mps_configs_as_slow(get_pytest_devices())


def is_cpu_float16_supported() -> bool:
    """Whether this torch multiplies float16 matrices on the CPU."""
    try:
        a = torch.ones(2, 2, dtype=torch.float16)
        _ = a @ a
    except RuntimeError:
        return False
    return True


def patch_layernorm_no_affine(model: torch.nn.Module) -> None:
    """Needed only by the ONNX export test, which is deselected (it needs v2.5 weights)."""
    raise NotImplementedError("the ONNX export test is deselected: it needs downloaded weights")
