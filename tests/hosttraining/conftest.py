"""Fixtures of the training-tooling tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch


@pytest.fixture(autouse=True)
def _keep_threads() -> Iterator[None]:
    """Restore torch's thread count after each test: the commands set it from ``--threads``."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)
