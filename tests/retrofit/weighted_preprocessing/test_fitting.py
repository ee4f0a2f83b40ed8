"""The weights of the fit in progress: per thread, checked against the rows, gone after."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from retrofit.errors import UnsupportedWeightingError
from retrofit.weighted_preprocessing.fitting import (
    fit_weights,
    fitting_with,
    weight_total,
    weighted_count,
)


def test_the_weights_hold_within_the_block_only():
    assert fit_weights(3, "x") is None
    with fitting_with(np.array([1.0, 2.0, 3.0])):
        assert fit_weights(3, "x").tolist() == [1.0, 2.0, 3.0]
        assert weighted_count(3, "x") == 6
    assert fit_weights(3, "x") is None
    assert weighted_count(3, "x") == 3


def test_unit_weights_fit_as_unweighted():
    with fitting_with(np.ones(4)):
        assert fit_weights(4, "x") is None
        assert weighted_count(4, "x") == 4


def test_a_fit_on_other_rows_is_refused_naming_it():
    with (
        fitting_with(np.full(3, 2.0)),
        pytest.raises(UnsupportedWeightingError, match="the scaler"),
    ):
        fit_weights(5, "the scaler")


def test_threads_fitting_members_in_parallel_each_see_their_own_weights():
    seen: dict[int, float] = {}
    barrier = threading.Barrier(2)

    def member(index: int) -> None:
        with fitting_with(np.full(2, float(index + 2))):
            barrier.wait()  # both blocks are open at once
            seen[index] = float(fit_weights(2, "x")[0])

    threads = [threading.Thread(target=member, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == {0: 2.0, 1: 3.0}


def test_the_count_of_real_weights_is_their_rounded_sum_and_at_least_one():
    assert weight_total(np.array([0.4, 0.7])) == 1
    assert weight_total(np.array([0.2, 0.1])) == 1
    assert weight_total(np.array([2.5, 2.6])) == 5
