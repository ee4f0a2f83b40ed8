"""Where a saved retrofit's base is: a relative path is relative to the adapter directory.

``patch`` records a base given by a relative path relative to the directory it
writes (the PEFT-like choice), so the adapter loads from any working directory
and a folder holding both can move; an absolute path (or ``~/...``) is kept
as given, so the adapter alone can move. Re-patching an adapter names the same
base, rewritten relative to the new directory.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from retrofit.errors import SavedModelError
from retrofit.models import loading, saved
from retrofit.models.saved.save import save_patched
from tests.helpers.commands import run_cli
from tests.helpers.tiny_models import tiny_v3_checkpoint


def _base_record(adapter: Path) -> dict:
    return json.loads((adapter / "retrofit.json").read_text())["base"]


@pytest.fixture
def project(tmp_path, monkeypatch) -> Path:
    """A working directory holding ``hosts/tiny_v3.safetensors``, the current one."""
    root = tmp_path / "project"
    tiny_v3_checkpoint(root / "hosts")
    monkeypatch.chdir(root)
    return root


def test_a_relative_base_is_recorded_relative_to_the_adapter_and_loads_from_anywhere(
    project, capsys, monkeypatch, tmp_path
):
    argv = ["patch", "--model", "hosts/tiny_v3.safetensors", "--out", "adapters/a", "--quiet"]
    assert run_cli(argv, capsys)[0] == 0
    assert _base_record(project / "adapters/a")["path"] == "../../hosts/tiny_v3.safetensors"
    monkeypatch.chdir(tmp_path)  # another working directory
    base = loading.resolve_model(str(project / "adapters/a")).checkpoint
    assert base == (project / "hosts/tiny_v3.safetensors").resolve()
    moved = tmp_path / "moved"  # the adapter and its base, moved together
    shutil.move(project, moved)
    base = loading.resolve_model(str(moved / "adapters/a")).checkpoint
    assert base == (moved / "hosts/tiny_v3.safetensors").resolve()
    alone = tmp_path / "copy" / "a"  # the adapter without its base
    shutil.copytree(moved / "adapters/a", alone)
    with pytest.raises(SavedModelError) as caught:
        loading.resolve_model(str(alone))
    message = str(caught.value)
    assert "its base '../../hosts/tiny_v3.safetensors' is missing" in message
    assert f"({(tmp_path / 'hosts/tiny_v3.safetensors')})" in message  # where it was looked for


def test_an_absolute_base_is_recorded_as_given_and_the_adapter_moves_alone(project, tmp_path):
    base = project / "hosts/tiny_v3.safetensors"
    save_patched(str(base), project / "a")
    assert _base_record(project / "a")["path"] == str(base)
    shutil.move(project / "a", tmp_path / "elsewhere")
    assert loading.resolve_model(str(tmp_path / "elsewhere")).checkpoint == base.resolve()


def test_a_base_under_the_home_folder_keeps_its_tilde(project, monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(project))
    save_patched("~/hosts/tiny_v3.safetensors", tmp_path / "a")
    assert _base_record(tmp_path / "a")["path"] == "~/hosts/tiny_v3.safetensors"
    found = loading.resolve_model(str(tmp_path / "a")).checkpoint
    assert found == (project / "hosts/tiny_v3.safetensors").resolve()


def test_patching_an_adapter_again_names_the_same_base_relative_to_the_new_one(project, capsys):
    assert run_cli(["patch", "--model", "hosts/tiny_v3.safetensors", "--mode", "oattention",
                    "--out", "adapters/a", "--quiet"], capsys)[0] == 0  # fmt: skip
    argv = ["patch", "--model", "adapters/a", "--tau", "0.5", "--out", "b", "--quiet"]
    assert run_cli(argv, capsys)[0] == 0
    first, second = _base_record(project / "adapters/a"), _base_record(project / "b")
    assert second == {**first, "path": "../hosts/tiny_v3.safetensors"}
    again = saved.read_saved(project / "b").settings
    assert (again.mode, again.tau) == ("oattention", 0.5)  # the saved mode, the given tau
    base = loading.resolve_model("b").checkpoint
    assert base == (project / "hosts/tiny_v3.safetensors").resolve()


def test_a_relative_path_is_rewritten_only_when_relative():
    assert saved.recorded_path("/models/h_v3.safetensors", "out") == "/models/h_v3.safetensors"
    assert saved.recorded_path("~/h_v3.safetensors", "out") == "~/h_v3.safetensors"
    assert saved.recorded_path("h_v3.safetensors", "out") == "../h_v3.safetensors"
    assert saved.recorded_path("a/h_v3.safetensors", "a") == "h_v3.safetensors"
    # From another saved retrofit: relative to that one, rewritten relative to the new one.
    assert (
        saved.recorded_path("../h_v3.safetensors", "b/c", relative_to="a")
        == "../../h_v3.safetensors"
    )
