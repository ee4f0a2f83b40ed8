"""The estimators tabpfn's regressor tests run against, one per target.

A target is ``"tabpfn"`` (plain ``tabpfn.TabPFNRegressor`` on the embedded
checkpoint: the reference) or a retrofit mode (``OTabPFNRegressor`` with that
``mode``). Each is the class with one default changed (``model_path`` to the
embedded checkpoint, or ``mode``), so the tests' ``TabPFNRegressor(...)`` calls,
``create_default_for_version``, ``clone`` and pickling work unchanged.
"""

from __future__ import annotations

import inspect
from typing import Any

from tabpfn import TabPFNRegressor

from retrofit import OTabPFNRegressor, embedded_model_path
from retrofit.settings import MODES

TARGETS: tuple[str, ...] = ("tabpfn", *MODES)


def with_defaults(base: type, module: str, **defaults: Any) -> type:
    """A subclass of ``base`` named ``TabPFNRegressor`` in ``module`` with other defaults."""
    signature = inspect.signature(base.__init__)
    parameters = [
        p.replace(default=defaults[p.name]) if p.name in defaults else p
        for p in signature.parameters.values()
    ]

    def init(self, **kwargs: Any) -> None:
        for name, value in defaults.items():
            kwargs.setdefault(name, value)
        base.__init__(self, **kwargs)

    # scikit-learn reads the parameters from the signature of __init__.
    init.__signature__ = signature.replace(parameters=parameters)
    cls = type("TabPFNRegressor", (base,), {"__init__": init, "__module__": module})
    cls.__qualname__ = "TabPFNRegressor"
    return cls


def regressor_for(target: str, module: str) -> type:
    """The ``TabPFNRegressor`` that tabpfn's tests import for ``target``."""
    if target == "tabpfn":
        return with_defaults(TabPFNRegressor, module, model_path=str(embedded_model_path()))
    if target not in MODES:
        raise ValueError(f"unknown target {target!r}; expected one of {TARGETS}")
    return with_defaults(OTabPFNRegressor, module, mode=target)
