"""What the one resolver (retrofit/models/loading.py) refuses, in a message that says why."""

from __future__ import annotations

import numpy as np
import pytest

from retrofit.errors import (
    CheckpointNotFoundError,
)
from retrofit.models import loading
from tests.helpers.estimators import small_regressor
from tests.helpers.tiny_models import tiny_v3_checkpoint

X = np.arange(12.0).reshape(6, 2)


def test_a_directory_without_retrofit_json_says_that_file_is_missing(tmp_path):
    """A directory given as a model names the missing retrofit.json."""
    folder = tmp_path / "weights_dir"
    folder.mkdir()
    tiny_v3_checkpoint(folder)  # a checkpoint inside does not make it a saved directory
    with pytest.raises(CheckpointNotFoundError, match=r"retrofit\.json is missing"):
        loading.resolve_model(str(folder))
    with pytest.raises(CheckpointNotFoundError, match=r"retrofit\.json"):
        small_regressor(folder).fit(X, np.arange(6.0))
