"""Test-session setup: offline, no login, float32, deterministic threads; shared fixtures.

No test may try a download or a login, so the session points tabpfn at a
temporary model cache and forbids the browser flow before tabpfn is imported.

Two intra-op threads, as on the 2-core machines the suite is timed on, whose
OpenMP workers sleep between parallel regions (``OMP_WAIT_POLICY=PASSIVE``,
read when torch loads its OpenMP runtime, so set before torch is imported; a
subprocess of a test inherits it). By default an idle worker spins for each
next region, and the tests' tiny tensors leave it idle most of the time: on a
loaded 2-core machine the spinning took 5x the CPU time of the work itself
(tests/retrofit/batching/test_classification.py: 80 s against 15 s). The wait
policy changes how idle threads wait, no number a test computes.
"""

from __future__ import annotations

import hashlib
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

os.environ["TABPFN_NO_BROWSER"] = "1"
os.environ.setdefault("TABPFN_DISABLE_TELEMETRY", "1")
os.environ["TABPFN_MODEL_CACHE_DIR"] = tempfile.mkdtemp(prefix="tabpfn-cache-")
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch

torch.set_num_threads(min(2, os.cpu_count() or 1))


import pytest  # noqa: E402  (after the environment above, which tabpfn reads on import)


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    """A fresh, empty tabpfn model cache for one test."""
    from tabpfn import model_loading

    cache = tmp_path / "cache"
    cache.mkdir()
    monkeypatch.setattr(model_loading, "get_cache_dir", lambda: cache)
    return cache


@pytest.fixture
def no_download(monkeypatch) -> list:
    """tabpfn's downloader replaced by one that fails like an offline machine.

    The hub counts as reachable, so a weights alias gets as far as the
    downloader; the calls it receives are returned, ``(folder, version, which)``.
    """
    from pathlib import Path

    from tabpfn import model_loading

    from retrofit.models import weights

    calls: list = []

    def fake_download(to, *, version, which, model_name=None):
        calls.append((Path(to), version, which))
        return [OSError("[Errno -3] Temporary failure in name resolution")]

    monkeypatch.setattr(model_loading, "download_model", fake_download)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(weights, "hub_reachable", lambda *args, **kwargs: True)
    return calls


@pytest.fixture
def embedded_dir(tmp_path, monkeypatch) -> Path:
    """An empty folder standing in for the embedded hosts' (no classifier shipped).

    The refusal of ``"embedded"`` for a kind without a shipped host is tested
    here, whatever this installation ships.
    """
    import retrofit.models.embedded as embedded

    folder = tmp_path / "embedded"
    folder.mkdir()
    monkeypatch.setattr(embedded, "_HERE", folder)
    return folder


@pytest.fixture(scope="session")
def tiny_v3_path(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The tiny perturbed v3 checkpoint (seed 0, ``tiny_v3.safetensors``), read-only.

    Written once per session and shared by every module that only reads it; a
    test that writes, truncates or replaces a checkpoint builds its own with
    ``tests.helpers.tiny_models.tiny_v3_checkpoint``. The file is read-only,
    and since the mode does not stop root, its SHA-256 is compared at the end
    of the session: a test that changed it fails the session there.
    """
    from tests.helpers.tiny_models import tiny_v3_checkpoint

    path = tiny_v3_checkpoint(tmp_path_factory.mktemp("tiny_v3"))
    path.chmod(stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    yield path
    assert hashlib.sha256(path.read_bytes()).hexdigest() == digest, (
        f"a test changed the shared tiny v3 checkpoint {path}"
    )


@pytest.fixture(scope="module")
def model_arg(request) -> str:
    """A command's ``--model``: ``embedded`` once the shipped host verifies, else a tiny v3 file."""
    import retrofit

    try:
        retrofit.embedded_model_path()
        return "embedded"
    except Exception:  # not shipped yet, or mid-update
        pass
    return str(request.getfixturevalue("tiny_v3_path"))


@pytest.fixture
def csv_data(tmp_path) -> dict[str, Path]:
    """``train.csv`` (30 rows) and ``test.csv`` (10 rows): features a, b, c; a linear target y."""
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 3))
    frame = pd.DataFrame(X, columns=["a", "b", "c"]).assign(y=X @ np.array([1.0, -2.0, 0.5]))
    paths = {"train": tmp_path / "train.csv", "test": tmp_path / "test.csv"}
    frame.iloc[:30].to_csv(paths["train"], index=False)
    frame.iloc[30:].to_csv(paths["test"], index=False)
    return paths


@pytest.fixture
def umask():
    """Sets the process umask for one test (the returned function) and restores it afterwards."""
    previous = os.umask(0o022)
    os.umask(previous)
    yield lambda value: os.umask(value)
    os.umask(previous)
