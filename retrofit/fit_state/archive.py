"""The fit-state file of both estimators: a zip of JSON and data, replayed on load.

tabpfn 9.2's own ``.tabpfn_fit`` archive stores the fitted attributes and the
inference engine with joblib, which unpickles (runs code) on load. This
format stores no object at all, only what is needed to redo the fit::

    PATH.tabpfn_fit
      retrofit_fit_state.json   format, estimator class, constructor parameters
                                (a dict keyed by labels as its [key, value]
                                pairs, keys keeping their type),
                                the resolved settings, the patch report digests,
                                the SHA-256 of each model's weights, versions,
                                the SHA-256 of each member and of the manifest
                                (retrofit.fit_state.digests)
      X.npy | X.parquet         the training inputs (retrofit.fit_state.tables);
      y.npy | y.parquet         lists and object arrays live in the JSON
      sample_weight.npy         the fit's sample weights, where it had any
      model_<i>.safetensors     only for a ``ModelSpecs`` model_path
                                (retrofit.fit_state.model_paths)

Reading checks, in this order, before anything is used: the sizes the zip's
directory declares against the file's size (:mod:`retrofit.fit_state.bounds`,
nothing unpacked yet), the compression methods (stored or deflated only), the
format, the member names (a member the manifest does not name, tabpfn's
``fitted_attrs.joblib`` say, is refused unread), then the digest of the
manifest and of every member (:mod:`retrofit.fit_state.digests`): a file
edited or damaged since it was saved is refused with a
:class:`~retrofit.errors.FitStateError` naming it. Every member is read from
memory.

Loading rebuilds the estimator from the parameters and fits it again: tabpfn
loads a fresh model, the retrofit patches it from the settings (a patched
``ModelSpecs`` model is re-patched with the settings it carried), and the fit
is deterministic for an integer ``random_state``. The refit must reproduce the
saved settings, patch report digests and weight digests, or loading fails, so
a changed checkpoint file or another retrofit never gives other numbers
silently.

Writing is atomic (:func:`retrofit.files.atomic_path`: the file gets the mode
a plain ``open`` would give it, that of the file it replaces or ``0o666`` less
the umask); the temporary files a killed save left beside the target are
removed by the next save to it, once their process is gone.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import zipfile
import zlib
from collections.abc import Mapping, Sequence
from os import PathLike
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from retrofit.errors import FitStateError, RetrofitError
from retrofit.files import atomic_path, remove_abandoned_temporaries
from retrofit.fit_state.bounds import check_archive, stored_members
from retrofit.fit_state.digests import check_digests, with_digests
from retrofit.fit_state.model_paths import decode_model_path, encode_model_path, model_members
from retrofit.fit_state.tables import copy_input, decode_table, encode_table
from retrofit.versions import package_versions

__all__ = [
    "FORMAT",
    "MANIFEST_NAME",
    "SUFFIX",
    "FitRecord",
    "SavedFit",
    "read_fit_state",
    "weights_digest",
    "write_fit_state",
]

#: Identifies the layout of the manifest; bumped on incompatible changes.
FORMAT = "tabpfn-retrofit-fit-state/2"
MANIFEST_NAME = "retrofit_fit_state.json"
#: tabpfn's suffix for fit states, kept so that both save to the same kind of path.
SUFFIX = ".tabpfn_fit"
#: The manifest of tabpfn's own (pickle-based) fit state.
_TABPFN_MANIFEST = "init_params.json"
#: The only compression methods save_fit_state writes.
_COMPRESSIONS = (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED)
_VERSIONED_PACKAGES = ("tabpfn-retrofit", "tabpfn", "torch", "numpy", "pandas", "scikit-learn")


@dataclasses.dataclass(frozen=True)
class FitRecord:
    """What one ``fit`` was given, kept on the estimator to save its fit state.

    Attributes:
        X: A copy of the training features.
        y: A copy of the training target (as the estimator's ``fit`` passed it on).
        params: ``get_params(deep=False)`` right after the fit.
        sample_weight: The fit's checked sample weights (float64), None for none.
    """

    X: Any
    y: Any
    params: dict[str, Any]
    sample_weight: np.ndarray | None = None

    @classmethod
    def of(
        cls, X: Any, y: Any, params: Mapping[str, Any], *, sample_weight: np.ndarray | None = None
    ) -> FitRecord:
        """The record of a fit, with copies of its inputs."""
        weights = None if sample_weight is None else copy_input(sample_weight)
        return cls(copy_input(X), copy_input(y), dict(params), weights)


@dataclasses.dataclass(frozen=True)
class SavedFit:
    """A fit state read back: everything to redo the fit and to check the result.

    Attributes:
        params: Constructor parameters (``model_path`` rebuilt; no ``device``).
        X: The training features.
        y: The training target.
        settings: The saved ``settings_``.
        report_digests: The saved digest of each patch report (empty for "none").
        weights: The SHA-256 of each model's weights, in ``models_`` order.
        sample_weight: The fit's sample weights, None for none.
    """

    params: dict[str, Any]
    X: Any
    y: Any
    settings: dict[str, Any]
    report_digests: tuple[str, ...]
    weights: tuple[str, ...]
    sample_weight: Any = None


def weights_digest(model: nn.Module) -> str:
    """SHA-256 over a model's ``state_dict``: names, dtypes, shapes and bytes.

    The retrofit's replacements share the host's tensors and keep its keys,
    so a patched model and its host digest alike.
    """
    digest = hashlib.sha256()
    for name, tensor in model.state_dict().items():
        flat = tensor.detach().to("cpu").contiguous().reshape(-1)
        digest.update(f"{name}|{flat.dtype}|{tuple(tensor.shape)}|".encode())
        digest.update(flat.view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


#: A dict whose keys are not all text, as JSON holds it: ``{"dict.items": [[key, value], ...]}``.
_ITEMS_TAG = "dict.items"
#: The one-key dicts that stand for something else (a torch dtype, a dict of typed keys).
_TAGS = frozenset({"torch.dtype", _ITEMS_TAG})
#: The key types a dict parameter keeps through JSON (its number and text values).
_KEY_TYPES = (bool, int, float, str)


def _json_param(name: str, value: Any) -> Any:
    """A parameter as JSON, refused where its JSON form would load as something else.

    JSON's object keys are text, so a dict whose keys are not all text (a
    ``class_weight`` of integer labels, ``{0: 3.0, 1: 1.0}``) is stored as its
    ``[key, value]`` pairs under ``"dict.items"``, where a key keeps its type
    (bool, int, float or str); numpy scalars are stored as the Python numbers
    and strings they equal.
    """
    if isinstance(value, torch.dtype):
        return {"torch.dtype": str(value).removeprefix("torch.")}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = dataclasses.asdict(value)  # tabpfn's constructors take these as dicts
    try:
        value = _as_data(value)
        text = json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as err:
        raise FitStateError(
            f"cannot save the fit state: parameter {name}={value!r:.80} has no JSON form "
            f"({err}); set it to plain values (numbers, strings, lists, dicts) and fit again"
        ) from err
    if json.loads(text) != _as_json_types(value):
        raise FitStateError(
            f"cannot save the fit state: parameter {name}={value!r:.80} does not read back "
            "equal from JSON; set it to plain values and fit again"
        )
    return value


def _as_data(value: Any) -> Any:
    """``value`` with numpy scalars as Python's and every dict keyed by text (see _json_param).

    Raises:
        TypeError: A dict key of another type than bool, int, float or str.
    """
    value = _python_scalar(value)
    if isinstance(value, tuple | list):
        return [_as_data(v) for v in value]
    if isinstance(value, dict):
        keys = [_python_scalar(k) for k in value]
        if all(type(k) is str for k in keys) and set(keys) not in ({t} for t in _TAGS):
            return {k: _as_data(v) for k, v in zip(keys, value.values(), strict=True)}
        odd = [k for k in keys if type(k) not in _KEY_TYPES]
        if odd:
            raise TypeError(
                f"a key {odd[0]!r:.40} of type {type(odd[0]).__name__} (a dict's keys are "
                "stored as bool, int, float or str)"
            )
        return {_ITEMS_TAG: [[k, _as_data(v)] for k, v in zip(keys, value.values(), strict=True)]}
    return value


def _python_scalar(value: Any) -> Any:
    """A numpy bool, number or string as Python's (``np.int64(3)`` -> ``3``); else ``value``."""
    if isinstance(value, np.generic) and isinstance(value.item(), _KEY_TYPES):
        return value.item()
    return value


