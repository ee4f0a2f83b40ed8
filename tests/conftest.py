"""Test-session setup: offline, no login, float32, deterministic threads.

No test may try a download or a login, so the session points tabpfn at a
temporary model cache and forbids the browser flow before tabpfn is imported.
"""

from __future__ import annotations

import os
import tempfile

os.environ["TABPFN_NO_BROWSER"] = "1"
os.environ.setdefault("TABPFN_DISABLE_TELEMETRY", "1")
os.environ["TABPFN_MODEL_CACHE_DIR"] = tempfile.mkdtemp(prefix="tabpfn-cache-")
os.environ["HF_HUB_OFFLINE"] = "1"

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
