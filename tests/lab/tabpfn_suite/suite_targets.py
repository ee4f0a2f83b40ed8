"""The estimators tabpfn's regressor and classifier tests run against, one per target.

A target is ``"tabpfn"`` (plain ``tabpfn.TabPFNRegressor`` on the embedded
checkpoint: the reference) or a retrofit mode (``OTabPFNRegressor`` with that
``mode``). Each is the class with its defaults changed (``model_path`` to the
embedded checkpoint, which runs offline where tabpfn's default ``"auto"`` would
download, and ``mode``), so the tests' ``TabPFNRegressor(...)`` calls,
``create_default_for_version``, ``clone`` and pickling work unchanged.

The classifier targets are ``tabpfn.TabPFNClassifier`` and ``OTabPFNClassifier``
the same way, on two checkpoints (the published ones need a download):

* the plain targets (:data:`TARGETS`): a small random TabPFN v3 classifier
  (zero-inits perturbed, up to 10 classes, ICL width 16), written once per run
  to a temporary folder (:func:`classifier_checkpoint`);
* the ``-embedded`` targets (:data:`EMBEDDED_CLASSIFIER_TARGETS`, e.g.
  ``"full-o-embedded"``): the shipped embedded classifier
  (``embedded_model_path("classifier")``), ``OTabPFNClassifier(model_path="embedded")``.
  They run the classifier module only: the plain targets already run the
  regressor module on the embedded regressor.

What fails on a checkpoint fails for plain tabpfn on it too, except where the
retrofit changes behaviour on purpose (``expectations.py`` says which, per target).
"""

from __future__ import annotations

import functools
import inspect
import tempfile
from pathlib import Path
from typing import Any

from tabpfn import TabPFNClassifier, TabPFNRegressor

from retrofit import OTabPFNClassifier, OTabPFNRegressor, embedded_model_path
from retrofit.settings import MODES
from tests.helpers.tiny_models import build_tiny_v3, save_tiny_checkpoint, tiny_v3_config

TARGETS: tuple[str, ...] = ("tabpfn", *MODES)
#: Suffix of a target on the shipped embedded classifier.
EMBEDDED_SUFFIX = "-embedded"
EMBEDDED_CLASSIFIER_TARGETS: tuple[str, ...] = tuple(t + EMBEDDED_SUFFIX for t in TARGETS)
ALL_TARGETS: tuple[str, ...] = (*TARGETS, *EMBEDDED_CLASSIFIER_TARGETS)


def modules_of(target: str) -> tuple[str, ...]:
    """The test modules (``"regressor"``, ``"classifier"``) a target runs."""
    if target in EMBEDDED_CLASSIFIER_TARGETS:
        return ("classifier",)
    if target in TARGETS:
        return ("regressor", "classifier")
    raise ValueError(f"unknown target {target!r}; expected one of {ALL_TARGETS}")


#: The random classifier every classifier target runs (``TabPFNV3Config`` fields).
CLASSIFIER_CONFIG = tiny_v3_config(
    max_num_classes=10, decoder_head_dim=4, decoder_num_heads=2, decoder_use_softmax_scaling=True
)


@functools.cache
def classifier_checkpoint() -> Path:
    """The random v3 classifier checkpoint, written once per process."""
    folder = Path(tempfile.mkdtemp(prefix="suite-classifier-"))
    model = build_tiny_v3(CLASSIFIER_CONFIG, seed=0)
    return save_tiny_checkpoint(model, CLASSIFIER_CONFIG, folder / "tiny_v3_classifier.safetensors")


def with_defaults(base: type, module: str, **defaults: Any) -> type:
    """A subclass of ``base``, under tabpfn's class name, in ``module`` with other defaults."""
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
    name = "TabPFNClassifier" if issubclass(base, TabPFNClassifier) else "TabPFNRegressor"
    cls = type(name, (base,), {"__init__": init, "__module__": module})
    cls.__qualname__ = name
    return cls


def regressor_for(target: str, module: str) -> type:
    """The ``TabPFNRegressor`` that tabpfn's tests import for ``target``."""
    path = str(embedded_model_path())  # the digest is checked here
    if target == "tabpfn":
        return with_defaults(TabPFNRegressor, module, model_path=path)
    if target not in MODES:
        raise ValueError(f"unknown target {target!r}; expected one of {TARGETS}")
    return with_defaults(OTabPFNRegressor, module, mode=target, model_path=path)


def classifier_for(target: str, module: str) -> type:
    """The ``TabPFNClassifier`` that tabpfn's tests import for ``target``."""
    if target in EMBEDDED_CLASSIFIER_TARGETS:
        target = target.removesuffix(EMBEDDED_SUFFIX)
        path = str(embedded_model_path("classifier"))  # the digest is checked here
    else:
        path = str(classifier_checkpoint())
    if target == "tabpfn":
        return with_defaults(TabPFNClassifier, module, model_path=path)
    if target not in MODES:
        raise ValueError(f"unknown target {target!r}; expected one of {ALL_TARGETS}")
    return with_defaults(OTabPFNClassifier, module, mode=target, model_path=path)
