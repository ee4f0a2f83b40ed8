"""The host contract: what a patch table and an ICL stage are, their registries.

A patch table (a :class:`HostPatcher` subclass in ``retrofit/hosts/``) plans
the swaps for one host class and registers itself here by class; the patcher
(:mod:`retrofit.patcher`) looks tables up and commits their plans. A patched
model keeps its settings, report and originals outside its module tree
(:func:`is_patched`, :func:`patch_config_of`). The tables import this module,
never the patcher, so the import graph has no cycle.

A host whose patched ICL stage is closed may also register an :class:`ICLStage`
(:func:`register_icl_stage`): the split of its forward at which
:mod:`retrofit.batching` pads ragged datasets. Each registry holds one entry per
host class and refuses a second.

Shape letters: B batch elements, R rows (key rows, then test rows), M test
rows, D ICL width (``...`` for v2's per-cell carriers ``(C, D)``), O decoder
outputs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from typing import Any, ClassVar, Literal, Protocol

import torch
from torch import nn

from retrofit.errors import DuplicateHostError, NotPatchedError, UnsupportedArchitectureError
from retrofit.settings import PatchConfig

__all__ = [
    "STATE_ATTR",
    "HostPatcher",
    "ICLStage",
    "PatchState",
    "ReplacedModule",
    "Swap",
    "decodes_classes",
    "host_patcher_for",
    "icl_stage_for",
    "is_patched",
    "patch_config_of",
    "register_host_patcher",
    "register_icl_stage",
    "registered_host_patchers",
    "runs_blocks_to_test_rows",
    "supports_padded_icl",
    "swap_each",
]

#: Where a patched model keeps its :class:`PatchState` (in ``__dict__``, not a submodule).
STATE_ATTR = "_retrofit_state"


@dataclasses.dataclass(frozen=True)
class ReplacedModule:
    """One entry of a :class:`PatchReport`.

    Attributes:
        path: Where in the model, e.g. ``icl_blocks.3`` (``""`` is the model).
        old_class: Class name before the patch.
        new_class: Class name after it.
        shared_parameters: Number of parameter elements the replacement shares
            with the original (no copies are made).
        kind: ``"swap"`` (a submodule replaced in the tree), ``"override"`` (an
            inline host computation gated through a method override) or
            ``"class"`` (the model's class swapped for a subclass).
    """

    path: str
    old_class: str
    new_class: str
    shared_parameters: int
    kind: Literal["swap", "override", "class"] = "swap"


@dataclasses.dataclass
class Swap:
    """A planned replacement of the submodule at ``path``."""

    path: str
    original: nn.Module
    replacement: nn.Module


class HostPatcher:
    """The patch table of one host class; subclasses live in ``retrofit/hosts/``.

    A subclass names its ``host_class``, plans the swaps (building every
    replacement, touching nothing), and may attach and detach model-level
    overrides (for inline host computations that are not submodules).
    """

    host_class: ClassVar[type[nn.Module]]
    #: Whether the patched host honours :func:`retrofit.hosts.common.row_presence.row_presence`.
    closes_input_rows: ClassVar[bool] = False

    def plan(self, model: nn.Module, config: PatchConfig) -> list[Swap]:
        """Builds every replacement for ``model``; must not modify it."""
        raise NotImplementedError

    def carrier_scale_ratio(self, model: nn.Module) -> float:
        """``model``'s carrier scale over the calibrated one (see ``settings.default_tau``).

        1 except for hosts whose carrier norm follows learned weights
        (:data:`retrofit.settings.NORM_WEIGHTED_TAU_HOSTS`).
        """
        return 1.0

    def overrides(self, model: nn.Module, config: PatchConfig) -> list[ReplacedModule]:
        """Report entries for the model-level overrides :meth:`attach` installs."""
        return []

    def frozen_parameters(self, model: nn.Module, config: PatchConfig) -> list[nn.Parameter]:
        """Parameters outside the swapped modules that the patch reads (frozen too)."""
        return []

    def attach(self, model: nn.Module, config: PatchConfig) -> None:
        """Installs model-level overrides; called after the swaps are committed."""

    def detach(self, model: nn.Module) -> None:
        """Removes what :meth:`attach` installed."""


def swap_each(
    modules: Iterable[nn.Module], prefix: str, build: Callable[[nn.Module, str], nn.Module]
) -> list[Swap]:
    """One :class:`Swap` per module of a block list: ``build(module, path)`` replaces it.

    The loop every table's :meth:`HostPatcher.plan` runs over its host's blocks
    (paths ``prefix.0``, ``prefix.1``, ...); ``build`` may raise to refuse one.
    """
    swaps = []
    for i, module in enumerate(modules):
        path = f"{prefix}.{i}"
        swaps.append(Swap(path=path, original=module, replacement=build(module, path)))
    return swaps


_HOST_PATCHERS: dict[type[nn.Module], HostPatcher] = {}


def register_host_patcher(patcher: HostPatcher) -> HostPatcher:
    """Registers the patch table of ``patcher.host_class`` (exact class match).

    Raises:
        DuplicateHostError: If that class has a patch table already.
    """
    if patcher.host_class in _HOST_PATCHERS:
        raise DuplicateHostError(f"{patcher.host_class.__name__} has a patch table already")
    _HOST_PATCHERS[patcher.host_class] = patcher
    return patcher


def host_patcher_for(model: nn.Module) -> HostPatcher:
    """The patch table for ``model``'s exact class (a patched model's: its host class's).

    Raises:
        UnsupportedArchitectureError: If the class (not a subclass) has no table.
    """
    state = model.__dict__.get(STATE_ATTR) if isinstance(model, nn.Module) else None
    host_class = state.host_class if isinstance(state, PatchState) else type(model)
    patcher = _HOST_PATCHERS.get(host_class)
    if patcher is None:
        supported = ", ".join(sorted(c.__name__ for c in _HOST_PATCHERS)) or "none"
        raise UnsupportedArchitectureError(
            f"no retrofit patch table for {type(model).__module__}.{type(model).__qualname__} "
            f"(supported: {supported})"
        )
    return patcher


def registered_host_patchers() -> dict[type[nn.Module], HostPatcher]:
    """Every registered table, by host class."""
    return dict(_HOST_PATCHERS)


class ICLStage(Protocol):
    """A host's ICL stage, split where the padded batch runs.

    ``embed`` runs everything before the ICL blocks for one dataset exactly as
    the host's ``forward`` does (returning the carriers with the train target
    already injected; ``task_type``, tabpfn's ``"regression"`` or
    ``"multiclass"``, among its keyword arguments); ``run_blocks`` runs the
    patched ICL blocks; ``decode`` maps the test rows' carriers to the host's
    regression output. A stage that classifies also has ``decode_classes``
    (the class logits, from a dataset's own key rows, test rows and train
    labels: v3's decoder reads the train rows), which ragged
    ``predict_proba_batched`` requires. A stage may also have
    ``run_blocks_to_test_rows`` (:func:`runs_blocks_to_test_rows`): the test
    rows' carriers after the blocks, ``(B, M, ...)``, with the last block run
    for them alone, which the padded path takes when only test rows are decoded.

    The carriers end in the dataset's test rows, one carrier row per test row;
    every row before them is a key row (the train rows, and rows a host adds
    to them, such as v2.5's thinking rows): :func:`key_rows`.
    """

    def embed(
        self, model: nn.Module, x_RBC: torch.Tensor, y_N: torch.Tensor, **forward_kwargs: Any
    ) -> torch.Tensor:
        """ICL carriers ``(B, R, ...)``, key rows first, target injected."""
        ...

    def run_blocks(
        self, model: nn.Module, x_BRD: torch.Tensor, num_train: int, **forward_kwargs: Any
    ) -> torch.Tensor:
        """The ICL blocks over ``x_BRD`` (``(B, R, ...)``) with ``num_train`` key rows."""
        ...

    def decode(self, model: nn.Module, x_BMD: torch.Tensor) -> torch.Tensor:
        """The host's output ``(M, B, O)`` for test carriers ``(B, M, ...)``."""
        ...


def decodes_classes(stage: ICLStage) -> bool:
    """Whether ``stage`` has ``decode_classes`` (see :class:`ICLStage`)."""
    return callable(getattr(stage, "decode_classes", None))


def runs_blocks_to_test_rows(stage: ICLStage) -> bool:
    """Whether ``stage`` has ``run_blocks_to_test_rows`` (see :class:`ICLStage`)."""
    return callable(getattr(stage, "run_blocks_to_test_rows", None))


_ICL_STAGES: dict[type[nn.Module], ICLStage] = {}


def register_icl_stage(host_class: type[nn.Module], stage: ICLStage) -> ICLStage:
    """Registers ``stage`` for patched models of exactly ``host_class``.

    Raises:
        DuplicateHostError: If ``host_class`` has a stage already.
    """
    if host_class in _ICL_STAGES:
        raise DuplicateHostError(f"{host_class.__name__} has a null-padded ICL stage already")
    _ICL_STAGES[host_class] = stage
    return stage


def supports_padded_icl(model: nn.Module) -> bool:
    """Whether ``model`` is patched and its exact class has a registered :class:`ICLStage`."""
    return type(model) in _ICL_STAGES and is_patched(model)


def icl_stage_for(model: nn.Module) -> ICLStage:
    """The registered :class:`ICLStage` of ``model``'s exact class.

    Raises:
        UnsupportedArchitectureError: If there is none, or ``model`` is not patched.
    """
    stage = _ICL_STAGES.get(type(model))
    if stage is None:
        known = ", ".join(sorted({c.__name__ for c in _ICL_STAGES})) or "none"
        raise UnsupportedArchitectureError(
            f"{type(model).__name__} has no null-padded ICL stage (hosts with one: {known})"
        )
    if not is_patched(model):
        raise UnsupportedArchitectureError(
            f"{type(model).__name__} is not patched, so it has no null-padded ICL stage: "
            "zero padding is exact only where the retrofit closes the ICL stage"
        )
    return stage


@dataclasses.dataclass
class PatchState:
    """Kept on a patched model, outside its module tree."""

    config: PatchConfig
    report: Any  # retrofit.patcher.PatchReport
    host_class: type[nn.Module]
    originals: list[tuple[str, nn.Module]]
    requires_grad: list[tuple[nn.Parameter, bool]]


def is_patched(model: nn.Module) -> bool:
    """Whether ``model`` carries a retrofit patch (False for anything not a module)."""
    return isinstance(model, nn.Module) and isinstance(model.__dict__.get(STATE_ATTR), PatchState)


def patch_config_of(model: nn.Module) -> PatchConfig:
    """The settings ``model`` was patched with.

    Raises:
        NotPatchedError: If it is not patched.
    """
    if not is_patched(model):
        raise NotPatchedError(f"{type(model).__name__} is not patched")
    return model.__dict__[STATE_ATTR].config
