"""Saved retrofit directories: their modes, ``patch --force`` replacing only a saved
retrofit, and what a killed write leaves, cleaned or put back by the next one.
"""

from __future__ import annotations

import os

from retrofit.models import saved
from tests.helpers.commands import dead_pid, file_mode, listing, one_error_line, run_cli


def test_a_saved_model_gets_the_umask_modes_and_keeps_them_when_replaced(
    model_arg, capsys, tmp_path, umask
):
    """A saved directory is ``0o777 & ~umask``, not ``mkdtemp``'s 0700."""
    out = tmp_path / "d"
    umask(0o022)
    assert run_cli(["patch", "--model", model_arg, "--out", out, "--quiet"], capsys)[0] == 0
    assert file_mode(out) == 0o755
    assert {file_mode(p) for p in out.iterdir()} == {0o644}
    umask(0o077)
    argv = ["patch", "--model", model_arg, "--mode", "none", "--out", out, "--force", "--quiet"]
    assert run_cli(argv, capsys)[0] == 0
    assert saved.load_saved(out).settings["mode"] == "none"
    assert file_mode(out) == 0o755 and {file_mode(p) for p in out.iterdir()} == {0o644}
    fresh = tmp_path / "e"
    assert run_cli(["patch", "--model", model_arg, "--out", fresh, "--quiet"], capsys)[0] == 0
    assert file_mode(fresh) == 0o700 and {file_mode(p) for p in fresh.iterdir()} == {0o600}


def test_patch_force_refuses_a_directory_that_is_not_a_saved_model(model_arg, capsys, tmp_path):
    """``--force`` replaces only a saved retrofit, never the user's folder."""
    out = tmp_path / "d"
    out.mkdir()
    (out / "keep.txt").write_text("mine\n")
    code, _, err = run_cli(
        ["patch", "--model", model_arg, "--out", out, "--force", "--quiet"], capsys
    )
    assert code == 2
    one_error_line(err, "patch")
    assert "not a saved retrofit (no retrofit.json)" in err
    assert (out / "keep.txt").read_text() == "mine\n" and listing(tmp_path) == ["d"]


def test_patch_force_refuses_a_saved_directory_that_holds_other_files(model_arg, capsys, tmp_path):
    """A saved directory with the user's own files in it is not replaced."""
    out = tmp_path / "d"
    assert run_cli(["patch", "--model", model_arg, "--out", out, "--quiet"], capsys)[0] == 0
    (out / "notes.md").write_text("mine\n")
    argv = ["patch", "--model", model_arg, "--mode", "none", "--out", out, "--force", "--quiet"]
    code, _, err = run_cli(argv, capsys)
    assert code == 2 and "notes.md" in err
    assert saved.load_saved(out).settings["mode"] == "full-o"
    assert (out / "notes.md").read_text() == "mine\n"


def test_patch_force_onto_a_file_replaces_it_and_leaves_nothing_hidden(model_arg, capsys, tmp_path):
    """No ``.NAME.old-PID`` stays beside the replaced file."""
    out = tmp_path / "d"
    out.write_text("a file\n")
    code, _, err = run_cli(
        ["patch", "--model", model_arg, "--out", out, "--force", "--quiet"], capsys
    )
    assert code == 0, err
    assert saved.is_saved_dir(out)
    assert listing(tmp_path) == ["d"]


def test_the_next_patch_removes_what_a_killed_patch_left(model_arg, capsys, tmp_path):
    """A killed patch's hidden temp folder is cleaned by the next run.

    Simulated: the folders a kill between ``mkdtemp`` and the rename leaves, for a
    dead PID (removed) and for a running one (another patch at work: kept).
    """
    dead, alive = dead_pid(), os.getpid()
    stale = tmp_path / f".d.tmp-{dead}-x1y2"
    stale.mkdir()
    (stale / "tabpfn_v3_regressor_retrofit.safetensors").write_bytes(b"half")
    busy = tmp_path / f".d.tmp-{alive}-a3b4"
    busy.mkdir()
    code, _, err = run_cli(
        ["patch", "--model", model_arg, "--out", tmp_path / "d", "--quiet"], capsys
    )
    assert code == 0, err
    assert listing(tmp_path) == sorted(["d", busy.name])


def test_a_patch_killed_between_its_two_renames_gets_the_old_model_back(
    model_arg, capsys, tmp_path
):
    """``DIR`` moved aside to ``.DIR.old-PID`` is put back, not deleted."""
    out = tmp_path / "d"
    assert run_cli(["patch", "--model", model_arg, "--out", out, "--quiet"], capsys)[0] == 0
    aside = tmp_path / f".d.old-{dead_pid()}"
    out.rename(aside)  # what a kill right after the first rename leaves
    code, _, err = run_cli(["patch", "--model", model_arg, "--out", out, "--quiet"], capsys)
    assert code == 2 and "already exists" in err  # the old model is back, --force not given
    assert saved.load_saved(out).settings["mode"] == "full-o"
    assert listing(tmp_path) == ["d"]


def test_a_leftover_old_copy_is_removed_once_the_new_directory_is_in_place(
    model_arg, capsys, tmp_path
):
    """Killed after the second rename, the old copy is just removed."""
    out = tmp_path / "d"
    assert run_cli(["patch", "--model", model_arg, "--out", out, "--quiet"], capsys)[0] == 0
    (tmp_path / f".d.old-{dead_pid()}").write_text("the file --force replaced\n")
    argv = ["patch", "--model", model_arg, "--mode", "none", "--out", out, "--force", "--quiet"]
    assert run_cli(argv, capsys)[0] == 0
    assert saved.load_saved(out).settings["mode"] == "none"
    assert listing(tmp_path) == ["d"]
