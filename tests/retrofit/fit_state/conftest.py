"""A fit state saved once per test module, for the tests that alter copies of it."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from retrofit import OTabPFNRegressor
from tests.helpers.regression_tasks import linear_task


@pytest.fixture(scope="module")
def saved_fit(tmp_path_factory, tiny_v3_path) -> Path:
    """A patched regressor's fit state on the tiny v3 checkpoint (never changed: copy it)."""
    X, y = linear_task(40, 3)
    estimator = OTabPFNRegressor(
        mode="full-o",
        model_path=str(tiny_v3_path),
        n_estimators=2,
        device="cpu",
        inference_precision=torch.float32,
    )
    path = tmp_path_factory.mktemp("saved_fit") / "saved.tabpfn_fit"
    estimator.fit(X, y).save_fit_state(path)
    path.chmod(0o444)
    return path
