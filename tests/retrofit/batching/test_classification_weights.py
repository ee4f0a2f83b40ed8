"""Ragged ``predict_proba_batched`` with one weight vector per dataset and ``class_weight``.

Three ragged datasets of 2 or 3 classes on the embedded classifier (Full-O,
float64, 2 members), integer weights 0..3 and ``class_weight="balanced"``:
each dataset's probabilities from the padded batch are its balanced fit on
its rows really repeated (balanced counts the weights, so it stays a
frequency), within ``CLASSIFIER_PROBA_ULPS[float64]`` float32 ulps; labels
are ``predict``'s. ``class_weight`` alone weighs each dataset by its own
labels, as each dataset's ``fit`` would.
"""

from __future__ import annotations

import numpy as np
import torch

from retrofit import OTabPFNClassifier
from tests.helpers.exactness import CLASSIFIER_PROBA_ULPS, deviation_in_ulps
from tests.helpers.weighted_fits import repeat_rows

SHAPES = ((30, 5, 2), (45, 7, 3), (24, 4, 3))  # (train rows, test rows, classes)
BOUND = CLASSIFIER_PROBA_ULPS[torch.float64]


def _classifier(**kwargs) -> OTabPFNClassifier:
    params = {
        "model_path": "embedded",
        "device": "cpu",
        "inference_precision": torch.float64,
        "n_estimators": 2,
    }
    return OTabPFNClassifier(**{**params, **kwargs})


def _datasets(seed: int = 0):
    rng = np.random.default_rng(seed)
    out = []
    for n, m, k in SHAPES:
        X = rng.normal(size=(n + m, 3))
        y = np.digitize(X[:n, 0] + 0.3 * rng.normal(size=n), np.linspace(-0.6, 0.6, k - 1))
        w_N = rng.integers(0, 4, size=n).astype(np.float64)
        w_N[:2] = [0.0, 3.0]
        out.append((X[:n], y, X[n:], w_N))
    return out


def _lists(sets):
    return [s[0] for s in sets], [s[1] for s in sets], [s[2] for s in sets]


def _deviation(got, expected) -> float:
    return deviation_in_ulps(torch.as_tensor(got), torch.as_tensor(expected), dtype=torch.float32)


def test_each_datasets_weights_and_class_weights_are_its_rows_repeated():
    sets = _datasets()
    weights = [s[3] for s in sets]
    est = _classifier(class_weight="balanced")
    probas = est.predict_proba_batched(*_lists(sets), sample_weight=weights)
    labels = est.predict_batched(*_lists(sets), sample_weight=weights)
    for (X, y, X_test, w_N), proba, label in zip(sets, probas, labels, strict=True):
        repeated = _classifier(class_weight="balanced").fit(
            repeat_rows(X, w_N), repeat_rows(y, w_N)
        )
        assert _deviation(proba, repeated.predict_proba(X_test)) <= BOUND
        np.testing.assert_array_equal(label, repeated.predict(X_test))
    unweighted = _classifier().predict_proba_batched(*_lists(sets))
    assert np.abs(unweighted[1] - probas[1]).max() > 1e-3


def test_class_weight_alone_weighs_each_dataset_by_its_own_labels():
    sets = _datasets()
    probas = _classifier(class_weight="balanced").predict_proba_batched(*_lists(sets))
    for (X, y, X_test, _), proba in zip(sets, probas, strict=True):
        expected = _classifier(class_weight="balanced").fit(X, y).predict_proba(X_test)
        assert _deviation(proba, expected) <= BOUND
