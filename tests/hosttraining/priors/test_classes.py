"""The class prior: labels from regression tasks, class counts, linear tasks ."""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from hosttraining.priors.classes import (
    CLASS_PRIOR_V2,
    IGNORE,
    ClassPriorConfig,
    linear_task,
    sample_class_batch,
    to_classes,
)
from hosttraining.priors.regression import PriorConfig

SMALL = ClassPriorConfig(regression=PriorConfig(max_rows=120, small_max_rows=80, version=2))


def test_context_labels_are_every_code_below_k_and_unseen_query_classes_are_ignored() -> None:
    for i in range(6):
        batch = sample_class_batch(np.random.default_rng([7, i]), SMALL)
        for b, k in enumerate(batch.n_classes_B):
            train = batch.y_train_NB[:, b].long()
            assert sorted(set(train.tolist())) == list(range(k))
            test = batch.y_test_TB[:, b]
            assert test.dtype == torch.int64 and int(test.min()) >= IGNORE
            assert int(test.max()) < k
    again = sample_class_batch(np.random.default_rng([7, 5]), SMALL)
    assert torch.equal(again.y_test_TB, batch.y_test_TB)  # a batch depends on its seed only


def test_class_counts_span_two_to_ten_with_a_third_binary_and_imbalance() -> None:
    rng = np.random.default_rng(0)
    y_N = rng.normal(size=400)
    ks, smallest = [], []
    for _ in range(300):
        labels, k = to_classes(rng, y_N, 300, ClassPriorConfig(p_label_noise=0.0))
        ks.append(k)
        smallest.append(np.bincount(labels[labels != IGNORE]).min() / 400)
    assert min(ks) >= 1 and max(ks) == 10
    assert 0.25 < np.mean(np.array(ks) == 2) < 0.45
    assert np.mean(np.array(smallest) < 0.05) > 0.2  # imbalanced tasks are common


def test_version_2_mixes_wide_linear_batches_within_the_cell_bound() -> None:
    cfg = dataclasses.replace(CLASS_PRIOR_V2, regression=SMALL.regression)
    widths, linear = [], 0
    for i in range(60):
        batch = sample_class_batch(np.random.default_rng([8, i]), cfg)
        rows, _, d = batch.x_RBC.shape
        widths.append(d)
        linear += d > SMALL.regression.max_features
        assert rows * d <= max(cfg.linear_max_cells, 16 * d)
        for b, k in enumerate(batch.n_classes_B):
            assert sorted(set(batch.y_train_NB[:, b].long().tolist())) == list(range(k))
        assert torch.isfinite(batch.x_RBC).all()
    assert max(widths) > 40 and linear > 5  # wide tables are drawn, and often
    # Version 1 (p_linear = 0) never draws a linear batch.
    for i in range(30):
        old = sample_class_batch(np.random.default_rng([8, i]), SMALL)
        assert old.x_RBC.shape[2] <= SMALL.regression.max_features


def test_linear_tasks_carry_signal_a_linear_model_finds() -> None:
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    gains = []
    for i in range(12):
        rng = np.random.default_rng([9, i])
        x_ND, labels_N, k = linear_task(rng, 600, 12, 450, ClassPriorConfig(p_label_noise=0.0))
        assert x_ND.shape == (600, 12) and k >= 1
        keep = labels_N[450:] != IGNORE
        if k < 2:
            continue
        model = make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000))
        model.fit(x_ND[:450], labels_N[:450])
        majority = np.mean(labels_N[450:][keep] == np.bincount(labels_N[:450]).argmax())
        gains.append(model.score(x_ND[450:][keep], labels_N[450:][keep]) - majority)
    # Separations range from hard to easy: on most tasks a linear model beats the majority.
    assert np.mean(np.array(gains) > 0.05) > 0.6
