"""``predict_batched`` follows the estimator's current parameters and inputs.

On a tiny perturbed v3 checkpoint, float32 unless float64 is the subject:
``set_params`` after ``fit`` applies to ragged input as to same-shape input; a
caller's ``RandomState`` is left as it was; a list of patched models pads; a
float64 same-shape batch runs; targets of numeric strings are accepted, as
tabpfn accepts them; progress reports every fit, then every dataset's stages,
then the ICL forwards; every dataset's test rows are transformed before the
first stage forward (NumPy work between torch kernels leaves torch's threads
spinning).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from tabpfn.preprocessing.ensemble import TabPFNEnsembleMember

from retrofit import OTabPFNRegressor
from retrofit.batching.bounds import (
    DEFAULT_MAX_PADDED_FRACTION,
    DEFAULT_MAX_PADDED_FRACTION_BY_DEVICE,
)
from retrofit.batching.regression import predict_batched
from retrofit.errors import InvalidInputError
from retrofit.hosts.v3.icl_stage import V3ICLStage
from tests.helpers.exactness import MODEL_ULPS
from tests.helpers.padding import ragged_tables, reference_kernel
from tests.helpers.predictions import assert_same_prediction
from tests.helpers.tiny_models import (
    build_tiny_v3,
    save_tiny_checkpoint,
    tiny_inference_config,
    tiny_v3_config,
)

RAGGED = [(30, 7, 3), (50, 12, 5), (12, 3, 2)]  # (train, test, features)
SAME = [(30, 7, 3), (30, 7, 3)]
FP32_TOL = 1e-4  # relative to the target's scale: float32 rounding, far below a tau change


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    config = tiny_v3_config()
    path = tmp_path_factory.mktemp("ckpt") / "tiny_v3.safetensors"
    return save_tiny_checkpoint(
        build_tiny_v3(config), config, path, inference_config=tiny_inference_config(2)
    )


@pytest.fixture(autouse=True)
def _pad_as_on_an_accelerator(monkeypatch):
    # Datasets share padded forwards here, as on an accelerator (the CPU bound is 5 %).
    monkeypatch.setitem(DEFAULT_MAX_PADDED_FRACTION_BY_DEVICE, "cpu", DEFAULT_MAX_PADDED_FRACTION)


def _est(checkpoint: Path, **kwargs) -> OTabPFNRegressor:
    base = {
        "model_path": str(checkpoint),
        "device": "cpu",
        "inference_precision": torch.float32,
        "n_estimators": 2,
    }
    return OTabPFNRegressor(**{**base, **kwargs})


def _lists(sets):
    return [s[0] for s in sets], [s[1] for s in sets], [s[2] for s in sets]


def _alone(checkpoint: Path, sets, **kwargs) -> list[np.ndarray]:
    return [_est(checkpoint, **kwargs).fit(X, y).predict(Xt) for X, y, Xt in sets]


def _close(a: list[np.ndarray], b: list[np.ndarray]) -> bool:
    return all(
        np.abs(x - y).max() <= FP32_TOL * max(1.0, np.abs(y).max())
        for x, y in zip(a, b, strict=True)
    )


def test_set_params_tau_after_fit_applies_to_ragged_predict_batched(checkpoint):
    sets = ragged_tables(RAGGED)
    est = _est(checkpoint).fit(*sets[0][:2])
    est.set_params(tau=1000.0)
    batched = est.predict_batched(*_lists(sets))
    assert _close(batched, _alone(checkpoint, sets, tau=1000.0))
    assert not _close(batched, _alone(checkpoint, sets))  # the fitted tau would not do


def test_set_params_mode_none_after_fit_gets_tabpfns_ragged_error(checkpoint):
    sets = ragged_tables(RAGGED)
    est = _est(checkpoint).fit(*sets[0][:2])
    est.set_params(mode="none")
    with pytest.raises(ValueError, match="ragged batches are not supported"):
        est.predict_batched(*_lists(sets))


def test_ragged_predict_batched_leaves_a_callers_random_state_as_it_was(checkpoint):
    sets = ragged_tables(RAGGED)
    state = np.random.RandomState(7)
    before = state.get_state()[1].copy()
    est = _est(checkpoint, random_state=state)
    first = est.predict_batched(*_lists(sets))
    second = est.predict_batched(*_lists(sets))
    np.testing.assert_array_equal(state.get_state()[1], before)
    for a, b in zip(first, second, strict=True):
        np.testing.assert_array_equal(a, b)


def test_a_list_of_patched_models_predicts_ragged_batches(checkpoint):
    sets = ragged_tables(RAGGED)
    paths = [str(checkpoint), str(checkpoint)]
    batched = _est(checkpoint, model_path=paths).predict_batched(*_lists(sets))
    assert _close(batched, _alone(checkpoint, sets, model_path=paths))


def test_float64_same_shape_predict_batched_matches_per_dataset_predict(checkpoint):
    sets = ragged_tables(SAME)
    with reference_kernel():
        est = _est(checkpoint, inference_precision=torch.float64)
        batched = est.predict_batched(*_lists(sets))
        alone = _alone(checkpoint, sets, inference_precision=torch.float64)
    for b, a in zip(batched, alone, strict=True):
        assert_same_prediction(b, a, ulps=MODEL_ULPS[torch.float64])


def test_numeric_string_targets_are_accepted_as_tabpfn_accepts_them(checkpoint):
    sets = ragged_tables(RAGGED)
    as_text = [(X, np.array([repr(float(v)) for v in y]), Xt) for X, y, Xt in sets]
    est = _est(checkpoint)
    np.testing.assert_array_equal(
        est.fit(*as_text[0][:2]).predict(sets[0][2]), _alone(checkpoint, sets[:1])[0]
    )
    assert _close(est.predict_batched(*_lists(as_text)), _alone(checkpoint, sets))
    with pytest.raises(InvalidInputError, match="y must be numeric"):
        est.fit(sets[0][0], np.array(["a"] * len(sets[0][1])))


def test_progress_reports_every_fit_then_every_datasets_stages_then_the_icl_forwards(checkpoint):
    sets = ragged_tables(RAGGED)
    seen: list[tuple[str, int, int]] = []
    est = _est(checkpoint)
    predict_batched(est.batched_host(), *_lists(sets), progress=lambda *p: seen.append(p))
    n = len(sets)
    fits = [("fit", i, n) for i in range(1, n + 1)]
    embeds = [("embed", i, n) for i in range(1, n + 1)]
    forwards = seen[2 * n :]
    assert seen[: 2 * n] == fits + embeds
    assert forwards and [p[1] for p in forwards] == list(range(1, len(forwards) + 1))
    assert {p[0] for p in forwards} == {"icl"}


def test_every_datasets_test_rows_are_transformed_before_the_first_stage_forward(
    checkpoint, monkeypatch
):
    events: list[str] = []

    def recorded(owner, name, label):
        original = getattr(owner, name)

        def call(*args, **kwargs):
            events.append(label)
            return original(*args, **kwargs)

        monkeypatch.setattr(owner, name, call)

    recorded(TabPFNEnsembleMember, "transform_X_test", "transform")
    recorded(V3ICLStage, "embed", "stages")
    est = _est(checkpoint, n_estimators=2)
    predict_batched(est.batched_host(), *_lists(ragged_tables(RAGGED)))
    first_forward = events.index("stages")
    assert events[:first_forward] == ["transform"] * (2 * len(RAGGED))
    assert set(events[first_forward:]) == {"stages"}
