"""The ``patch`` command's checks: its ``--out`` is never the ``--model`` file, and a bad
``--out`` fails before the (possibly downloading) model resolution.
"""

from __future__ import annotations

import shutil

from tests.helpers.commands import listing, one_error_line, run_cli


def test_patch_out_equal_to_the_model_file_is_refused(tiny_v3_path, capsys, tmp_path):
    """``--force`` must not replace the source weights."""
    source = tmp_path / "src.safetensors"
    shutil.copyfile(tiny_v3_path, source)
    original = source.read_bytes()
    code, _, err = run_cli(
        ["patch", "--model", source, "--out", source, "--force", "--quiet"], capsys
    )
    assert code == 2
    one_error_line(err, "patch")
    assert "is the --model file" in err
    assert source.read_bytes() == original and listing(tmp_path) == ["src.safetensors"]


def test_a_patch_out_under_a_file_fails_before_loading_the_model(capsys, monkeypatch, tmp_path):
    """Checked before the (possibly downloading) model resolution."""
    from retrofit.cli import commands as retrofit_cli

    resolved = []
    monkeypatch.setattr(retrofit_cli, "_check_model_argument", resolved.append)
    afile = tmp_path / "afile"
    afile.write_text("x\n")
    code, _, err = run_cli(["patch", "--out", afile / "d", "--quiet"], capsys)
    assert code == 2 and f"folder {afile} is a file, not a directory" in err
    assert resolved == []
