"""Ragged ``predict_batched`` with one weight vector per dataset (``sample_weight``).

Three ragged datasets on the embedded regressor (Full-O, float64, 2 members),
integer weights 0..3: each dataset's mean and quantiles from the padded batch
are its fit on its rows really repeated, within ``MODEL_ULPS[float64]`` ulps
of the predictions' scale; a dataset given None is its unweighted fit, bit for
bit beside weighted ones; and the weights reach the batch (the unweighted
batch differs). Weights always take the padded path (tabpfn's batched
methods take none), so same-shape float32 input takes it too; ``mode="none"``,
malformed weights and ``padded=False`` are refused in one line naming the
dataset or the patched modes.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from retrofit import BatchInputError, OTabPFNRegressor, UnsupportedWeightingError
from retrofit.batching.regression import predict_batched
from tests.helpers.exactness import MODEL_ULPS, deviation_in_ulps
from tests.helpers.weighted_fits import repeat_rows

SHAPES = ((30, 5), (45, 7), (24, 4))  # (train rows, test rows)
QUANTILES = [0.2, 0.8]


def _regressor(**kwargs) -> OTabPFNRegressor:
    params = {
        "model_path": "embedded",
        "device": "cpu",
        "inference_precision": torch.float64,
        "n_estimators": 2,
    }
    return OTabPFNRegressor(**{**params, **kwargs})


def _datasets(shapes=SHAPES, seed: int = 0):
    rng = np.random.default_rng(seed)
    out = []
    for n, m in shapes:
        X = rng.normal(size=(n + m, 3))
        y = X[:, 0] + np.sin(2 * X[:, 1]) + 0.1 * rng.normal(size=n + m)
        w_N = rng.integers(0, 4, size=n).astype(np.float64)
        w_N[:2] = [0.0, 3.0]
        out.append((X[:n], y[:n], X[n:], w_N))
    return out


def _lists(sets):
    return [s[0] for s in sets], [s[1] for s in sets], [s[2] for s in sets]


def _outputs(predict) -> np.ndarray:
    return np.vstack([predict("mean"), *predict("quantiles")])


@pytest.mark.parametrize("output_type", ["mean", "quantiles"])
def test_each_datasets_weights_are_its_rows_repeated(output_type):
    sets = _datasets()
    weights = [s[3] for s in sets]
    batch = _regressor().predict_batched(
        *_lists(sets), output_type=output_type, quantiles=QUANTILES, sample_weight=weights
    )
    unweighted = _regressor().predict_batched(
        *_lists(sets), output_type=output_type, quantiles=QUANTILES
    )
    for (X, y, X_test, w_N), got, plain in zip(sets, batch, unweighted, strict=True):
        repeated = _regressor().fit(repeat_rows(X, w_N), repeat_rows(y, w_N))
        expected = repeated.predict(X_test, output_type=output_type, quantiles=QUANTILES)
        got, expected = torch.as_tensor(np.asarray(got)), torch.as_tensor(np.asarray(expected))
        assert deviation_in_ulps(got, expected) <= MODEL_ULPS[torch.float64]
        assert np.abs(np.asarray(plain) - expected.numpy()).max() > 1e-3


def test_a_dataset_without_weights_is_its_plain_fit_beside_weighted_ones():
    sets = _datasets()
    weights = [None, sets[1][3], None]
    batch = predict_batched(
        _regressor().fit(sets[0][0], sets[0][1]).batched_host(),
        *_lists(sets),
        sample_weight=weights,
    )
    assert batch.padded
    for (X, y, X_test, _), w_N, got in zip(sets, weights, batch.results, strict=True):
        expected = _regressor().fit(X, y, sample_weight=w_N).predict(X_test)
        deviation = deviation_in_ulps(torch.as_tensor(got), torch.as_tensor(expected))
        assert deviation <= MODEL_ULPS[torch.float64]


def test_weights_take_the_padded_path_for_same_shape_float32_input_too():
    sets = _datasets(((30, 5), (30, 5)))
    est = _regressor(inference_precision=torch.float32)
    weights = [s[3] for s in sets]
    batch = predict_batched(est.batched_host(), *_lists(sets), sample_weight=weights)
    assert batch.padded
    X, y, X_test, w_N = sets[1]
    expected = _regressor(inference_precision=torch.float32).fit(X, y, sample_weight=w_N)
    np.testing.assert_allclose(batch.results[1], expected.predict(X_test), rtol=0, atol=1e-5)


def test_weights_are_refused_unpatched_malformed_or_off_the_padded_path():
    sets = _datasets()
    weights = [s[3] for s in sets]
    with pytest.raises(UnsupportedWeightingError, match="'full-o' or 'oattention'"):
        _regressor(mode="none").predict_batched(*_lists(sets), sample_weight=weights)
    with pytest.raises(BatchInputError, match=r"one weight vector .* per dataset"):
        _regressor().predict_batched(*_lists(sets), sample_weight=weights[:2])
    with pytest.raises(BatchInputError, match=r"dataset 1: .*negative"):
        _regressor().predict_batched(
            *_lists(sets), sample_weight=[weights[0], -weights[1], weights[2]]
        )
    with pytest.raises(BatchInputError, match=r"dataset 2: .*24 rows"):
        _regressor().predict_batched(
            *_lists(sets), sample_weight=[weights[0], weights[1], np.ones(5)]
        )
    host = _regressor().fit(sets[0][0], sets[0][1]).batched_host()
    with pytest.raises(BatchInputError, match="take no weights"):
        predict_batched(host, *_lists(sets), sample_weight=weights, padded=False)