def _as_json_types(value: Any) -> Any:
    if isinstance(value, tuple | list):
        return [_as_json_types(v) for v in value]
    if isinstance(value, dict):
        return {k: _as_json_types(v) for k, v in value.items()}
    return value


def _param_from_json(value: Any) -> Any:
    if isinstance(value, dict) and set(value) == {"torch.dtype"}:
        dtype = getattr(torch, str(value["torch.dtype"]), None)
        if not isinstance(dtype, torch.dtype):
            raise ValueError(f"unknown torch dtype {value['torch.dtype']!r}")
        return dtype
    return _from_data(value)


def _from_data(value: Any) -> Any:
    """The value :func:`_as_data` stored: dicts of typed keys rebuilt from their pairs."""
    if isinstance(value, list):
        return [_from_data(v) for v in value]
    if isinstance(value, dict) and set(value) == {_ITEMS_TAG}:
        pairs = value[_ITEMS_TAG]
        if not isinstance(pairs, list) or not all(
            isinstance(p, list) and len(p) == 2 and type(p[0]) in _KEY_TYPES for p in pairs
        ):
            raise ValueError(f"{_ITEMS_TAG} must be [key, value] pairs of bool, int, float or str")
        return {key: _from_data(v) for key, v in pairs}
    if isinstance(value, dict):
        return {k: _from_data(v) for k, v in value.items()}
    return value


