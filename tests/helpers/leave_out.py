"""The estimators, table and oracles of the leave-out tests (``tests/retrofit/leave_out/``).

Tiny random hosts with perturbed zero-inits: the v3 checkpoint's path (the
``tiny_v3_path`` fixture) or a tiny host's name for a regressor, a tiny v2 or
v3 classifier. Two ensemble members, ``random_state=0``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from sklearn.base import clone
from tabpfn.preprocessing import PreprocessorConfig

from retrofit import OTabPFNClassifier, OTabPFNRegressor
from retrofit.leave_out.transductive import X_SIDE_ATTRIBUTES
from tests.helpers.exactness import CLASSIFIER_PROBA_ULPS, MODEL_ULPS, assert_within_ulps
from tests.helpers.tiny_hosts import tiny_classifier_specs, tiny_host_specs

__all__ = [
    "CLASSIFIER_HOSTS",
    "DTYPES",
    "MODES",
    "REGRESSION_HOSTS",
    "ROW_DEPENDENT",
    "assert_probabilities_close",
    "assert_regression_close",
    "fold_classifier",
    "fold_regressor",
    "leave_out_table",
    "transductive_oracle",
]

MODES = ("oattention", "full-o")
DTYPES = (torch.float32, torch.float64)
CLASSIFIER_HOSTS = ("tabpfn_v2", "tabpfn_v3")
#: The regressors' hosts, as the ``regression_host`` fixture takes them (``indirect``).
REGRESSION_HOSTS = ("v3", "tabpfn_v2_6")


#: An inference config whose feature pipelines depend on the rows they are
#: fitted on (quantiles, an SVD, a fingerprint feature) and whose target
#: transform on the labels (a power transform on one of the two members): the
#: tiny hosts' own config transforms nothing.
ROW_DEPENDENT = {
    "PREPROCESS_TRANSFORMS": [
        PreprocessorConfig(
            "quantile_uni_coarse", categorical_name="numeric", global_transformer_name="svd"
        )
    ],
    "REGRESSION_Y_PREPROCESS_TRANSFORMS": (None, "safepower"),
    "FINGERPRINT_FEATURE": True,
}


def fold_regressor(host: Any, mode="full-o", dtype=torch.float32, **kwargs) -> OTabPFNRegressor:
    """A regressor over ``host``: the tiny v3 checkpoint's path, or a tiny host's name."""
    model_path = str(host) if not isinstance(host, str) else tiny_host_specs(host)
    base = {"device": "cpu", "n_estimators": 2, "random_state": 0}
    return OTabPFNRegressor(
        mode=mode, model_path=model_path, inference_precision=dtype, **{**base, **kwargs}
    )


def fold_classifier(
    name="tabpfn_v3", mode="full-o", dtype=torch.float32, **kwargs
) -> OTabPFNClassifier:
    """A classifier over the tiny ``name`` host."""
    return OTabPFNClassifier(
        mode=mode,
        model_path=tiny_classifier_specs(name, n_estimators=2),
        device="cpu",
        n_estimators=2,
        inference_precision=dtype,
        random_state=0,
        **kwargs,
    )


def assert_regression_close(got: np.ndarray, want: np.ndarray, dtype: torch.dtype) -> None:
    """Out-of-fold regression outputs equal within ``MODEL_ULPS`` of the inference dtype."""
    assert got.shape == want.shape and got.dtype == want.dtype
    assert_within_ulps(
        torch.from_numpy(got), torch.from_numpy(want), ulps=MODEL_ULPS[dtype], dtype=dtype
    )


def assert_probabilities_close(got: np.ndarray, want: np.ndarray, dtype: torch.dtype) -> None:
    """Out-of-fold probabilities equal within ``CLASSIFIER_PROBA_ULPS`` of the inference dtype."""
    assert got.shape == want.shape and got.dtype == want.dtype
    assert_within_ulps(
        torch.from_numpy(got),
        torch.from_numpy(want),
        ulps=CLASSIFIER_PROBA_ULPS[dtype],
        dtype=torch.float32,  # tabpfn's probabilities are float32 in every precision
    )


def leave_out_table(n: int = 24, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Features ``(n, 3)``, a regression target and three classes (every class in every fold)."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    y = X @ np.array([1.0, -1.0, 0.5]) + 0.3 * rng.normal(size=n)
    labels = np.digitize(y, np.quantile(y, [1 / 3, 2 / 3]))
    return X, y, labels


def transductive_oracle(
    estimator: OTabPFNRegressor | OTabPFNClassifier,
    X: np.ndarray,
    y: np.ndarray,
    folds: Sequence[tuple[np.ndarray, np.ndarray]],
    method: str = "predict",
) -> np.ndarray:
    """Every row's prediction by tabpfn's unbatched predict of a fold fit over a shared X side.

    Each fold is fitted by tabpfn (a clone of the retrofit estimator, its
    whole ``fit`` on the fold's train rows: the y side is tabpfn's); then its X
    side is replaced by that of one fit on all rows of ``X`` with random
    labels (the X side reads none): the cleaning ``predict`` applies to test
    rows, and each member's fitted feature pipeline with its rows for the
    fold's train rows as the context. Predicted by ``predict``
    (``output_type=method`` for a regressor's other methods) or
    ``predict_proba``; every fold must hold every class for the latter.
    """
    rng = np.random.default_rng(7)
    classify = isinstance(estimator, OTabPFNClassifier)
    noise = rng.integers(0, 3, len(X)) if classify else rng.normal(size=len(X))
    everything = clone(estimator).fit(X, noise)
    out = None
    for train, test in folds:
        fold = clone(estimator).fit(X[train], y[train])
        for name in X_SIDE_ATTRIBUTES:
            setattr(fold, name, getattr(everything, name))
        members = fold.executor_.ensemble_members
        for member, shared in zip(members, everything.executor_.ensemble_members, strict=True):
            member.cpu_preprocessor = shared.cpu_preprocessor
            member.gpu_preprocessor = shared.gpu_preprocessor
            member.feature_schema = shared.feature_schema
            member.feature_indices = shared.feature_indices
            member.X_train = shared.X_train[train]
        if method == "predict_proba":
            prediction = fold.predict_proba(X[test])
        elif classify or method == "predict":
            prediction = fold.predict(X[test])
        else:
            prediction = fold.predict(X[test], output_type=method)
        if out is None:
            out = np.empty((len(X), *prediction.shape[1:]), dtype=prediction.dtype)
        out[test] = prediction
    assert out is not None
    return out
