"""Writing a saved retrofit: one ``retrofit.json`` naming the base and no weights, its
modes, ``patch --force`` replacing only a saved retrofit, and a failed write.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from retrofit.errors import OutputExistsError
from retrofit.files import sha256_file
from retrofit.models import saved
from retrofit.models.saved.save import save_patched
from tests.helpers.commands import file_mode, listing, one_error_line, run_cli
from tests.helpers.tiny_models import tiny_v3_checkpoint


@pytest.fixture
def base(tmp_path) -> Path:
    """A tiny v3 checkpoint of this test's own (some tests write beside it)."""
    return tiny_v3_checkpoint(tmp_path / "hosts")


def test_a_saved_retrofit_is_one_json_file_naming_its_base_and_holding_no_weight(base, tmp_path):
    out = tmp_path / "adapter"
    result = save_patched(str(base), out, mode="oattention", tau=0.5, support="mass")
    assert listing(out) == ["retrofit.json"]
    manifest = json.loads((out / "retrofit.json").read_text())
    assert set(manifest) == {"format", "settings", "base", "kinds", "patch_digest", "versions"}
    assert manifest["format"] == saved.FORMAT
    assert manifest["settings"] == {"mode": "oattention", "tau": 0.5, "support": "mass",
                                    "eps_den": 1e-6}  # fmt: skip
    assert manifest["base"] == {
        "path": str(base),  # absolute as given
        "kind": "regressor",
        "sha256": sha256_file(base),
    }
    assert manifest["kinds"] == ["regressor"]
    assert set(manifest["versions"]) == {"tabpfn-retrofit", "tabpfn", "torch"}
    assert len(manifest["patch_digest"]) == 16
    assert (out / "retrofit.json").stat().st_size < 1024  # the host is 100+ kB
    assert result.settings.tau == 0.5 and result.base.sha256 == sha256_file(base)
    assert saved.is_saved_dir(out) and not saved.is_saved_dir(base)


def test_mode_none_records_no_patch_digest(base, tmp_path):
    result = save_patched(str(base), tmp_path / "adapter", mode="none")
    assert result.patch_digest is None and result.settings.mode == "none"


def test_a_saved_model_gets_the_umask_modes_and_keeps_them_when_replaced(
    base, capsys, tmp_path, umask
):
    """A saved directory and its file get ``mkdir``'s and ``open``'s modes, or the replaced ones."""
    out = tmp_path / "d"
    umask(0o022)
    assert run_cli(["patch", "--model", base, "--out", out, "--quiet"], capsys)[0] == 0
    assert file_mode(out) == 0o755 and file_mode(out / "retrofit.json") == 0o644
    umask(0o077)
    argv = ["patch", "--model", base, "--mode", "none", "--out", out, "--force", "--quiet"]
    assert run_cli(argv, capsys)[0] == 0
    assert saved.read_saved(out).settings.mode == "none"
    assert file_mode(out) == 0o755 and file_mode(out / "retrofit.json") == 0o644
    fresh = tmp_path / "e"
    assert run_cli(["patch", "--model", base, "--out", fresh, "--quiet"], capsys)[0] == 0
    assert file_mode(fresh) == 0o700 and file_mode(fresh / "retrofit.json") == 0o600


def test_an_empty_directory_takes_a_saved_retrofit_without_force(base, capsys, tmp_path):
    out = tmp_path / "d"
    out.mkdir()
    assert run_cli(["patch", "--model", base, "--out", out, "--quiet"], capsys)[0] == 0
    assert listing(out) == ["retrofit.json"]


def test_patch_force_refuses_a_directory_that_is_not_a_saved_model(base, capsys, tmp_path):
    """``--force`` replaces only a saved retrofit, never the user's folder."""
    out = tmp_path / "d"
    out.mkdir()
    (out / "keep.txt").write_text("mine\n")
    code, _, err = run_cli(["patch", "--model", base, "--out", out, "--force", "--quiet"], capsys)
    assert code == 2
    one_error_line(err, "patch")
    assert "not a saved retrofit (no retrofit.json)" in err
    assert listing(out) == ["keep.txt"] and (out / "keep.txt").read_text() == "mine\n"


def test_patch_force_refuses_a_saved_directory_that_holds_other_files(base, capsys, tmp_path):
    """A saved directory with the user's own files in it is not replaced."""
    out = tmp_path / "d"
    assert run_cli(["patch", "--model", base, "--out", out, "--quiet"], capsys)[0] == 0
    (out / "notes.md").write_text("mine\n")
    argv = ["patch", "--model", base, "--mode", "none", "--out", out, "--force", "--quiet"]
    code, _, err = run_cli(argv, capsys)
    assert code == 2 and "notes.md" in err
    assert saved.read_saved(out).settings.mode == "full-o"
    assert (out / "notes.md").read_text() == "mine\n"


def test_patch_force_onto_a_file_replaces_it_and_leaves_nothing_hidden(base, capsys, tmp_path):
    out = tmp_path / "d"
    out.write_text("a file\n")
    code, _, err = run_cli(["patch", "--model", base, "--out", out, "--force", "--quiet"], capsys)
    assert code == 0, err
    assert saved.is_saved_dir(out)
    assert listing(tmp_path) == ["d", "hosts"] and listing(out) == ["retrofit.json"]


def test_patch_force_replaces_a_directory_of_the_format_before_adapters(base, capsys, tmp_path):
    """The old format's weights file goes with it; nothing else of the user's would."""
    out = tmp_path / "d"
    out.mkdir()
    (out / "retrofit.json").write_text(json.dumps({"format": "tabpfn-retrofit-saved/1"}))
    (out / "tabpfn_v3_regressor_retrofit.safetensors").write_bytes(base.read_bytes())
    assert run_cli(["patch", "--model", base, "--out", out, "--quiet"], capsys)[0] == 2
    assert run_cli(["patch", "--model", base, "--out", out, "--force", "--quiet"], capsys)[0] == 0
    assert listing(out) == ["retrofit.json"]
    assert saved.read_saved(out).base.sha256 == sha256_file(base)


def test_a_failed_write_leaves_no_directory_and_an_old_retrofit_unchanged(
    base, tmp_path, monkeypatch
):
    def full_disk(path, text):
        raise OSError("No space left on device")

    monkeypatch.setattr(saved, "write_text_atomic", full_disk)
    out = tmp_path / "new" / "d"
    with pytest.raises(OSError, match="No space"):
        save_patched(str(base), out)
    assert not (tmp_path / "new").exists()  # the folders it created are gone too
    monkeypatch.undo()
    out = tmp_path / "d"
    save_patched(str(base), out, mode="oattention")
    before = (out / "retrofit.json").read_bytes()
    monkeypatch.setattr(saved, "write_text_atomic", full_disk)
    with pytest.raises(OSError, match="No space"):
        save_patched(str(base), out, mode="none", overwrite=True)
    assert (out / "retrofit.json").read_bytes() == before


def test_the_output_may_not_be_the_base_itself(base):
    with pytest.raises(OutputExistsError, match="is the base checkpoint"):
        save_patched(str(base), base, overwrite=True)
    assert base.is_file()
