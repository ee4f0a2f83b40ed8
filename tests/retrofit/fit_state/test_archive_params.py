"""Constructor parameters JSON would change: a dict keyed by labels keeps its keys' types.

JSON's object keys are text, so a ``class_weight`` of integer labels written as a
plain JSON object would load as ``{"0": 3.0}``, a class no row has. The fit state
stores such a dict as its ``[key, value]`` pairs (retrofit/fit_state/archive.py).
Round trips on a tiny random v3 classifier checkpoint, float32: the loaded
estimator has the same ``class_weight`` (keys of the same type) and predicts the
same bits, and the class weights change the predictions (the control), so the
comparison is not vacuous.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

from retrofit import FitStateError, OTabPFNClassifier
from retrofit.fit_state.archive import MANIFEST_NAME, FitRecord, read_fit_state, write_fit_state
from tests.helpers.tiny_models import tiny_v3_classifier_checkpoint


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    return tiny_v3_classifier_checkpoint(tmp_path_factory.mktemp("class_weight_host"))


def _classifier(checkpoint: Path, **kwargs) -> OTabPFNClassifier:
    return OTabPFNClassifier(
        model_path=str(checkpoint),
        n_estimators=2,
        device="cpu",
        inference_precision=torch.float32,
        **kwargs,
    )


def _data(n: int = 40):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(n, 3))
    return X, (X[:, 0] > 0).astype(int) + (X[:, 1] > 1), rng.normal(size=(9, 3))


def _typed(mapping: dict) -> list[tuple[type, object, object]]:
    """A dict's items with each key's type: 1, True and 1.0 are equal keys in Python."""
    return [(type(key), key, value) for key, value in mapping.items()]


@pytest.mark.parametrize(
    ("labels", "class_weight"),
    [
        ("int", {0: 3.0, 1: 0.5, 2: 1.0}),
        ("numpy-int", {np.int64(0): 3.0, np.int64(2): 0.25}),
        ("float", {0.0: 3.0, 1.0: 0.5}),
        ("bool", {False: 3.0, True: 0.5}),
        ("str", {"a": 3.0, "b": 0.5}),
    ],
)
def test_a_class_weight_dict_round_trips_with_its_keys_types(
    checkpoint, tmp_path, labels, class_weight
):
    X, y_int, X_test = _data()
    y = {
        "int": y_int,
        "numpy-int": y_int,
        "float": (y_int > 0).astype(np.float64),
        "bool": y_int > 0,
        "str": np.array(["a", "b", "c"])[y_int],
    }[labels]
    estimator = _classifier(checkpoint, class_weight=class_weight).fit(X, y)
    path = tmp_path / "fit.tabpfn_fit"
    estimator.save_fit_state(path)
    loaded = OTabPFNClassifier.load_from_fit_state(path, device="cpu")
    # numpy scalars come back as the Python numbers they equal
    expected = {getattr(k, "item", lambda k=k: k)(): v for k, v in class_weight.items()}
    assert _typed(loaded.class_weight) == _typed(expected)
    assert loaded.predict_proba(X_test).tobytes() == estimator.predict_proba(X_test).tobytes()
    unweighted = _classifier(checkpoint).fit(X, y).predict_proba(X_test)
    assert np.abs(loaded.predict_proba(X_test) - unweighted).max() > 1e-4


def _write(path: Path, params: dict) -> None:
    X, y, _ = _data()
    write_fit_state(
        path,
        estimator="OTabPFNClassifier",
        record=FitRecord.of(X, y, {"random_state": 0, "model_path": "embedded", **params}),
        settings={},
        report_digests=[],
        weights=[],
    )


@pytest.mark.parametrize(
    "class_weight",
    [
        {0: 3.0, "0": 1.0, True: 0.5},  # keys equal as text, apart as types
        {"dict.items": 2.0},  # text keys that spell a tag are stored as pairs too
        {"torch.dtype": 2.0},
    ],
)
def test_typed_pairs_read_back_as_the_dict_they_were(tmp_path, class_weight):
    path = tmp_path / "fit.tabpfn_fit"
    _write(path, {"class_weight": class_weight})
    saved = read_fit_state(path, estimator="OTabPFNClassifier", which="classifier")
    assert _typed(saved.params["class_weight"]) == _typed(class_weight)


def test_a_dict_keyed_by_text_is_stored_as_a_json_object_and_labels_as_pairs(tmp_path):
    path = tmp_path / "fit.tabpfn_fit"
    _write(path, {"class_weight": {0: 3.0, 2: 0.5}, "inference_config": {"A": 1}})
    with zipfile.ZipFile(path) as archive:
        params = json.loads(archive.read(MANIFEST_NAME))["params"]
    assert params["class_weight"] == {"dict.items": [[0, 3.0], [2, 0.5]]}
    assert params["inference_config"] == {"A": 1}


@pytest.mark.parametrize(
    ("class_weight", "why"),
    [
        ({(0, 1): 2.0}, "a key (0, 1) of type tuple"),
        ({None: 2.0}, "a key None of type NoneType"),
        ({float("nan"): 2.0}, "Out of range float values"),
    ],
)
def test_a_key_that_has_no_data_form_is_refused_by_name_before_writing(tmp_path, class_weight, why):
    path = tmp_path / "fit.tabpfn_fit"
    with pytest.raises(FitStateError, match=r"parameter class_weight=.*has no JSON form") as err:
        _write(path, {"class_weight": class_weight})
    assert why in str(err.value) and "\n" not in str(err.value)
    assert not path.exists()