def _check_path(path: Path, verb: str) -> None:
    if path.suffix != SUFFIX:
        raise FitStateError(f"cannot {verb} the fit state {path}: the path must end with {SUFFIX}")
    if path.is_dir():
        raise FitStateError(
            f"cannot {verb} the fit state {path}: it is a directory; name a file ending with "
            f"{SUFFIX}"
        )


def write_fit_state(
    path: str | PathLike[str],
    *,
    estimator: str,
    record: FitRecord,
    settings: Mapping[str, Any],
    report_digests: Sequence[str],
    weights: Sequence[str],
) -> None:
    """Writes a fit state to ``path`` (a ``.tabpfn_fit`` file), atomically.

    Args:
        path: Where to write; its folder is created.
        estimator: The estimator's class name.
        record: The fit to store (its inputs and parameters).
        settings: The fitted ``settings_``.
        report_digests: The digest of each fitted patch report.
        weights: :func:`weights_digest` of each fitted model.

    Raises:
        FitStateError: A parameter or input that cannot be stored as data, or
            ``path`` is a directory.
    """
    path = Path(path)
    _check_path(path, "save")
    members: dict[str, bytes] = {}
    params = {
        name: _json_param(name, value)
        for name, value in record.params.items()
        if name not in ("model_path", "device")
    }
    random_state = params.get("random_state")
    if isinstance(random_state, bool) or not isinstance(random_state, int):
        raise FitStateError(
            f"cannot save the fit state to {path}: random_state={random_state!r} makes the "
            "fit unrepeatable; set random_state to an integer and fit again"
        )
    model_path = encode_model_path(record.params["model_path"], members)
    x_descriptor, x_members = encode_table(record.X, "X", what="X")
    y_descriptor, y_members = encode_table(record.y, "y", what="y")
    members.update(x_members)
    members.update(y_members)
    weights_descriptor = None
    if record.sample_weight is not None:
        weights_descriptor, weight_members = encode_table(
            record.sample_weight, "sample_weight", what="sample_weight"
        )
        members.update(weight_members)
    manifest = with_digests(
        {
            "format": FORMAT,
            "estimator": estimator,
            "params": params,
            "model_path": model_path,
            "X": x_descriptor,
            "y": y_descriptor,
            "sample_weight": weights_descriptor,
            "settings": dict(settings),
            "patch_report_digests": list(report_digests),
            "weights_sha256": list(weights),
            "versions": package_versions(_VERSIONED_PACKAGES),
        },
        members,
    )
    entries = {MANIFEST_NAME: json.dumps(manifest, indent=1, allow_nan=True).encode(), **members}
    stored = stored_members(entries)
    remove_abandoned_temporaries(path)
    try:
        with atomic_path(path) as tmp:
            with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as archive:
                for name, data in entries.items():
                    method = zipfile.ZIP_STORED if name in stored else zipfile.ZIP_DEFLATED
                    archive.writestr(name, data, compress_type=method)
            with zipfile.ZipFile(tmp) as archive:
                check_archive(tmp, archive)  # what a load will check first
    except IsADirectoryError as err:  # made a directory since the check above
        raise FitStateError(f"cannot save the fit state {path}: it is a directory") from err


def _check_entries(path: Path, archive: zipfile.ZipFile) -> list[str]:
    """The member names, once the directory shows nothing save_fit_state never writes."""
    check_archive(path, archive)  # before any member is read
    infos = archive.infolist()
    for info in infos:
        if info.compress_type not in _COMPRESSIONS or info.flag_bits & 0x1:
            raise FitStateError(
                f"{path}: {info.filename} is encrypted or compressed with zip method "
                f"{info.compress_type}, which save_fit_state never writes; refused unread"
            )
    names = [info.filename for info in infos]
    if len(set(names)) != len(names):
        raise FitStateError(f"{path} repeats a member name; save the fit state again")
    return names


