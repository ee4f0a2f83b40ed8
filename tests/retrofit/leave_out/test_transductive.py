"""``cross_val_predict(preprocessing="transductive")``: the X side fitted once, the y side per fold.

The claims, each a test here (tiny random hosts, zero-inits perturbed; the
inference config ``ROW_DEPENDENT`` of ``tests/helpers/leave_out.py``, whose
feature pipelines and target transform depend on the rows they are fitted on,
since the tiny hosts' own transforms nothing):

* the oracle: tabpfn's own unbatched ``predict`` of a fold fitted by tabpfn
  whose X side is replaced by a fit on all rows
  (``tests.helpers.leave_out.transductive_oracle``), for the v3 and v2.6
  regressors and the v2 and v3 classifiers, both patched modes, float32 and
  float64, ``KFold`` and ``LeaveOneOut``, ``predict``, ``predict_proba`` and
  the regressor's single-value output types. The bound, stated once:
  ``MODEL_ULPS`` of ``exactness.py`` for regression outputs (the ulps of the
  inference dtype at the outputs' scale), ``CLASSIFIER_PROBA_ULPS`` for
  probabilities, labels equal (README's room runs a cross-section of each
  host x mode x dtype matrix, the slow tier the rest: ``tests/helpers/tiers.py``);
* leakage, in both preprocessing modes: changing one held-out label leaves
  every prediction of its fold bit-identical, and changing one of its train
  labels moves them (the control);
* transductive differs from ``per_fold`` where the X transform depends on the
  rows (``ROW_DEPENDENT``) and agrees with it, within the bound, where it does
  not (the tiny hosts' own config);
* the feature pipelines are fitted once, not once per fold;
* a fold whose train targets are constant is answered without the model, as
  its refit is, and a class a fold's train rows lack gets probability 0;
* refused in one line naming ``preprocessing="per_fold"``: X steps that read
  labels (row subsampling, importance-chosen features) and a ``random_state``
  that is not an integer.
"""

from __future__ import annotations

from itertools import product

import numpy as np
import pytest
import torch
from sklearn.model_selection import KFold, LeaveOneOut
from tabpfn.preprocessing.ensemble import TabPFNEnsemblePreprocessor

from retrofit.errors import InputWarning, InvalidInputError
from retrofit.leave_out.cross_val import cross_val_predict
from tests.helpers.leave_out import (
    CLASSIFIER_HOSTS,
    DTYPES,
    MODES,
    REGRESSION_HOSTS,
    ROW_DEPENDENT,
    assert_probabilities_close,
    assert_regression_close,
    fold_classifier,
    fold_regressor,
    leave_out_table,
    transductive_oracle,
)
from tests.helpers.tiers import cross_section


def _regressor(host, mode="full-o", dtype=torch.float32, **kwargs):
    return fold_regressor(host, mode, dtype, inference_config=ROW_DEPENDENT, **kwargs)


def _classifier(name="tabpfn_v3", mode="full-o", dtype=torch.float32, **kwargs):
    return fold_classifier(name, mode, dtype, inference_config=ROW_DEPENDENT, **kwargs)


@pytest.mark.parametrize(
    ("regression_host", "mode", "dtype"),
    cross_section(
        product(REGRESSION_HOSTS, MODES, DTYPES),
        fast=[("v3", "oattention", torch.float32), ("tabpfn_v2_6", "full-o", torch.float64)],
    ),
    indirect=["regression_host"],
)
def test_a_regressors_predictions_equal_tabpfns_fold_fits_over_the_all_rows_x_side(
    regression_host, mode, dtype
):
    X, y, _ = leave_out_table()
    estimator = _regressor(regression_host, mode, dtype)
    for rows, cv in ((slice(None), KFold(4)), (slice(8), LeaveOneOut())):
        got = cross_val_predict(estimator, X[rows], y[rows], cv=cv)
        want = transductive_oracle(estimator, X[rows], y[rows], list(cv.split(X[rows])))
        assert_regression_close(got, want, dtype)
    assert not hasattr(estimator, "n_features_in_")  # left unfitted


@pytest.mark.parametrize("method", ["median", "mode"])
def test_a_regressor_output_type_equals_the_oracles_with_that_output_type(tiny_v3_path, method):
    X, y, _ = leave_out_table()
    estimator = _regressor(tiny_v3_path, dtype=torch.float64)
    folds = list(KFold(4).split(X))
    got = cross_val_predict(estimator, X, y, cv=KFold(4), method=method)
    assert_regression_close(got, transductive_oracle(estimator, X, y, folds, method), torch.float64)


@pytest.mark.parametrize(
    ("name", "mode", "dtype"),
    cross_section(
        product(CLASSIFIER_HOSTS, MODES, DTYPES),
        fast=[("tabpfn_v3", "full-o", torch.float32), ("tabpfn_v2", "oattention", torch.float64)],
    ),
)
def test_a_classifiers_probabilities_and_labels_equal_the_oracles(name, mode, dtype):
    X, _, labels = leave_out_table()
    estimator = _classifier(name, mode, dtype)
    folds = list(KFold(4).split(X))
    got = cross_val_predict(estimator, X, labels, cv=KFold(4), method="predict_proba")
    want = transductive_oracle(estimator, X, labels, folds, "predict_proba")
    assert got.shape == (len(X), 3)
    assert_probabilities_close(got, want, dtype)
    loo = list(LeaveOneOut().split(X[:9]))
    got = cross_val_predict(estimator, X[:9], labels[:9], cv=LeaveOneOut())
    np.testing.assert_array_equal(got, transductive_oracle(estimator, X[:9], labels[:9], loo))


