"""Row weights through the padded engine (retrofit/batching/engine.py ``run_padded``).

Ragged datasets with one integer weight vector each (or one per ensemble
member) give each member the logits of its dataset with every train row
repeated that many times: tiny float64 classifiers of both decoder kinds (v2's
per row, v3's many-class decoder over the weighted train rows), whose tiny
inference config fits no row statistic in its preprocessing (so tabpfn's own
fit of the repeated rows and of the weighted ones agree). Within
``MODEL_ULPS[float64]`` ulps of the logits' scale.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tabpfn import TabPFNClassifier

import retrofit
from retrofit.batching.engine import run_padded
from retrofit.batching.padding import DEFAULT_MAX_ROWS_PER_FORWARD
from retrofit.errors import BatchInputError
from tests.helpers.exactness import MODEL_ULPS, deviation_in_ulps
from tests.helpers.tiny_hosts import tiny_classifier_specs

# (train rows, test rows, features, classes)
RAGGED = [(12, 4, 3, 3), (20, 5, 3, 2), (8, 3, 3, 3)]
MEMBERS = 2


def _classifier(name: str) -> TabPFNClassifier:
    specs = tiny_classifier_specs(name, n_estimators=MEMBERS)
    retrofit.patch(specs.model, "full-o")
    return TabPFNClassifier(
        model_path=specs, device="cpu", inference_precision=torch.float64, n_estimators=MEMBERS
    )


def _datasets(seed: int = 0):
    rng = np.random.default_rng(seed)
    out = []
    for n, m, c, k in RAGGED:
        X = rng.normal(size=(n + m, c))
        y = rng.integers(0, k, size=n)
        y[:k] = np.arange(k)
        w = rng.integers(0, 4, size=n).astype(float)
        w[:k] = 1.0  # every class keeps its row
        w[k] = 2.0
        out.append((X[:n], y, X[n:], w))
    return out


def _run(classifier, sets, weights=None):
    return run_padded(
        classifier,
        [s[0] for s in sets],
        [s[1] for s in sets],
        [s[2] for s in sets],
        0.5,
        DEFAULT_MAX_ROWS_PER_FORWARD,
        None,
        None,
        weights=weights,
    )


def _repeated(X, y, Xt, w):
    rows = np.repeat(np.arange(len(y)), w.astype(int))
    return X[rows], y[rows], Xt, None


@pytest.mark.parametrize("per_member", [False, True], ids=["per-dataset", "per-member"])
@pytest.mark.parametrize("name", ["tabpfn_v2", "tabpfn_v3"])
def test_each_dataset_s_weights_are_its_rows_repeated(name, per_member):
    sets = _datasets()
    weights = [np.tile(w, (MEMBERS, 1)) if per_member else w for *_, w in sets]
    weighted = _run(_classifier(name), sets, weights)
    repeated = _run(_classifier(name), [_repeated(*s) for s in sets])
    assert any(len(bucket) > 1 for bucket in weighted.buckets)
    for i in range(len(sets)):
        for out, ref in zip(weighted.outputs[i], repeated.outputs[i], strict=True):
            scale = ref.abs().max().item()
            assert deviation_in_ulps(out, ref, scale=scale) <= MODEL_ULPS[torch.float64]
    unweighted = _run(_classifier(name), sets)
    assert not torch.equal(weighted.outputs[0][0], unweighted.outputs[0][0])


def test_weights_that_do_not_fit_are_refused_naming_the_dataset():
    sets = _datasets()
    weights = [w for *_, w in sets]
    with pytest.raises(BatchInputError, match="2 weight vectors for 3 datasets"):
        _run(_classifier("tabpfn_v3"), sets, weights[:2])
    with pytest.raises(BatchInputError, match=r"dataset 1: .*one row per ensemble member"):
        _run(_classifier("tabpfn_v3"), sets, [weights[0], np.ones((3, 20)), weights[2]])
    with pytest.raises(BatchInputError, match=r"dataset 2: .*does not fit"):
        _run(_classifier("tabpfn_v3"), sets, [weights[0], weights[1], np.ones(5)])