def _read_members(path: Path) -> tuple[dict[str, Any], dict[str, bytes]]:
    """The manifest and the members it names, read from memory; anything else is refused."""
    try:
        with zipfile.ZipFile(path) as archive:
            names = _check_entries(path, archive)
            if MANIFEST_NAME not in names:
                if _TABPFN_MANIFEST in names:
                    raise FitStateError(
                        f"{path} is tabpfn's own fit state, whose fitted attributes load by "
                        "unpickling (running code); this library does not read it: load it with "
                        "tabpfn.TabPFNRegressor/TabPFNClassifier.load_from_fit_state only if you "
                        "trust its source, or fit again and save with this estimator"
                    )
                raise FitStateError(
                    f"{path} is not a fit state of this library (no {MANIFEST_NAME}); "
                    "save one with save_fit_state"
                )
            manifest = json.loads(archive.read(MANIFEST_NAME))
            if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
                found = manifest.get("format") if isinstance(manifest, dict) else None
                raise FitStateError(
                    f"{path} has format {found!r}, not {FORMAT!r}; save the fit state again "
                    "with this version"
                )
            expected = {MANIFEST_NAME, *model_members(manifest.get("model_path") or {})}
            for key in ("X", "y", "sample_weight"):
                member = (manifest.get(key) or {}).get("member")
                if member is not None:
                    expected.add(member)
            extra = sorted(set(names) - expected)
            if extra:
                raise FitStateError(
                    f"{path} holds {', '.join(extra)}, which a fit state of this library never "
                    "holds (left unread); save the fit state again"
                )
            missing = sorted(expected - set(names))
            if missing:
                raise FitStateError(
                    f"{path} lacks {', '.join(missing)}, which its manifest names; save the fit "
                    "state again"
                )
            members = {name: archive.read(name) for name in sorted(expected - {MANIFEST_NAME})}
    except (
        zipfile.BadZipFile,
        zlib.error,
        EOFError,
        json.JSONDecodeError,
        UnicodeDecodeError,
        KeyError,
        TypeError,
        AttributeError,
    ) as err:
        raise FitStateError(
            f"{path} is not a readable fit state ({type(err).__name__}: {str(err)[:120]}); "
            "save it again with save_fit_state"
        ) from err
    check_digests(str(path), manifest, members)
    return manifest, members


def read_fit_state(path: str | PathLike[str], *, estimator: str, which: str) -> SavedFit:
    """Reads a fit state written by :func:`write_fit_state` for the class ``estimator``.

    Args:
        path: The ``.tabpfn_fit`` file.
        estimator: The class name of the estimator loading it.
        which: ``"regressor"`` or ``"classifier"`` (the task a stored model is built for).

    Raises:
        FitStateError: The file is missing, foreign, past the size bounds, edited or
            damaged since it was saved (its digests), or of another class.
    """
    path = Path(path)
    _check_path(path, "load")
    if not path.is_file():
        raise FitStateError(f"no fit state at {path}; pass the file save_fit_state wrote")
    manifest, members = _read_members(path)
    saved_class = manifest.get("estimator")
    if saved_class != estimator:
        raise FitStateError(
            f"{path} holds a fit of {saved_class}, not {estimator}; load it with "
            f"{saved_class}.load_from_fit_state"
        )
    try:
        params = {
            name: _param_from_json(value)
            for name, value in manifest["params"].items()
            if name != "device"  # the loader's choice
        }
        params["model_path"] = decode_model_path(manifest["model_path"], members, which)
        settings = dict(manifest["settings"])
        digests = tuple(str(d) for d in manifest["patch_report_digests"])
        weights = tuple(str(d) for d in manifest["weights_sha256"])
    except FitStateError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError, RetrofitError) as err:
        raise FitStateError(
            f"{path}: a malformed or unusable entry ({type(err).__name__}: {str(err)[:160]}); "
            "save the fit state again"
        ) from err
    X = decode_table(dict(manifest.get("X") or {}), members, where=str(path))
    y = decode_table(dict(manifest.get("y") or {}), members, where=str(path))
    sample_weight = None
    if manifest.get("sample_weight") is not None:
        sample_weight = decode_table(dict(manifest["sample_weight"]), members, where=str(path))
    return SavedFit(params, X, y, settings, digests, weights, sample_weight)