def _changed(values: np.ndarray, row: int, classify: bool) -> np.ndarray:
    values = values.copy()
    values[row] = (values[row] + 1) % 3 if classify else values[row] + 3.0
    return values


@pytest.mark.parametrize("preprocessing", ["transductive", "per_fold"])
@pytest.mark.parametrize("task", ["regression", "classification"])
def test_a_held_out_label_touches_nothing_that_predicts_it(tiny_v3_path, task, preprocessing):
    X, y, labels = leave_out_table()
    train, test = next(KFold(4).split(X))
    classify = task == "classification"
    estimator = _classifier() if classify else _regressor(tiny_v3_path)
    target = labels if classify else y
    method = "predict_proba" if classify else "predict"

    def oof(values):
        return cross_val_predict(
            estimator, X, values, cv=KFold(4), method=method, preprocessing=preprocessing
        )

    before = oof(target)
    held_out = oof(_changed(target, test[0], classify))
    assert np.array_equal(held_out[test], before[test])  # bit-identical: its own fold
    assert not np.array_equal(held_out[train], before[train])  # the other folds see it
    trained = oof(_changed(target, train[0], classify))
    assert not np.array_equal(trained[test], before[test])  # the control: a train label moves them


def test_transductive_differs_from_per_fold_only_where_the_x_transform_depends_on_the_rows(
    tiny_v3_path,
):
    X, y, _ = leave_out_table()
    row_dependent = _regressor(tiny_v3_path)
    transductive = cross_val_predict(row_dependent, X, y, cv=KFold(4))
    per_fold = cross_val_predict(row_dependent, X, y, cv=KFold(4), preprocessing="per_fold")
    assert np.abs(transductive - per_fold).max() > 1e-3
    row_independent = fold_regressor(tiny_v3_path)  # the tiny host's config: no X transform
    transductive = cross_val_predict(row_independent, X, y, cv=KFold(4))
    per_fold = cross_val_predict(row_independent, X, y, cv=KFold(4), preprocessing="per_fold")
    assert_regression_close(transductive, per_fold, torch.float32)


@pytest.mark.parametrize(("preprocessing", "fits"), [("transductive", 1), ("per_fold", 4)])
def test_the_feature_pipelines_are_fitted_once_not_once_per_fold(
    tiny_v3_path, monkeypatch, preprocessing, fits
):
    X, y, _ = leave_out_table()
    calls = []
    fit_transform = TabPFNEnsemblePreprocessor.fit_transform_ensemble_members

    def spy(self, *args, **kwargs):
        calls.append(1)
        return fit_transform(self, *args, **kwargs)

    monkeypatch.setattr(TabPFNEnsemblePreprocessor, "fit_transform_ensemble_members", spy)
    cross_val_predict(_regressor(tiny_v3_path), X, y, cv=KFold(4), preprocessing=preprocessing)
    assert len(calls) == fits


def test_a_fold_with_a_constant_target_or_a_missing_class_is_answered_as_its_refit(
    tiny_v3_path,
):
    X, y, labels = leave_out_table()
    constant = y.copy()
    constant[6:] = 1.0  # fold 0's train rows: tabpfn answers them without the model
    got = cross_val_predict(_regressor(tiny_v3_path), X, constant, cv=KFold(4))
    np.testing.assert_array_equal(got[:6], np.ones(6))
    labels = labels.copy()
    labels[:2] = 3  # a fourth class only in fold 0's held-out rows
    with pytest.warns(InputWarning, match="fold 0's train rows hold no row of class 3"):
        proba = cross_val_predict(_classifier(), X, labels, cv=KFold(4), method="predict_proba")
    assert proba.shape == (len(X), 4)
    assert (proba[:6, 3] == 0).all() and (proba[6:, 3] > 0).all()


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"random_state": None}, r"random_state=None is not an integer"),
        ({"random_state": np.random.RandomState(0)}, r"random_state=RandomState.* not an integer"),
        ({"inference_config": {"SUBSAMPLE_SAMPLES": 10}}, "SUBSAMPLE_SAMPLES"),
        (
            {"inference_config": {"FEATURE_SUBSAMPLING_METHOD": "gini_feature_importance"}},
            "FEATURE_SUBSAMPLING_METHOD='gini_feature_importance'",
        ),
        (
            {"inference_config": {"FEATURE_SUBSAMPLING_METHOD": "auto"}},
            "FEATURE_SUBSAMPLING_METHOD='auto'",
        ),
    ],
)
def test_label_reading_x_steps_and_a_non_integer_seed_are_refused_naming_per_fold(
    tiny_v3_path, kwargs, match
):
    X, y, _ = leave_out_table()
    estimator = fold_regressor(tiny_v3_path, **kwargs)
    with pytest.raises(InvalidInputError, match=match) as err:
        cross_val_predict(estimator, X, y, cv=KFold(4))
    assert "\n" not in str(err.value) and 'preprocessing="per_fold"' in str(err.value)
