"""Weighted fits against the rows repeated: data, tabpfn's fitted ensembles, comparisons.

A weighted fit is compared with tabpfn's fit on the table whose row ``j`` is
repeated ``w_j`` times (``np.repeat`` order, so row ``j``'s copies are
adjacent): a weighted member's train rows, each repeated by its weight,
must be the repeated fit's member's train rows.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pandas as pd
import torch
from tabpfn import TabPFNClassifier, TabPFNRegressor
from tabpfn.inference_config import InferenceConfig

from retrofit.batching.engine import cleaned_test_rows
from retrofit.models.embedded import embedded_model_path
from retrofit.weighted_preprocessing import (
    categorical_inference_threshold,
    weighted_ensemble_preprocessor,
    weighted_target_standardisation,
)

__all__ = [
    "POWER_OUTPUT_RTOL",
    "PRESETS",
    "SUM_ULPS",
    "SVD_RTOL",
    "cleaned_test_rows",
    "mixed_table",
    "preset_config",
    "repeat_rows",
    "tabpfn_fit",
    "weighted_members",
]


#: Power-transform outputs (``power``, ``safepower``, Box-Cox, the KDI stand-in),
#: weighted vs repeated, relative to ``max(1, max|output|)``: the lambda moves within
#: the solver's bound (tests/retrofit/weighted_preprocessing/test_power.py) and the
#: outputs with it. Measured at most 1.4e-7 over 20 seeds (``power``, ``safepower``;
#: Box-Cox 4.4e-8, KDI 7.7e-8).
POWER_OUTPUT_RTOL = 1e-5

#: SVD features, weighted vs repeated, relative to ``max(1, max|feature|)``: ARPACK
#: (tolerance 0: machine precision) on ``diag(sqrt w) X`` against the repeated rows,
#: where a component moves by about ``eps ||X|| / gap`` to the next singular value.
#: Measured at most 19 float64 ulps (4.2e-15) over 30 random tables of 80 rows
#: (test_steps.py) and 1.3e-12 on the preset tables (test_ensemble.py: an original
#: column beside its quantile transform, closer singular values).
SVD_RTOL = 1e-10

#: A mean and a variance summed in another order (imputation, standard scaling,
#: the standardised targets, outlier clipping), in float64 ulps of the data's scale.
SUM_ULPS = 64


def mixed_table(n_rows: int, seed: int, *, task: str) -> tuple[pd.DataFrame, np.ndarray]:
    """Numeric, categorical (numeric codes and strings) and NaN columns, and a target.

    The codes column is categorical only when tabpfn infers it (more than 100 rows).
    """
    rng = np.random.default_rng(seed)
    X = pd.DataFrame(
        {
            "skewed": rng.lognormal(size=n_rows),
            "normal": rng.normal(size=n_rows),
            "heavy": rng.standard_t(3, size=n_rows),
            # Three values: categorical only past tabpfn's 100-row rule.
            "codes": rng.integers(0, 3, size=n_rows).astype(np.float64),
            "letters": rng.choice(["a", "b", "c"], size=n_rows).astype(object),
            "ties": np.round(rng.normal(size=n_rows), 1),
        }
    )
    for column, share in (("normal", 0.15), ("heavy", 0.1), ("ties", 0.1)):
        X.loc[rng.random(n_rows) < share, column] = np.nan
    X.loc[rng.random(n_rows) < 0.1, "letters"] = None
    signal = np.nan_to_num(X["normal"].to_numpy()) + np.log(X["skewed"].to_numpy())
    if task == "classifier":
        y = np.digitize(signal, np.quantile(signal, [0.33, 0.66]))
    else:
        y = signal + 0.1 * rng.normal(size=n_rows)
    return X, y


def repeat_rows(table: Any, w_N: np.ndarray) -> Any:
    """``table`` with row ``j`` repeated ``w_N[j]`` times, copies adjacent."""
    index = np.repeat(np.arange(len(w_N)), np.asarray(w_N, dtype=np.int64))
    return table.iloc[index].reset_index(drop=True) if hasattr(table, "iloc") else table[index]


def preset_config(version: str, task: str) -> InferenceConfig:
    """tabpfn 9.2's default inference config of ``version`` ("v2", "v2.5") or the embedded one."""
    if version == "embedded":
        cls = TabPFNClassifier if task == "classifier" else TabPFNRegressor
        return cls(model_path=embedded_model_path(task), device="cpu").get_inference_config()
    kind = "multiclass" if task == "classifier" else "regression"
    return InferenceConfig.get_default(kind, version)


#: The presets tested: tabpfn's in-code defaults and the embedded hosts' configs.
PRESETS = ("v2", "v2.5", "embedded")


def tabpfn_fit(task: str, config: InferenceConfig, X: Any, y: Any, **overrides: Any) -> Any:
    """tabpfn's estimator fitted on the embedded host with ``config`` (members not yet fitted)."""
    cls = TabPFNClassifier if task == "classifier" else TabPFNRegressor
    fields = {
        f.name: getattr(config, f.name)
        for f in dataclasses.fields(config)
        if not f.name.startswith("_") and f.name != "N_ESTIMATORS"
    }
    estimator = cls(
        model_path=embedded_model_path(task),
        inference_config={**fields, **overrides},
        n_estimators=4,
        fit_mode="low_memory",
        device="cpu",
        random_state=0,
        inference_precision=torch.float32,
    )
    return estimator.fit(X, y)


def weighted_members(
    task: str, config: InferenceConfig, X: Any, y: np.ndarray, w_N: np.ndarray
) -> tuple[Any, Any, list[Any], np.ndarray]:
    """The weighted fit: tabpfn's fit on the rows held, then its members fitted weighted.

    Returns the tabpfn estimator (fitted on ``X``), the weighted ensemble
    preprocessor, its fitted members and the targets they were fitted on
    (encoded, or standardised with the weighted moments).
    """
    threshold = categorical_inference_threshold(
        w_N, config.MIN_NUMBER_SAMPLES_FOR_CATEGORICAL_INFERENCE
    )
    estimator = tabpfn_fit(
        task, config, X, y, MIN_NUMBER_SAMPLES_FOR_CATEGORICAL_INFERENCE=threshold
    )
    X_train = estimator.executor_.X_train
    if task == "classifier":
        y_train = estimator.executor_.y_train
    else:
        mean, std = weighted_target_standardisation(y, w_N)
        y_train = (np.asarray(y, dtype=np.float64) - mean) / (std + 1e-20)
    weighted = weighted_ensemble_preprocessor(
        estimator.ensemble_preprocessor_,
        w_N,
        inference_config=estimator.inference_config_,
        task_type=estimator.estimator_type,
        X_train=X_train,
        y_train=y_train,
    )
    members = weighted.fit_transform_ensemble_members(X_train, y_train)
    return estimator, weighted, members, y_train
