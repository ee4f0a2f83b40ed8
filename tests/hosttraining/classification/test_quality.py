"""The classifier host's quality suites: held-out seed keys, a dev suite apart from offline_cls6."""

from __future__ import annotations

import numpy as np

from hosttraining.classification import quality as class_quality
from hosttraining.common.in_prior import HELDOUT_KEY


def test_held_out_class_tasks_use_seed_keys_no_training_run_reaches() -> None:
    first = class_quality.heldout_class_tasks(2)
    assert [t[2] for t in first] == [t[2] for t in class_quality.heldout_class_tasks(2)]
    assert HELDOUT_KEY > 2**30  # training seeds are small integers


def test_the_dev_suite_shares_no_dataset_with_offline_cls6() -> None:
    from eval.paper.datasets import OFFLINE_CLS6_DATASETS, load_dataset

    evaluation = {load_dataset(name).shape for name in OFFLINE_CLS6_DATASETS}
    for name in class_quality.DEV_DATASETS:
        X, y = class_quality.load_dev_dataset(name)
        assert X.shape not in evaluation and name not in OFFLINE_CLS6_DATASETS
        assert 2 <= len(np.unique(y)) <= 10


def test_an_inference_config_reaches_the_host_and_only_the_host(tmp_path, monkeypatch) -> None:
    from tests.helpers.tiny_models import tiny_v3_classifier_checkpoint

    checkpoint = tiny_v3_classifier_checkpoint(tmp_path)
    monkeypatch.setattr(class_quality, "DEV_DATASETS", ("iris",))
    monkeypatch.setattr(class_quality, "WIDE_DEV_DATASETS", ("iris",))
    one, two = (
        class_quality.compare_cases(
            checkpoint, "dev", seeds=(0,), inference_config={"N_ESTIMATORS": n}
        )
        for n in (1, 2)
    )
    assert one["cases"] == two["cases"] == 1
    assert one["host"] != two["host"]
    assert one["logreg"] == two["logreg"] and one["rf"] == two["rf"]
