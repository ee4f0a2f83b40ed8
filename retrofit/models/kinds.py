"""What a host model predicts: a regressor's task, a classifier's, or both (v3.5).

tabpfn builds one checkpoint for one task, except v3.5, whose one model does
both (its ``forward`` takes the task). :func:`host_kinds` reads it off a loaded
model; a saved retrofit records it and ``tabpfn-retrofit patch`` names the
estimator that loads the result (:data:`ESTIMATOR_NAMES`).
"""

from __future__ import annotations

from tabpfn import ModelSpecs
from tabpfn.architectures.tabpfn_v2 import TabPFNV2

from retrofit.models.weights import KINDS, Which

__all__ = ["ESTIMATOR_NAMES", "host_kinds"]

#: The estimator of this package that runs a host of each kind.
ESTIMATOR_NAMES: dict[str, str] = {
    "regressor": "OTabPFNRegressor",
    "classifier": "OTabPFNClassifier",
}


def host_kinds(specs: ModelSpecs) -> tuple[Which, ...]:
    """``("regressor",)``, ``("classifier",)`` or both (``KINDS``): what ``specs.model`` does.

    A v2.5, v2.6 or v3 model says so itself (``task_type``); a v2 model
    classifies when its config has ``max_num_classes >= 2`` (the rule its own
    target encoding follows); a model with neither (v3.5) does both.
    """
    task = getattr(specs.model, "task_type", None)
    if task is None and isinstance(specs.model, TabPFNV2):
        task = "multiclass" if specs.architecture_config.max_num_classes >= 2 else "regression"
    if task == "multiclass":
        return ("classifier",)
    if task == "regression":
        return ("regressor",)
    return KINDS
