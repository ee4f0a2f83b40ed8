"""``bootstrap_predict``: every replicate is the refit on its resampled rows, from one batch.

The embedded hosts (Full-O, float64, 2 members), 36 train rows: each
replicate's predictions (the regressor's mean and median, the classifier's
probabilities with ``class_weight="balanced"``) against the estimator
refitted on the rows really resampled (``np.repeat`` by the returned counts),
within ``MODEL_ULPS[float64]`` float64 ulps (regressor) and
``CLASSIFIER_PROBA_ULPS[float64]`` float32 ulps (probabilities); measured 0
to 1 ulp. Controls: the replicates differ from one another and from the fit
on all rows, so the comparison is not vacuous.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrofit
from retrofit import InvalidInputError, OTabPFNClassifier, OTabPFNRegressor
from retrofit.leave_out.bootstrap import bootstrap_counts
from tests.helpers.exactness import CLASSIFIER_PROBA_ULPS, MODEL_ULPS, deviation_in_ulps

N_ROWS = 36


def _estimator(cls=OTabPFNRegressor, **kwargs):
    params = {
        "model_path": "embedded",
        "device": "cpu",
        "inference_precision": torch.float64,
        "n_estimators": 2,
    }
    return cls(**{**params, **kwargs})


def _data():
    rng = np.random.default_rng(2)
    X = rng.normal(size=(N_ROWS, 3))
    y = X[:, 0] - np.cos(2 * X[:, 2]) + 0.1 * rng.normal(size=N_ROWS)
    return X, y, rng.normal(size=(7, 3))


@pytest.mark.parametrize("method", ["predict", "median"])
def test_each_regressor_replicate_is_the_refit_on_its_resampled_rows(method):
    X, y, X_test = _data()
    predictions, counts = retrofit.bootstrap_predict(
        _estimator(),
        X,
        y,
        X_test,
        n_replicates=4,
        random_state=0,
        method=method,
        return_counts=True,
    )
    assert predictions.shape == (4, 7) and counts.shape == (4, N_ROWS)
    output_type = "mean" if method == "predict" else method
    for r, counts_N in enumerate(counts):
        rows = np.repeat(np.arange(N_ROWS), counts_N)
        refit = _estimator().fit(X[rows], y[rows]).predict(X_test, output_type=output_type)
        deviation = deviation_in_ulps(torch.as_tensor(predictions[r]), torch.as_tensor(refit))
        assert deviation <= MODEL_ULPS[torch.float64]
    plain = _estimator().fit(X, y).predict(X_test, output_type=output_type)
    assert np.abs(predictions - plain).max(axis=1).min() > 1e-3
    assert np.abs(predictions[0] - predictions[1]).max() > 1e-3


def test_each_classifier_replicate_is_the_balanced_refit_with_every_class_as_a_column():
    X, _, X_test = _data()
    labels = np.digitize(X[:, 0], [-0.4, 0.4])
    labels[0] = 3  # a class of one row: some resamples miss it
    est = _estimator(OTabPFNClassifier, class_weight="balanced")
    probas, counts = retrofit.bootstrap_predict(
        est,
        X,
        labels,
        X_test,
        n_replicates=5,
        random_state=3,
        method="predict_proba",
        return_counts=True,
    )
    assert probas.shape == (5, 7, 4)
    missed = [r for r in range(5) if counts[r, 0] == 0]
    assert missed and len(missed) < 5
    for r, counts_N in enumerate(counts):
        rows = np.repeat(np.arange(N_ROWS), counts_N)
        refit = _estimator(OTabPFNClassifier, class_weight="balanced").fit(X[rows], labels[rows])
        expected = np.zeros((7, 4), dtype=probas.dtype)
        expected[:, refit.classes_] = refit.predict_proba(X_test)
        deviation = deviation_in_ulps(
            torch.as_tensor(probas[r]), torch.as_tensor(expected), dtype=torch.float32
        )
        assert deviation <= CLASSIFIER_PROBA_ULPS[torch.float64]
        assert (probas[r][:, 3] == 0).all() == (r in missed)
    labels_out = retrofit.bootstrap_predict(est, X, labels, X_test, n_replicates=5, random_state=3)
    np.testing.assert_array_equal(labels_out, np.argmax(probas, axis=2))
    # Logs, as cross_val_predict gives them: the log of each drawn class's
    # probability, the dtype's most negative number for a class not drawn.
    logs = retrofit.bootstrap_predict(
        est, X, labels, X_test, n_replicates=5, random_state=3, method="predict_log_proba"
    )
    assert logs.shape == probas.shape and logs.dtype == probas.dtype
    drawn = probas > 0
    np.testing.assert_array_equal(logs[drawn], np.log(probas[drawn]))
    assert (logs[~drawn] == np.finfo(logs.dtype).min).all() and (~drawn).any()


def test_the_counts_are_n_multinomial_draws_and_the_seed_repeats_them():
    counts = bootstrap_counts(50, 200, 7)
    assert counts.shape == (200, 50) and (counts.sum(axis=1) == 50).all()
    np.testing.assert_array_equal(counts, bootstrap_counts(50, 200, 7))
    # Each row is drawn Binomial(50, 1/50) times: mean 1, and absent from ~36.4 %.
    assert abs(counts.mean() - 1.0) < 1e-12
    assert 0.33 < (counts == 0).mean() < 0.40


def test_what_bootstrap_predict_refuses():
    X, y, X_test = _data()
    with pytest.raises(InvalidInputError, match="mode='none'"):
        retrofit.bootstrap_predict(
            _estimator(mode="none"), X, y, X_test, n_replicates=2, random_state=0
        )
    with pytest.raises(InvalidInputError, match="n_replicates must be >= 1"):
        retrofit.bootstrap_predict(_estimator(), X, y, X_test, n_replicates=0, random_state=0)
    with pytest.raises(InvalidInputError, match="unknown method 'predict_proba'"):
        retrofit.bootstrap_predict(
            _estimator(), X, y, X_test, n_replicates=2, random_state=0, method="predict_proba"
        )
    with pytest.raises(InvalidInputError, match="X has 36 rows and y 35"):
        retrofit.bootstrap_predict(_estimator(), X, y[:35], X_test, n_replicates=2, random_state=0)
    # The leave-out entry points' one boundary check (retrofit.validation).
    y_nan = y.copy()
    y_nan[4] = np.nan
    with pytest.raises(InvalidInputError, match="bootstrap_predict: y holds NaN or inf in row 4"):
        retrofit.bootstrap_predict(_estimator(), X, y_nan, X_test, n_replicates=2, random_state=0)
    with pytest.raises(InvalidInputError, match="bootstrap_predict: X_test has shape"):
        retrofit.bootstrap_predict(
            _estimator(), X, y, X_test[:, :2], n_replicates=2, random_state=0
        )
