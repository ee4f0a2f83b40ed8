"""The weighted engines' runs: members sharing one weight vector run together, in order."""

from __future__ import annotations

import types

import numpy as np
import pytest

from retrofit.weighted_fit.engines import member_weight_runs, weighted_inference_engine


def _member(weights):
    return types.SimpleNamespace(row_weights=None if weights is None else np.asarray(weights))


def test_members_with_one_weight_vector_form_one_run_in_member_order():
    shared = np.array([1.0, 2.0, 3.0])
    members = [_member(shared), _member(shared.copy()), _member([1.0, 1.0, 1.0]), _member(None)]
    runs = member_weight_runs(members)
    assert [positions for positions, _ in runs] == [[0, 1], [2, 3]]
    np.testing.assert_array_equal(runs[0][1], shared)
    assert runs[1][1] is None  # weights all 1 run as tabpfn runs them


def test_members_of_other_rows_run_apart():
    members = [_member([1.0, 2.0]), _member([2.0, 1.0]), _member([1.0, 2.0]), _member([3.0])]
    assert [positions for positions, _ in member_weight_runs(members)] == [[0, 2], [1], [3]]


def test_the_fine_tuning_mode_has_no_weighted_engine():
    with pytest.raises(ValueError, match="fit_mode='batched'"):
        weighted_inference_engine(
            fit_mode="batched",
            X_train=None,
            y_train=None,
            ensemble_preprocessor=None,
            models=[],
            devices_=[],
            byte_size=4,
            forced_inference_dtype_=None,
            memory_saving_mode="auto",
            use_autocast_=False,
            task_type="regression",
        )
