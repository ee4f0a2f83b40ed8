"""The estimator and the metrics of each task a suite can have.

A regression suite fits ``retrofit.OTabPFNRegressor`` and measures RMSE and
MAE of ``predict``; a classification suite fits ``retrofit.OTabPFNClassifier``
and measures log loss, accuracy and macro one-vs-rest ROC AUC of
``predict_proba``. The row of a run holds exactly its task's metrics, so a
regression row is what it was before classification suites existed.
"""

from __future__ import annotations

import numpy as np
import torch
from sklearn.metrics import log_loss, roc_auc_score

from eval.paper.protocol import SUITE_TASK
from retrofit.classifier import OTabPFNClassifier
from retrofit.models.loading import load_host
from retrofit.regressor import OTabPFNRegressor

__all__ = [
    "ESTIMATORS",
    "check_host_task",
    "classification_metrics",
    "cpu_float32_estimator",
    "regression_metrics",
    "suite_task",
]

ESTIMATORS: dict[str, type] = {
    "regression": OTabPFNRegressor,
    "classification": OTabPFNClassifier,
}
"""The retrofit estimator a task's runs fit."""


def cpu_float32_estimator(
    task: str, model_path: str, *, mode: str = "full-o", n_estimators: int | str = "auto", seed: int
) -> OTabPFNRegressor | OTabPFNClassifier:
    """The task's retrofit estimator of the leave-out measurements: CPU, float32, any row count.

    ``ignore_pretraining_limits``: the suites' and benchmarks' tables may pass
    tabpfn's CPU row limit; ``seed`` is the integer ``random_state``.
    """
    return ESTIMATORS[task](
        mode=mode,
        model_path=model_path,
        device="cpu",
        n_estimators=n_estimators,
        inference_precision=torch.float32,
        ignore_pretraining_limits=True,
        random_state=seed,
    )


def suite_task(suite: str) -> str:
    """``"regression"`` or ``"classification"``; ValueError naming the suites if unknown."""
    try:
        return SUITE_TASK[suite]
    except KeyError:
        valid = ", ".join(SUITE_TASK)
        raise ValueError(f"unknown suite {suite!r}; valid suites: {valid}") from None


def check_host_task(model_path: str, suite: str) -> None:
    """ValueError unless a classification suite is given a classifier checkpoint.

    A classifier's architecture config has ``max_num_classes >= 2`` (tabpfn's
    own test); a regressor handed to a classification suite would otherwise
    store every case as failed. Regression suites keep their behaviour.
    """
    if suite_task(suite) != "classification":
        return
    classes = int(load_host(model_path).architecture_config.max_num_classes)
    if classes < 2:
        raise ValueError(
            f"suite {suite!r} classifies; the checkpoint {model_path} is not a classifier "
            f"(max_num_classes {classes}): pass --model with a classifier checkpoint"
        )


def regression_metrics(pred: np.ndarray, y: np.ndarray) -> dict[str, float]:
    """RMSE and MAE of finite predictions."""
    err = pred - y
    return {"rmse": float(np.sqrt(np.mean(err**2))), "mae": float(np.mean(np.abs(err)))}


def classification_metrics(
    proba: np.ndarray, classes: np.ndarray, y: np.ndarray
) -> dict[str, float | None]:
    """Log loss, accuracy and macro one-vs-rest ROC AUC of class probabilities.

    ROC AUC is the mean over the classes that occur in ``y`` (and not in every
    row of it) of the binary AUC of "this class" against the rest, scored by
    that class's probability: scikit-learn's ``multi_class="ovr"`` macro
    average, computed per class so that a test part lacking a class (a row
    limit in tests) still has one; for two classes it equals the binary AUC.

    Args:
        proba: ``(n, K)`` probabilities, column ``k`` for ``classes[k]``.
        classes: The estimator's ``classes_``.
        y: True labels, ``(n,)``.

    Returns:
        ``log_loss`` (natural log, probabilities clipped by scikit-learn),
        ``accuracy``, ``roc_auc`` (``None`` when no class has both outcomes).
    """
    pred = classes[np.argmax(proba, axis=1)]
    aucs = [
        roc_auc_score(y == c, proba[:, k])
        for k, c in enumerate(classes)
        if 0 < int(np.sum(y == c)) < len(y)
    ]
    return {
        "log_loss": float(log_loss(y, proba, labels=classes)),
        "accuracy": float(np.mean(pred == y)),
        "roc_auc": float(np.mean(aucs)) if aucs else None,
    }
