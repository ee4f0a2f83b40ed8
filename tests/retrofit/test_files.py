"""Atomic output files: a new file gets the umask's mode, a replaced one keeps its own."""

from __future__ import annotations

import os

from tests.helpers.commands import file_mode, predict_argv, run_cli


def test_predictions_get_the_umask_mode_and_keep_an_existing_files_mode(
    csv_data, model_arg, capsys, umask
):
    """Not 0600 from the temporary file."""
    out = csv_data["train"].parent / "pred.csv"
    umask(0o027)
    assert run_cli(predict_argv(csv_data, model_arg, out), capsys)[0] == 0
    assert file_mode(out) == 0o640
    os.chmod(out, 0o644)
    umask(0o077)
    assert run_cli([*predict_argv(csv_data, model_arg, out), "--force"], capsys)[0] == 0
    assert file_mode(out) == 0o644  # an overwritten file keeps its mode
