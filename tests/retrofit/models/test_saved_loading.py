"""Loading a saved retrofit: its base resolved and verified, every refusal in one line.

A base that is missing or whose SHA-256 changed, an alias base offline, a
directory of the format before adapters and an edited ``retrofit.json`` are
refused through the one resolver, by the estimator and by ``predict`` alike.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from tabpfn.checkpoint import Checkpoint

import retrofit.models.embedded as embedded
from retrofit.errors import SavedModelError, WeightsUnavailableError
from retrofit.files import sha256_file
from retrofit.models import loading, saved
from retrofit.models.saved.save import save_patched
from retrofit.regressor import OTabPFNRegressor
from tests.helpers.commands import one_error_line, predict_argv, run_cli
from tests.helpers.tiny_hosts import build_tiny_v2, save_tiny_v2_checkpoint
from tests.helpers.tiny_models import tiny_v3_checkpoint

X = np.random.default_rng(0).normal(size=(20, 3))
Y = X @ np.array([1.0, -1.0, 2.0])


def _fit(model_path) -> OTabPFNRegressor:
    estimator = OTabPFNRegressor(
        model_path=model_path, n_estimators=1, device="cpu", inference_precision=torch.float32
    )
    return estimator.fit(X, Y)


def _flip_last_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))


@pytest.fixture
def adapter(tmp_path) -> tuple[Path, Path]:
    """A saved retrofit of a tiny v3 file of its own, and that file."""
    base = tiny_v3_checkpoint(tmp_path / "hosts")
    out = save_patched(str(base), tmp_path / "adapter", mode="oattention").directory
    return out, base


def test_a_base_changed_by_one_byte_is_refused_naming_it_both_digests_and_the_way_out(
    adapter, csv_data, capsys, tmp_path
):
    out, base = adapter
    expected = sha256_file(base)
    _flip_last_byte(base)
    with pytest.raises(SavedModelError) as caught:
        loading.resolve_model(str(out))
    message = str(caught.value)
    assert "\n" not in message
    assert f"its base {str(base)!r} changed since the retrofit was saved" in message
    assert f"expected SHA-256 {expected[:12]}, found {sha256_file(base)[:12]}" in message
    assert f"tabpfn-retrofit patch --model {base} --mode oattention --tau 1.0" in message
    with pytest.raises(SavedModelError, match="changed since the retrofit was saved"):
        _fit(str(out))
    code, _, err = run_cli(predict_argv(csv_data, out, tmp_path / "p.csv"), capsys)
    assert code == 2 and "changed since the retrofit was saved" in err
    one_error_line(err, "predict")


def test_a_missing_base_is_refused_naming_it_and_the_expected_digest(adapter, capsys):
    out, base = adapter
    expected = sha256_file(base)
    base.unlink()
    with pytest.raises(SavedModelError) as caught:
        _fit(str(out))
    message = str(caught.value)
    assert "\n" not in message
    assert f"its base {str(base)!r} is missing" in message
    assert f"expected SHA-256 {expected[:12]}, found no file" in message
    assert "put that checkpoint back, or retrofit the base you have" in message


def test_a_changed_embedded_host_is_refused_for_an_adapter_saved_from_the_old_one(
    embedded_dir, tmp_path
):
    """A release that ships another embedded host: the old adapter names the change."""

    def ship(seed: int) -> str:
        name = embedded.EMBEDDED_FILENAME
        tiny_v3_checkpoint(embedded_dir, seed=seed, name=name)
        digest = sha256_file(embedded_dir / name)
        (embedded_dir / f"{name}.sha256").write_text(f"{digest}  {name}\n")
        return digest

    old = ship(0)
    out = save_patched("embedded", tmp_path / "adapter").directory
    assert json.loads((out / "retrofit.json").read_text())["base"] == {
        "name": "embedded", "kind": "regressor", "sha256": old}  # fmt: skip
    assert np.isfinite(_fit(str(out)).predict(X)).all()
    new = ship(1)
    with pytest.raises(SavedModelError) as caught:
        _fit(str(out))
    assert (
        f"its base 'embedded' changed since the retrofit was saved ({embedded_dir.resolve()}"
        in str(caught.value)
    )
    assert f"expected SHA-256 {old[:12]}, found {new[:12]}" in str(caught.value)
    assert "tabpfn-retrofit patch --model embedded --mode full-o" in str(caught.value)


def test_an_alias_base_offline_is_refused_with_the_aliases_own_one_line_error(
    cache_dir, no_download, tmp_path, monkeypatch
):
    """v2 in tabpfn's cache is saved by name; once it is gone the resolver's refusal stands."""
    tmp = tmp_path / "tiny.safetensors"
    save_tiny_v2_checkpoint(build_tiny_v2(), tmp)
    torch.save(Checkpoint(tmp).load(), cache_dir / "tabpfn-v2-regressor.ckpt")
    out = save_patched("v2", tmp_path / "adapter").directory
    manifest = json.loads((out / "retrofit.json").read_text())
    assert manifest["base"]["name"] == "v2" and manifest["base"]["kind"] == "regressor"
    (cache_dir / "tabpfn-v2-regressor.ckpt").unlink()
    with pytest.raises(WeightsUnavailableError) as via_adapter:
        loading.resolve_model(str(out))
    with pytest.raises(WeightsUnavailableError) as via_alias:
        loading.resolve_model("v2")
    assert str(via_adapter.value) == str(via_alias.value)
    assert "\n" not in str(via_adapter.value)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # offline: no download is tried at all
    with pytest.raises(WeightsUnavailableError, match="HF_HUB_OFFLINE is set") as via_adapter:
        _fit(str(out))
    with pytest.raises(WeightsUnavailableError) as via_alias:
        _fit("v2")
    assert str(via_adapter.value) == str(via_alias.value)


def test_a_directory_of_the_format_before_adapters_is_refused_saying_to_patch_again(
    tmp_path, csv_data, capsys
):
    old = tmp_path / "old"
    old.mkdir()
    manifest = {"format": "tabpfn-retrofit-saved/1", "weights": {"file": "x.safetensors"}}
    (old / "retrofit.json").write_text(json.dumps(manifest))
    with pytest.raises(SavedModelError) as caught:
        loading.resolve_model(str(old))
    message = str(caught.value)
    assert "format before adapters" in message and "\n" not in message
    assert f"tabpfn-retrofit patch --model BASE --out {old} --force" in message
    code, _, err = run_cli(predict_argv(csv_data, old, tmp_path / "p.csv"), capsys)
    assert code == 2 and "format before adapters" in err
    one_error_line(err, "predict")


def _edited(out: Path, edit) -> Path:
    path = out / "retrofit.json"
    manifest = json.loads(path.read_text())
    edit(manifest)
    path.write_text(json.dumps(manifest))
    return path


def _set(*keys_and_value):
    *keys, value = keys_and_value

    def edit(manifest):
        node = manifest
        for key in keys[:-1]:
            node = node[key]
        node[keys[-1]] = value

    return edit


def _drop(*keys):
    def edit(manifest):
        node = manifest
        for key in keys[:-1]:
            node = node[key]
        del node[keys[-1]]

    return edit


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (_set("settings", "tau", -1.0), "field settings: tau must be"),
        (_set("settings", "tau", None), "field settings: tau must be"),
        (_set("settings", "mode", "fast"), "field settings: unknown mode 'fast'"),
        (_set("settings", "support", "all"), "field settings: unknown support 'all'"),
        (_set("settings", "eps_den", "1e-6"), "field settings: eps_den must be"),
        (_drop("settings", "support"), "field settings lacks support"),
        (_set("settings", "temperature", 2.0), "field settings holds temperature"),
        (_set("settings", [1.0]), "field settings must be an object"),
        (_set("base", "kind", "both"), "field base.kind must be one of"),
        (_set("base", "sha256", "ABC"), "field base.sha256 must be 64 lowercase hex"),
        (_set("base", "name", "embedded"), "field base holds path, which it does not take"),
        (_drop("base", "sha256"), "field base lacks sha256"),
        (_set("kinds", ["regressor", "regressor"]), "field kinds must list"),
        (_set("kinds", ["classifier"]), "base.kind 'regressor' is not among the kinds"),
        (_set("versions", {"torch": 2}), "field versions must map"),
        (_drop("patch_digest"), "retrofit.json lacks patch_digest"),
        (_set("created", "today"), "retrofit.json holds created, which it does not take"),
        (_set("format", "tabpfn-retrofit-adapter/2"), "has format"),
    ],
)
def test_an_edited_retrofit_json_is_refused_in_one_line_naming_the_file_and_field(
    adapter, edit, expected
):
    out, _ = adapter
    path = _edited(out, edit)
    with pytest.raises(SavedModelError) as caught:
        loading.resolve_model(str(out))
    assert str(path) in str(caught.value) and expected in str(caught.value)
    assert "\n" not in str(caught.value)


def test_a_base_name_that_is_a_path_is_refused(adapter):
    out, base = adapter
    named = {"name": "../x", "kind": "regressor", "sha256": sha256_file(base)}
    _edited(out, _set("base", named))
    with pytest.raises(SavedModelError, match=r"field base.name '\.\./x' is a path"):
        saved.read_saved(out)


def test_an_unreadable_retrofit_json_is_refused_naming_it(adapter):
    out, _ = adapter
    (out / "retrofit.json").write_text("{not json")
    with pytest.raises(SavedModelError, match=r"cannot read .*retrofit\.json"):
        loading.resolve_model(str(out))
    (out / "retrofit.json").write_bytes(b"\xff\xfe")
    with pytest.raises(SavedModelError, match="cannot read"):
        loading.resolve_model(str(out))


def test_a_checkpoint_name_in_tabpfns_cache_is_recorded_as_that_name(cache_dir, tmp_path):
    """A bare file name that tabpfn finds in its model cache stays a name, resolved there."""
    source = tiny_v3_checkpoint(tmp_path / "hosts")
    shutil.copyfile(source, cache_dir / "cached_v3.safetensors")
    out = save_patched("cached_v3.safetensors", tmp_path / "adapter").directory
    base = json.loads((out / "retrofit.json").read_text())["base"]
    assert base == {"name": "cached_v3.safetensors", "kind": "regressor",
                    "sha256": sha256_file(source)}  # fmt: skip
    found = loading.resolve_model(str(out)).checkpoint
    assert found == (cache_dir / "cached_v3.safetensors").resolve()
    (cache_dir / "cached_v3.safetensors").unlink()
    with pytest.raises(SavedModelError, match=r"its base 'cached_v3\.safetensors' is missing"):
        loading.resolve_model(str(out))
