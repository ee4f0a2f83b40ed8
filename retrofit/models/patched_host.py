"""The patched host an estimator keeps between fits: loaded, verified and patched once.

tabpfn builds its model again at every ``fit`` (from a checkpoint cached in
memory). A patched estimator that did the same would also verify and patch the
host at every fit, which in a loop of many small fits is a sixth of the time.
:class:`PatchedHostCache` keeps one estimator's patched host instead:

* **Loaded once per key.** The key is what the host depends on: the checkpoint
  files (each with its :func:`~retrofit.files.file_identity`, so a rewritten
  file is loaded and verified again), the estimator type and the requested and
  saved settings (``set_params`` of either makes a new key). The host is built
  by tabpfn's own ``initialize_tabpfn_model`` (its loader, errors and CPU row
  limit), copied where tabpfn's built-model cache shares it, then patched.
* **Never shared where tabpfn changes it.** Each fit gets the host through
  ``ModelSpecs``, which tabpfn uses by reference, with its own copy of the
  criterion and configs (``estimator.to`` moves the criterion in place). The
  fit keeps the host's models themselves only where tabpfn leaves them as they
  are (:meth:`PatchedHost.models_for_fit`); a forced dtype that differs from a
  tensor's, or a device other than the host's, gets the fit a private copy.
* **Checked at every fit.** A snapshot of the models (their module tree and
  patch state, and each tensor's storage, dtype, device and version counter)
  is compared first: anything that changed the host in place (training,
  ``estimator.to``, ``unpatch``, a cast by an estimator it was handed to)
  makes the next fit load it again.

``mode="none"`` has no entry: it is tabpfn, loaded as tabpfn loads it.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import torch
from tabpfn import ModelSpecs
from tabpfn.base import initialize_tabpfn_model
from torch import nn

from retrofit.files import file_identity
from retrofit.hosts.common.base import STATE_ATTR
from retrofit.models.loading import ResolvedModel
from retrofit.patcher import PatchReport, patch_loaded_models
from retrofit.settings import SETTING_NAMES, RetrofitSettings, resolved_mode
from retrofit.tabpfn_surface import models_may_be_shared

__all__ = ["PatchedHost", "PatchedHostCache", "host_key"]

EstimatorType = Literal["regressor", "classifier"]


@dataclasses.dataclass(frozen=True, eq=False)
class _Snapshot:
    """What in-place changes to a set of models move: objects by identity, state by value.

    Taken at every fit of a kept host, so it walks each module tree once and
    reads each module's own tensors: ``parameters()`` and ``buffers()`` would
    walk the tree again each, through nested generators (with the tensor scan
    of :meth:`PatchedHost.models_for_fit`, 1.5 % of a small fit; now 0.4 %).

    Attributes:
        objects: The patch state, modules and tensors, in walk order.
        values: Each module's ``training`` flag and each tensor's storage,
            dtype, device and version counter.
        tensor_kinds: The (dtype, device) pairs of the tensors.
    """

    objects: tuple[Any, ...]
    values: tuple[Any, ...]
    tensor_kinds: frozenset[tuple[torch.dtype, torch.device]]

    @classmethod
    def of(cls, models: Sequence[nn.Module]) -> _Snapshot:
        objects: list[Any] = []
        values: list[Any] = []
        kinds: set[tuple[torch.dtype, torch.device]] = set()
        for model in models:
            objects.append(model.__dict__.get(STATE_ATTR))
            for module in model.modules():
                objects.append(module)
                values.append(module.training)
                for tensor in itertools.chain(
                    module._parameters.values(), module._buffers.values()
                ):
                    if tensor is None:  # a registered slot left empty (bias=False)
                        continue
                    objects.append(tensor)
                    # The version counter moves with every in-place write (an optimizer
                    # step, copy_ under no_grad); a cast or a move replaces the storage.
                    values.append((tensor.data_ptr(), tensor.dtype, tensor.device, tensor._version))
                    kinds.add((tensor.dtype, tensor.device))
        return cls(tuple(objects), tuple(values), frozenset(kinds))

    def same_as(self, other: _Snapshot) -> bool:
        return (
            len(self.objects) == len(other.objects)
            and all(a is b for a, b in zip(self.objects, other.objects, strict=True))
            and self.values == other.values
        )


@dataclasses.dataclass(frozen=True, eq=False)
class PatchedHost:
    """One loaded, verified and patched host, and what its fits need from it.

    Attributes:
        key: What it was loaded from (:func:`host_key`).
        models: The patched models, pristine; a fit holds them only where tabpfn
            leaves them unchanged.
        architecture_configs: One per model.
        inference_config: The checkpoint's, with tabpfn's CPU row limit.
        criteria: One regression distribution per model (None for a classifier).
        settings: The resolved settings of each model.
        reports: The patch report of each model.
        digests: Each report's digest (a saved directory's is checked at every fit).
    """

    key: tuple[Any, ...]
    models: tuple[nn.Module, ...]
    architecture_configs: tuple[Any, ...]
    inference_config: Any
    criteria: tuple[Any, ...]
    settings: tuple[RetrofitSettings, ...]
    reports: tuple[PatchReport, ...]
    digests: tuple[str, ...]
    snapshot: _Snapshot

    def is_pristine(self) -> bool:
        """Whether nothing changed the models since they were patched."""
        return self.snapshot.same_as(_Snapshot.of(self.models))

    def model_path(self, as_list: bool) -> ModelSpecs | list[ModelSpecs]:
        """The ``model_path`` tabpfn gets for one fit: the models, own criteria and configs."""
        specs = [
            ModelSpecs(
                model=model,
                architecture_config=copy.deepcopy(config),
                inference_config=self.inference_config,
                norm_criterion=copy.deepcopy(criterion),
            )
            for model, config, criterion in zip(
                self.models, self.architecture_configs, self.criteria, strict=True
            )
        ]
        return specs if as_list else specs[0]

    def models_for_fit(
        self, devices: Sequence[torch.device], forced_dtype: torch.dtype | None
    ) -> list[nn.Module]:
        """The models a fit on ``devices`` with ``forced_dtype`` holds.

        tabpfn casts every tensor of a model to a forced inference dtype in place
        (``model.type``) and moves it to its devices in place; where either would
        change a tensor of the host, the fit gets a deep copy of its own.
        """
        targets = {torch.device(d) for d in devices}
        # The host's tensors are those of its snapshot: host_for checked it is
        # pristine for this fit, and tabpfn's loading has not touched them yet.
        changed = len(targets) != 1 or any(
            (forced_dtype is not None and dtype != forced_dtype) or device not in targets
            for dtype, device in self.snapshot.tensor_kinds
        )
        if changed:
            return [copy.deepcopy(model) for model in self.models]
        return list(self.models)


def host_key(
    resolved: ResolvedModel,
    requested: Mapping[str, Any],
    saved: Mapping[str, Any] | None,
    *,
    estimator_type: EstimatorType,
) -> tuple[Any, ...] | None:
    """What a patched host loaded for ``resolved`` depends on; None where it cannot be kept.

    Kept: checkpoint files that exist (their path, inode, size and times). Not
    kept: in-memory ``ModelSpecs`` (the caller's, which may change under us)
    and names tabpfn has yet to download; those load at every fit, as before.
    """
    if resolved.by_reference:
        return None
    paths = resolved.entries
    if not all(isinstance(p, Path) and p.is_file() for p in paths):
        return None
    return (
        estimator_type,
        tuple(str(p) for p in paths),
        tuple(file_identity(p) for p in paths),
        tuple(requested.get(name) for name in SETTING_NAMES),
        None if saved is None else tuple(saved[name] for name in SETTING_NAMES),
    )


def _load_patched_host(
    key: tuple[Any, ...],
    requested: Mapping[str, Any],
    saved: Mapping[str, Any] | None,
    *,
    estimator_type: EstimatorType,
    where: str,
) -> PatchedHost:
    # One load per file, as a single path: tabpfn's checks across several models
    # (equal borders and configs, with the user's overrides) run at each fit instead.
    loaded = [initialize_tabpfn_model(model_path=p, which=estimator_type) for p in key[1]]
    models, settings, reports = patch_loaded_models(
        [model for models, *_ in loaded for model in models],
        requested,
        saved,
        where=where,
        # TABPFN_MODEL_CACHE_SIZE shares built models between loads; a patch must not be.
        copy_first=models_may_be_shared(),
    )
    return PatchedHost(
        key=key,
        models=tuple(models),
        architecture_configs=tuple(c for _, configs, _, _ in loaded for c in configs),
        inference_config=loaded[0][3],
        criteria=tuple(criterion for _, _, criterion, _ in loaded),
        settings=tuple(settings),
        reports=tuple(reports),
        digests=tuple(r.digest() for r in reports),
        snapshot=_Snapshot.of(models),
    )


class PatchedHostCache:
    """One estimator's patched host between its fits: the last key's, while pristine."""

    def __init__(self) -> None:
        self._host: PatchedHost | None = None

    def host_for(
        self,
        resolved: ResolvedModel,
        requested: Mapping[str, Any],
        saved: Mapping[str, Any] | None,
        *,
        estimator_type: EstimatorType,
        where: str,
    ) -> PatchedHost | None:
        """The patched host for a fit, loaded only when the key or the models changed.

        Args:
            resolved: The estimator's ``model_path``, resolved.
            requested: The settings given to the estimator (None: not given).
            saved: The saved directories' settings, or None.
            estimator_type: tabpfn's ``"regressor"`` or ``"classifier"``.
            where: How to name a saved directory in a settings error.

        Returns:
            The host, or None where tabpfn loads the model at every fit:
            ``mode="none"``, in-memory models, files not yet downloaded.
        """
        if resolved_mode(requested, saved) == "none":
            return None
        key = host_key(resolved, requested, saved, estimator_type=estimator_type)
        if key is None:
            self._host = None
            return None
        host = self._host
        if host is None or host.key != key or not host.is_pristine():
            self._host = None  # a failed load leaves nothing stale behind
            host = _load_patched_host(
                key, requested, saved, estimator_type=estimator_type, where=where
            )
            self._host = host
        return host
