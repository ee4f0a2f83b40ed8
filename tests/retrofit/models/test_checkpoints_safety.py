"""No checkpoint the retrofit reads can run code.

A marker pickle is a ``.ckpt`` whose full unpickling creates a file. Full
unpickling is what ``torch.load`` does by default before torch 2.6, and on
any torch when ``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD`` is set and the caller
leaves ``weights_only`` unset (as tabpfn's loader does); the tests set that
variable, so they show on torch 2.13 what a torch 2.5 install would do.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
from tabpfn.checkpoint import Checkpoint

from retrofit.errors import CorruptCheckpointError, UnsafeCheckpointError
from retrofit.files import sha256_file
from retrofit.models import loading, saved
from retrofit.models.checkpoints import check_checkpoint, load_checkpoint
from retrofit.models.saved.save import save_patched
from retrofit.regressor import OTabPFNRegressor
from tests.helpers.tiny_models import tiny_v3_checkpoint

# tabpfn's loader warns that the variable forces full unpickling: that is the point here.
pytestmark = pytest.mark.filterwarnings("ignore:Environment variable TORCH_FORCE_NO_WEIGHTS")

REPO = Path(__file__).resolve().parents[3]


class _Marker:
    """Unpickles into a call that creates ``path``."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self):
        return (exec, (f"open({str(self.path)!r}, 'w').close()",))


@pytest.fixture
def legacy_default(monkeypatch):
    """``torch.load`` with ``weights_only`` unset unpickles fully, as before torch 2.6."""
    monkeypatch.setenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")


def _marker_checkpoint(tmp_path: Path, name: str = "tiny_v3.ckpt") -> tuple[Path, Path]:
    source = tiny_v3_checkpoint(tmp_path, name="tiny_v3_source.safetensors")
    checkpoint = Checkpoint(source).load()
    marker = tmp_path / "code_ran"
    checkpoint["payload"] = _Marker(marker)
    path = tmp_path / name
    torch.save(checkpoint, path)
    return path, marker


def test_the_marker_pickle_does_run_code_under_full_unpickling(tmp_path, legacy_default):
    """The fixture is real: tabpfn's own loader executes it when weights_only is unset."""
    path, marker = _marker_checkpoint(tmp_path)
    Checkpoint(path).load()
    assert marker.exists()


def test_loading_a_marker_ckpt_as_a_model_runs_no_code(tmp_path, legacy_default):
    """``load_host`` and ``fit`` refuse it before tabpfn reads it."""
    path, marker = _marker_checkpoint(tmp_path)
    with pytest.raises(UnsafeCheckpointError, match="could run code"):
        loading.load_host(str(path))
    with pytest.raises(UnsafeCheckpointError):
        OTabPFNRegressor(model_path=str(path), device="cpu").fit([[0.0], [1.0]], [0.0, 1.0])
    assert not marker.exists()
    assert issubclass(UnsafeCheckpointError, CorruptCheckpointError)


def test_saving_from_a_marker_ckpt_runs_no_code(tmp_path, legacy_default):
    """``save_patched`` resolves its base through the weights-only check too."""
    path, marker = _marker_checkpoint(tmp_path)
    with pytest.raises(UnsafeCheckpointError):
        save_patched(str(path), tmp_path / "out")
    with pytest.raises(UnsafeCheckpointError):
        load_checkpoint(path)
    assert not marker.exists()
    assert not (tmp_path / "out").exists()


def test_a_plain_ckpt_still_loads_weights_only(tmp_path, legacy_default):
    source = tiny_v3_checkpoint(tmp_path, name="tiny_v3.safetensors")
    path = tmp_path / "tiny_v3.ckpt"
    torch.save(Checkpoint(source).load(), path)
    check_checkpoint(path)
    legacy = tmp_path / "tiny_v3_legacy.ckpt"  # torch's old non-zip format cannot be mmapped
    torch.save(Checkpoint(source).load(), legacy, _use_new_zipfile_serialization=False)
    check_checkpoint(legacy)
    loaded = load_checkpoint(path)
    assert loaded.keys() == Checkpoint(source).load().keys()
    assert loading.load_host(str(path)).model is not None


def test_a_truncated_ckpt_is_a_corrupt_checkpoint(tmp_path):
    path = tmp_path / "broken_v3.ckpt"
    path.write_bytes(b"PK\x03\x04 not a checkpoint")
    with pytest.raises(CorruptCheckpointError, match="cannot read"):
        check_checkpoint(path)


def test_a_text_file_named_ckpt_is_not_a_checkpoint_rather_than_an_unsafe_pickle(tmp_path):
    """A text file given as --model was refused as a pickle that could run code."""
    path = tmp_path / "notes_v3.ckpt"
    path.write_text("these are my notes, not weights\n")
    with pytest.raises(CorruptCheckpointError, match="is not a torch checkpoint") as caught:
        check_checkpoint(path)
    assert not isinstance(caught.value, UnsafeCheckpointError)
    assert str(path) in str(caught.value) and "\n" not in str(caught.value)


def test_a_saved_retrofit_edited_to_name_a_marker_ckpt_with_its_sha256_runs_no_code(
    tmp_path, legacy_default
):
    """The SHA-256 proves no origin: the base still passes the weights-only check first."""
    source = tiny_v3_checkpoint(tmp_path, name="tiny_v3.safetensors")
    out = save_patched(str(source), tmp_path / "d").directory
    marker_ckpt, marker = _marker_checkpoint(tmp_path, name="payload_v3.ckpt")
    manifest_path = out / saved.MANIFEST_NAME
    manifest = json.loads(manifest_path.read_text())
    manifest["base"] = {**manifest["base"], "path": str(marker_ckpt)}
    manifest["base"]["sha256"] = sha256_file(marker_ckpt)
    manifest_path.write_text(json.dumps(manifest))
    with pytest.raises(UnsafeCheckpointError, match="could run code"):
        loading.load_host(str(out))
    with pytest.raises(UnsafeCheckpointError, match="could run code"):
        OTabPFNRegressor(model_path=str(out), device="cpu").fit([[0.0], [1.0]], [0.0, 1.0])
    assert not marker.exists()


def test_the_torch_floor_is_the_first_release_that_loads_weights_only_by_default():
    """``torch>=2.6`` (2.6 made ``weights_only=True`` the default)."""
    text = (REPO / "pyproject.toml").read_text()
    floors = re.findall(r'"torch>=(\d+)\.(\d+)', text)
    assert floors, "pyproject.toml declares no torch floor"
    assert all((int(a), int(b)) >= (2, 6) for a, b in floors)


@pytest.mark.parametrize("legacy", [False, True], ids=["torch-default", "full-unpickling"])
def test_eval_with_a_ckpt_that_holds_a_pickle_reports_the_projects_unsafe_checkpoint_error(
    tmp_path, monkeypatch, capsys, legacy
):
    """Eval's own hashing of the checkpoint goes through the weights-only
    reader, so the user sees ``UnsafeCheckpointError`` (not torch's message) and no code runs."""
    from eval.cli import main

    if legacy:
        monkeypatch.setenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")
    path, marker = _marker_checkpoint(tmp_path)
    argv = ["eval", "--model", str(path), "--datasets", "qsar_fish", "--seeds", "0",
            "--n-estimators", "1", "--store", str(tmp_path / "store"), "--no-progress"]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "UnsafeCheckpointError: refusing" in err and "could run code" in err
    assert "\n" not in err
    assert not marker.exists()
    assert not (tmp_path / "store").exists()
