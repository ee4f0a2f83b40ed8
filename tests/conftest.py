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
