"""A fit state is refused from its zip directory when its members would inflate past the bound.

The bomb of issue 48: a real fit state whose ``X.npy`` is replaced by 1.2 GB of
zeros deflated into 1.2 MB. It must be refused before any member is opened
(every ``ZipFile.open`` is recorded). A Parquet member whose footer declares
more cells than its size allows is refused before its pages are decoded, and
a member compressed by a method the writer never uses is refused unread. The
writer keeps its own files inside the bound: with the bound lowered, the
members that would cross it are stored uncompressed and the file loads.
"""

from __future__ import annotations

import io
import json
import zipfile

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from retrofit import FitStateError, OTabPFNRegressor
from retrofit.fit_state import bounds
from retrofit.fit_state.archive import MANIFEST_NAME
from tests.helpers.fit_states import deflated_entry, deflated_zeros, rewrite, write_zip
from tests.helpers.regression_tasks import linear_task


@pytest.fixture
def opened(monkeypatch) -> list[str]:
    """The name of every zip member opened for reading (``ZipFile.read`` opens too)."""
    names: list[str] = []
    real_open = zipfile.ZipFile.open

    def recording_open(self, name, mode="r", *args, **kwargs):
        if mode == "r":
            names.append(getattr(name, "filename", name))
        return real_open(self, name, mode, *args, **kwargs)

    monkeypatch.setattr(zipfile.ZipFile, "open", recording_open)
    return names


def test_a_small_archive_whose_x_inflates_to_a_gigabyte_is_refused_unopened(
    saved_fit, tmp_path, opened
):
    rows = 1200 * 2**20 // 24  # 1.2 GB of float64 in 3 columns
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        header, {"descr": "<f8", "fortran_order": False, "shape": (rows, 3)}
    )
    with zipfile.ZipFile(saved_fit) as archive:
        kept = [deflated_entry(n, archive.read(n)) for n in (MANIFEST_NAME, "y.npy")]
    bomb = write_zip(
        tmp_path / "bomb.tabpfn_fit",
        [*kept, deflated_zeros("X.npy", header.getvalue(), n_mib=1200)],
    )
    assert bomb.stat().st_size < 1.5e6
    opened.clear()
    with pytest.raises(FitStateError, match=r"bomb\.tabpfn_fit: its members \(X\.npy 1,258,"):
        OTabPFNRegressor.load_from_fit_state(bomb, device="cpu")
    assert opened == []


def test_a_parquet_member_of_more_cells_than_its_size_allows_is_refused_undecoded(tmp_path):
    X, y = linear_task(40, 3)
    estimator = OTabPFNRegressor(
        model_path="embedded", n_estimators=1, device="cpu", inference_precision=torch.float32
    )
    path = tmp_path / "frame.tabpfn_fit"
    estimator.fit(pd.DataFrame(X, columns=["a", "b", "c"]), y).save_fit_state(path)
    # 20 million rows of one value: a dictionary and run lengths, a few kB on disk.
    indices = pa.array(np.zeros(20_000_000, dtype=np.int8))
    column = pa.DictionaryArray.from_arrays(indices, pa.array([0.5]))
    buffer = io.BytesIO()
    pq.write_table(pa.table({"a": column}), buffer)
    assert len(buffer.getvalue()) < 100_000
    target = rewrite(
        path, tmp_path / "cells.tabpfn_fit", replace={"X.parquet": buffer.getvalue()}, forge=True
    )
    with pytest.raises(
        FitStateError, match=r"cells\.tabpfn_fit: X\.parquet \(20,000,000 rows x 1\) would inflate"
    ):
        OTabPFNRegressor.load_from_fit_state(target, device="cpu")


def test_a_member_compressed_by_another_method_is_refused_unread(saved_fit, tmp_path, opened):
    target = rewrite(
        saved_fit, tmp_path / "bzip.tabpfn_fit", methods={"X.npy": zipfile.ZIP_BZIP2}, forge=True
    )
    opened.clear()
    with pytest.raises(FitStateError, match=r"bzip\.tabpfn_fit: X\.npy is .*zip method 12"):
        OTabPFNRegressor.load_from_fit_state(target, device="cpu")
    assert opened == []


def test_the_writer_stores_uncompressed_what_would_cross_the_bound(
    tiny_v3_path, tmp_path, monkeypatch
):
    """With the bound lowered to a ratio of 2 over 1 kB, the sparse X goes in stored."""
    monkeypatch.setattr(bounds, "FLOOR_BYTES", 1024)
    monkeypatch.setattr(bounds, "MAX_RATIO", 2)
    rng = np.random.default_rng(0)
    X = np.zeros((200, 6))
    X[np.arange(200), rng.integers(0, 6, 200)] = 1.0  # one-hot: compresses far past 2:1
    y = X @ np.arange(6.0) + 0.1 * rng.normal(size=200)
    estimator = OTabPFNRegressor(
        model_path=str(tiny_v3_path),
        n_estimators=1,
        device="cpu",
        inference_precision=torch.float32,
    )
    path = tmp_path / "sparse.tabpfn_fit"
    estimator.fit(X, y).save_fit_state(path)
    with zipfile.ZipFile(path) as archive:
        methods = {info.filename: info.compress_type for info in archive.infolist()}
        declared = sum(info.file_size for info in archive.infolist())
    assert methods["X.npy"] == zipfile.ZIP_STORED
    assert declared <= max(1024, 2 * path.stat().st_size)
    loaded = OTabPFNRegressor.load_from_fit_state(path, device="cpu")
    np.testing.assert_array_equal(loaded.predict(X[:5]), estimator.predict(X[:5]))


def test_a_real_fit_state_stays_compressed_far_inside_the_bound(saved_fit):
    with zipfile.ZipFile(saved_fit) as archive:
        infos = archive.infolist()
        manifest = json.loads(archive.read(MANIFEST_NAME))
    assert {info.compress_type for info in infos} == {zipfile.ZIP_DEFLATED}
    assert sum(info.file_size for info in infos) < bounds.FLOOR_BYTES
    assert manifest["X"]["member"] == "X.npy"
