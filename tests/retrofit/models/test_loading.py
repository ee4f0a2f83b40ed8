"""Model loading: a directory given as a model says which file it lacks."""

from __future__ import annotations

from tests.helpers.commands import one_error_line, predict_argv, run_cli


def test_a_model_directory_without_retrofit_json_says_that_file_is_missing(
    csv_data, capsys, tmp_path
):
    """The error names the missing file, not only "is a directory, not a checkpoint"."""
    folder = tmp_path / "model"
    folder.mkdir()
    code, _, err = run_cli(predict_argv(csv_data, folder, tmp_path / "p.csv"), capsys)
    assert code == 2
    one_error_line(err, "predict")
    assert "it has no retrofit.json" in err
