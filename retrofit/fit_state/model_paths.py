"""A fit's ``model_path`` in a fit state: names and files as text, in-memory models as data.

A name (``"embedded"``, ``"v3"``, ``"auto"``), a checkpoint file or a saved
directory is stored as the text the estimator was given (loading resolves it
again; the weight digests in the manifest catch a file that changed). A
:class:`~retrofit.ResolvedModel` of one named model is stored by its label and
resolved again on load. A ``tabpfn.ModelSpecs``
is stored as a safetensors checkpoint of its model (unpatched weights: the
retrofit keeps a patched model's ``state_dict``), architecture and inference
configs and bar distribution, built again by tabpfn's loader on load; a model
the caller had patched is patched again, with the settings it carried, never
unpickled.
"""

from __future__ import annotations

import copy
import dataclasses
import os
import tempfile
from collections.abc import Mapping
from os import PathLike
from pathlib import Path
from typing import Any

from tabpfn import ModelSpecs, model_loading
from tabpfn.checkpoint import save_as_safetensors

from retrofit.errors import FitStateError
from retrofit.hosts.common.base import is_patched, patch_config_of
from retrofit.models.loading import ResolvedModel, resolve_model
from retrofit.patcher import patch
from retrofit.tabpfn_surface import models_may_be_shared, resolve_architecture_name

__all__ = ["decode_model_path", "encode_model_path", "model_members"]


def _specs_checkpoint(specs: ModelSpecs) -> dict[str, Any]:
    """A ``ModelSpecs`` as a tabpfn checkpoint dict (what ``save_tabpfn_model`` writes)."""
    state = dict(specs.model.state_dict())
    if specs.norm_criterion is not None:
        state.update({f"criterion.{k}": v for k, v in specs.norm_criterion.state_dict().items()})
    return {
        "state_dict": state,
        "config": dataclasses.asdict(specs.architecture_config),
        "architecture_name": resolve_architecture_name(specs.architecture_config),
        "inference_config": dataclasses.asdict(specs.inference_config),
    }


def _encode_entry(entry: Any, members: dict[str, bytes]) -> dict[str, Any]:
    if isinstance(entry, ModelSpecs):
        name = f"model_{len(members)}.safetensors"
        with tempfile.TemporaryDirectory() as tmp:
            file = Path(tmp) / name
            save_as_safetensors(_specs_checkpoint(entry), file)
            members[name] = file.read_bytes()
        config = patch_config_of(entry.model).to_dict() if is_patched(entry.model) else None
        return {
            "specs": name,
            "norm_criterion": entry.norm_criterion is not None,
            "patch": config,
        }
    if isinstance(entry, ResolvedModel):
        if entry.is_list or entry.by_reference:
            raise FitStateError(
                f"cannot save the fit state: model_path is a resolved {entry.label}; give "
                "model_path as the list or the ModelSpecs itself, not resolved"
            )
        return {"resolved": entry.label}
    if isinstance(entry, str | PathLike):
        return {"path": os.fspath(entry)}
    raise FitStateError(
        f"cannot save the fit state: a model_path entry of type {type(entry).__name__}; "
        "use a name, a file, a saved directory or a ModelSpecs"
    )


def encode_model_path(model_path: Any, members: dict[str, bytes]) -> dict[str, Any]:
    """The JSON form of ``model_path``; each ``ModelSpecs`` adds its member to ``members``.

    Raises:
        FitStateError: An entry of a type no loader takes.
    """
    if isinstance(model_path, list):
        return {"list": [_encode_entry(entry, members) for entry in model_path]}
    return {"one": _encode_entry(model_path, members)}


def _specs_from_member(data: bytes, entry: Mapping[str, Any], which: str) -> ModelSpecs:
    """A fresh ``ModelSpecs`` built by tabpfn's loader from a stored safetensors member."""
    with tempfile.TemporaryDirectory() as tmp:
        file = Path(tmp) / "model.safetensors"
        file.write_bytes(data)
        model, criterion, architecture, inference = model_loading.load_model(
            path=file, estimator_type=which
        )
    if models_may_be_shared():
        model = copy.deepcopy(model)
    config = entry.get("patch")
    if config is not None:
        patch(model, **config)  # the in-memory model was patched: patch the fresh one alike
    return ModelSpecs(
        model=model,
        architecture_config=architecture,
        inference_config=inference,
        norm_criterion=criterion if entry.get("norm_criterion") else None,
    )


def _decode_entry(entry: Mapping[str, Any], members: Mapping[str, bytes], which: str) -> Any:
    if "specs" in entry:
        return _specs_from_member(members[entry["specs"]], entry, which)
    if "resolved" in entry:
        return resolve_model(entry["resolved"], which)
    return entry["path"]


def decode_model_path(encoded: Mapping[str, Any], members: Mapping[str, bytes], which: str) -> Any:
    """The ``model_path`` to refit with: names and files as given, fresh ``ModelSpecs`` models."""
    if "list" in encoded:
        return [_decode_entry(entry, members, which) for entry in encoded["list"]]
    return _decode_entry(encoded["one"], members, which)


def model_members(encoded: Mapping[str, Any]) -> list[str]:
    """The archive members the JSON form of a ``model_path`` names."""
    entries = encoded.get("list") or [encoded.get("one") or {}]
    return [entry["specs"] for entry in entries if isinstance(entry, dict) and "specs" in entry]
