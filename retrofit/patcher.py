"""Patch a frozen TabPFN model in place with O-closed blocks, and undo it.

The patcher is architecture-agnostic: each host class has one patch table (a
:class:`HostPatcher` in ``retrofit/hosts/``, registered by class) that plans
the swaps. :func:`patch` plans every replacement first and commits them all at
once, so a model is never half-patched. Replacements share the original
parameters; the originals are kept outside the module tree, so ``state_dict``
keys do not change and :func:`unpatch` restores the very same objects.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from torch import nn

import retrofit.hosts  # noqa: F401 -- registers the shipped patch tables
from retrofit.errors import (
    AlreadyPatchedError,
    InvalidPatchConfigError,
    NothingMatchedError,
    NotPatchedError,
    UnsupportedArchitectureError,
)
from retrofit.hosts.common.base import (
    STATE_ATTR,
    PatchState,
    ReplacedModule,
    Swap,
    host_patcher_for,
    is_patched,
    patch_config_of,
    registered_host_patchers,
)
from retrofit.hosts.common.replacement import replacement_name
from retrofit.settings import (
    PATCH_MODES,
    Mode,
    RetrofitSettings,
    Support,
    check_given,
    resolve_settings,
)
from retrofit.tabpfn_surface import TABPFN_VERSION

__all__ = [
    "PatchReport",
    "patch",
    "patch_loaded_models",
    "patch_with_settings",
    "resolve_for_model",
    "unpatch",
]

_REPORT_ATTR = "retrofit_report"


@dataclasses.dataclass(frozen=True)
class PatchReport:
    """What a patch did, for provenance; also kept on the model as ``retrofit_report``."""

    host: str
    mode: str
    tau: float
    support: str
    eps_den: float
    modules: tuple[ReplacedModule, ...]
    tabpfn_version: str

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able dict of the report, with its digest."""
        data = dataclasses.asdict(self)
        data["modules"] = [dataclasses.asdict(m) for m in self.modules]
        data["digest"] = self.digest()
        return data

    def digest(self) -> str:
        """A short stable hash (16 hex characters) of everything in the report."""
        data = dataclasses.asdict(self)
        data["modules"] = [dataclasses.asdict(m) for m in self.modules]
        blob = json.dumps(data, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    @property
    def n_replaced(self) -> int:
        """Number of submodules swapped in the tree."""
        return sum(m.kind == "swap" for m in self.modules)

    def _settings_text(self) -> str:
        return (
            f"host={self.host!r}, mode={self.mode!r}, tau={self.tau!r}, "
            f"support={self.support!r}, eps_den={self.eps_den!r}"
        )

    def __repr__(self) -> str:
        """One short line: the settings, and the modules counted by kind (``str`` lists them).

        The dataclass's own repr spells every module and runs to ~900
        characters on one line for a v3 host.
        """
        kinds = Counter(m.kind for m in self.modules)
        counted = ", ".join(f"{n} {kind}" for kind, n in sorted(kinds.items()))
        return (
            f"PatchReport({self._settings_text()}, modules=<{len(self.modules)}: {counted}>, "
            f"tabpfn_version={self.tabpfn_version!r})"
        )

    def __str__(self) -> str:
        """The host and settings, then one line per module: kind, path, classes, parameters."""
        width = max((len(m.path or "(model)") for m in self.modules), default=0)
        lines = [
            f"PatchReport of {self.host} (tabpfn {self.tabpfn_version}, digest {self.digest()})",
            f"  mode {self.mode}, tau {self.tau}, support {self.support}, eps_den {self.eps_den}",
        ]
        for m in self.modules:
            lines.append(
                f"  {m.kind:<8} {m.path or '(model)':<{width}}  {m.old_class} -> {m.new_class}"
                f" ({m.shared_parameters:,} parameters shared)"
            )
        return "\n".join(lines)


def _shared_numel(params: Iterable[nn.Parameter]) -> int:
    return sum(p.numel() for p in {id(p): p for p in params}.values())


def _set_submodule(model: nn.Module, path: str, module: nn.Module) -> None:
    parent_path, _, name = path.rpartition(".")
    parent = model.get_submodule(parent_path) if parent_path else model
    # setattr on a ModuleList with a digit name replaces the entry in place.
    setattr(parent, name, module)


def resolve_for_model(
    model: nn.Module,
    requested: Mapping[str, Any],
    saved: Mapping[str, Any] | None = None,
    *,
    where: str = "the saved model",
    replace_saved: bool = False,
    given_checked: bool = False,
) -> RetrofitSettings:
    """The complete settings for ``model``, with the host facts read off the model.

    :func:`retrofit.settings.resolve_settings` with the host's class name and
    carrier scale (its patch table reads it off the weights). The one way from
    given settings to the settings a model is patched with: the estimator,
    :func:`patch`, ``predict``, ``predict-batch`` and ``patch`` use it.

    Args:
        model: The host model the settings are for.
        requested: Settings given by the caller (None: not given).
        saved: A saved directory's settings, or None.
        where: How to name the saved directory in an error message.
        replace_saved: Whether given settings may replace saved ones (``patch``).
        given_checked: Whether ``requested`` is
            :func:`~retrofit.settings.check_given`'s result (validated already).

    Raises:
        UnsupportedArchitectureError: ``model``'s class has no patch table.
        SettingsConflictError: A given setting differs from the saved one.
        InvalidPatchConfigError: A setting is out of range.
    """
    patcher = host_patcher_for(model)
    return resolve_settings(
        requested,
        saved,
        host=type(model).__name__,
        carrier_scale_ratio=patcher.carrier_scale_ratio(model),
        where=where,
        replace_saved=replace_saved,
        given_checked=given_checked,
    )


def patch(
    model: nn.Module,
    mode: Mode,
    *,
    tau: float | None = None,
    support: Support | None = None,
    eps_den: float | None = None,
) -> PatchReport:
    """Retrofits ``model`` in place with O-closed blocks.

    Every replacement is planned and built before the first one is committed,
    so a failure leaves the model untouched.

    Args:
        model: A supported TabPFN architecture (e.g. ``TabPFNV3``).
        mode: ``"oattention"`` or ``"full-o"``.
        tau: Presence temperature, ``> 0``; None: the host class's default
            (:data:`retrofit.settings.DEFAULT_TAU_BY_HOST`).
        support: ``"count"`` or ``"mass"``: the ``n_eff`` of the length
            scaling; None: ``"count"``.
        eps_den: OAttention denominator floor, ``>= 0``; None: 1e-6.

    Returns:
        The :class:`PatchReport`, also stored as ``model.retrofit_report``.

    Raises:
        InvalidPatchConfigError: On an unknown mode or support, or a bad tau/eps_den.
        AlreadyPatchedError: If ``model`` is patched already.
        UnsupportedArchitectureError: If ``model`` is not a module or its class
            has no patch table.
        NothingMatchedError: If the table found nothing to replace.
    """
    given = check_given(  # the one validation, before anything else
        {"mode": mode, "tau": tau, "support": support, "eps_den": eps_den}, modes=PATCH_MODES
    )
    _check_patchable(model)
    return patch_with_settings(model, resolve_for_model(model, given, given_checked=True))


def _check_patchable(model: nn.Module) -> None:
    if not isinstance(model, nn.Module):
        raise UnsupportedArchitectureError(
            f"patch needs a torch.nn.Module (a TabPFN architecture), got {type(model).__name__}"
        )
    if is_patched(model):
        digest = model.__dict__[STATE_ATTR].report.digest()
        raise AlreadyPatchedError(
            f"{type(model).__name__} is already patched (report {digest}); call unpatch first"
        )


def patch_with_settings(model: nn.Module, settings: RetrofitSettings) -> PatchReport:
    """:func:`patch`'s work, trusting ``settings`` (resolved and validated once).

    The internal step under every entry point: :func:`patch` and
    :func:`patch_loaded_models` validate and resolve the settings, then the
    blocks and O-modules built here take their values as checked.

    Args:
        model: A supported TabPFN architecture.
        settings: Resolved settings whose mode is one of :data:`PATCH_MODES`.

    Raises:
        AlreadyPatchedError: If ``model`` is patched already.
        UnsupportedArchitectureError: If ``model``'s class has no patch table.
        NothingMatchedError: If the table found nothing to replace.
    """
    _check_patchable(model)
    patcher = host_patcher_for(model)
    config = settings.patch_config()
    if config is None:
        raise InvalidPatchConfigError(
            f"mode 'none' applies no patch; mode must be one of {', '.join(PATCH_MODES)}"
        )
    swaps = patcher.plan(model, config)
    if not swaps:
        raise NothingMatchedError(f"the {type(model).__name__} patch table matched no module")

    entries = [
        ReplacedModule(
            path=s.path,
            old_class=type(s.original).__name__,
            new_class=replacement_name(s.replacement),
            shared_parameters=_shared_numel(s.replacement.parameters()),
        )
        for s in swaps
    ]
    entries += patcher.overrides(model, config)
    report = PatchReport(
        host=type(model).__name__,
        mode=config.mode,
        tau=config.tau,
        support=config.support,
        eps_den=config.eps_den,
        modules=tuple(entries),
        tabpfn_version=TABPFN_VERSION,
    )
    frozen = [p for s in swaps for p in s.replacement.parameters()]
    frozen += patcher.frozen_parameters(model, config)
    frozen = list({id(p): p for p in frozen}.values())
    state = PatchState(
        config=config,
        report=report,
        host_class=type(model),
        originals=[(s.path, s.original) for s in swaps],
        requires_grad=[(p, p.requires_grad) for p in frozen],
    )

    # Commit: plain attribute assignments; undone on any error.
    committed: list[Swap] = []
    try:
        for s in swaps:
            _set_submodule(model, s.path, s.replacement)
            committed.append(s)
        model.__dict__[STATE_ATTR] = state
        patcher.attach(model, config)
    except BaseException:
        for s in reversed(committed):
            _set_submodule(model, s.path, s.original)
        model.__dict__.pop(STATE_ATTR, None)
        raise
    for p, _ in state.requires_grad:
        p.requires_grad_(False)
    model.__dict__[_REPORT_ATTR] = report
    return report


def patch_loaded_models(
    models: list[nn.Module],
    given: Mapping[str, Any],
    saved: Mapping[str, Any] | None,
    *,
    where: str,
    copy_first: bool,
) -> tuple[list[nn.Module], list[RetrofitSettings], list[PatchReport]]:
    """Resolve, copy if shared, patch: the one sequence for models a loader just built.

    Used by the estimators' fit, whether their patched host is kept between
    fits (:mod:`retrofit.models.patched_host`) or loaded at every fit.

    Args:
        models: The models as loaded.
        given: The caller's settings, validated by
            :func:`~retrofit.settings.check_given`.
        saved: A saved directory's settings, or None.
        where: How to name the saved directory in a settings error.
        copy_first: Whether the models are shared (tabpfn's built-model cache,
            a caller's ``ModelSpecs``), so the patch goes to deep copies.

    Returns:
        The models (copies where ``copy_first``; unpatched for ``mode="none"``;
        a model patched already as it is, with its own report), one resolved
        settings object each, and the patch reports (none for ``mode="none"``).

    Raises:
        SettingsConflictError: A given setting differs from a saved directory's
            or from the patch of a model patched already.
    """
    # One resolution per model: an unset tau is each host class's default. A model
    # the caller patched already keeps its patch, whose settings are then the saved
    # ones; with mode="none" it runs as given, as tabpfn runs a ModelSpecs.
    carried = [is_patched(model) and given.get("mode") != "none" for model in models]
    settings = [
        resolve_settings(
            given,
            patch_config_of(model).to_dict(),
            where=f"the {type(model).__name__} in model_path (patched already; unpatch it first)",
            given_checked=True,
        )
        if keeps_patch
        else resolve_for_model(model, given, saved, where=where, given_checked=True)
        for model, keeps_patch in zip(models, carried, strict=True)
    ]
    if settings[0].mode == "none":
        return list(models), settings, []
    if copy_first:
        models = [m if keep else copy.deepcopy(m) for m, keep in zip(models, carried, strict=True)]
    reports = [
        model.__dict__[STATE_ATTR].report if keep else patch_with_settings(model, s)
        for model, s, keep in zip(models, settings, carried, strict=True)
    ]
    return list(models), settings, reports


def unpatch(model: nn.Module) -> PatchReport:
    """Undoes :func:`patch`: the original modules and class come back.

    Returns:
        The report of the patch that was removed.

    Raises:
        NotPatchedError: If ``model`` is not patched.
    """
    if not is_patched(model):
        raise NotPatchedError(f"{type(model).__name__} is not patched; nothing to undo")
    state: PatchState = model.__dict__[STATE_ATTR]
    registered_host_patchers()[state.host_class].detach(model)
    for path, original in state.originals:
        _set_submodule(model, path, original)
    for p, flag in state.requires_grad:
        p.requires_grad_(flag)
    del model.__dict__[STATE_ATTR]
    model.__dict__.pop(_REPORT_ATTR, None)
    return state.report
