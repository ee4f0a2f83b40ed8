"""The retrofit's settings: their names, allowed values, defaults and validation.

One vocabulary for the patcher, the estimator, saved directories, the command
line and the evaluation runner:

* :data:`MODES` are what a user may ask for (``"none"`` is the unpatched host
  on the same code path); :data:`PATCH_MODES` are what :func:`retrofit.patch`
  applies.
* :class:`RetrofitSettings` validates one complete set (every mode, ``"none"``
  included, so a bad ``tau`` is refused before anything is fitted);
  :class:`PatchConfig` is the same set restricted to a patching mode.
* :func:`resolve_settings` applies the precedence rule, for every entry point:
  explicit settings, else a saved directory's, else the host class's default
  tau (:func:`default_tau`) and :data:`DEFAULT_SETTINGS`; an explicit setting
  that contradicts a saved one is an error.
* :data:`DEFAULT_TAU_BY_HOST` is the presence temperature an unset ``tau``
  means, per host class (:func:`default_tau`).
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Mapping
from typing import Any, ClassVar, Literal, Self

import torch

from patches.presence import check_tau
from retrofit.errors import InvalidPatchConfigError, SettingsConflictError

__all__ = [
    "DEFAULT_QUANTILES",
    "DEFAULT_SETTINGS",
    "DEFAULT_TAU_BY_HOST",
    "MODES",
    "NORM_WEIGHTED_TAU_HOSTS",
    "PATCH_MODES",
    "SETTING_NAMES",
    "SUPPORTS",
    "TAU_RANGE",
    "PatchConfig",
    "RetrofitSettings",
    "check_given",
    "default_tau",
    "resolve_settings",
    "resolved_mode",
]

Mode = Literal["oattention", "full-o"]
Support = Literal["count", "mass"]

#: The quantiles ``predict`` returns for ``output_type="quantiles"`` when none are given
#: (tabpfn's default), for both commands and ``predict_batched``.
DEFAULT_QUANTILES: tuple[float, ...] = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)

#: Modes :func:`retrofit.patch` applies.
PATCH_MODES: tuple[str, ...] = ("oattention", "full-o")
#: Modes a user may ask for; ``"none"`` runs the unpatched host on the same code path.
MODES: tuple[str, ...] = ("none", *PATCH_MODES)
#: How ``n_eff`` for the learned length scaling is counted.
SUPPORTS: tuple[str, ...] = ("count", "mass")
#: The settings, in :func:`retrofit.patch`'s names.
SETTING_NAMES: tuple[str, ...] = ("mode", "tau", "support", "eps_den")
#: What an unset setting means, unless a saved directory says otherwise; an unset
#: ``tau`` means the host class's default (:func:`default_tau`), and this ``tau`` is
#: that default only for a class without a calibrated one (and the paper's, for v3).
DEFAULT_SETTINGS: Mapping[str, Any] = {
    "mode": "full-o",
    "tau": 1.0,
    "support": "count",
    "eps_den": 1e-6,
}

#: The default presence temperature of each host class (used when ``tau`` is None).
#: Chosen with ``python -m lab calibration`` on random weights at each class's
#: published config (the published weights cannot be downloaded offline): the
#: largest power of ten at which both modes move the output logits by at most
#: 0.2 % (relative L2; the movement at each default and the carrier norms behind
#: it are in ``docs/hosts.md``). The post-norm v2 family's carriers are smaller
#: than the v3 family's, hence the smaller tau; v3 keeps the 1.0 of the paper and
#: of the embedded host's stored results.
DEFAULT_TAU_BY_HOST: Mapping[str, float] = {
    "TabPFNV2": 0.1,
    "TabPFNV2p5": 0.1,
    "TabPFNV2p6": 0.1,
    "TabPFNV3": 1.0,
    "TabPFNV3p5": 1.0,
}
#: Hosts whose carrier norm follows a learned norm weight (v2.6's RMSNorm: the
#: carrier entering the between-items attention has ``||h||^2`` of about
#: ``||gamma||^2``, not ``E``): their default is ``DEFAULT_TAU_BY_HOST[host]``
#: times the carrier-scale ratio ``min over blocks ||gamma||^2 / E`` the host's
#: patch table reads off the weights (1 at tabpfn's initialisation).
NORM_WEIGHTED_TAU_HOSTS: tuple[str, ...] = ("TabPFNV2p6",)


def default_tau(host: str, carrier_scale_ratio: float = 1.0) -> float:
    """The default presence temperature of host class ``host``.

    Args:
        host: The class name (``"TabPFNV3p5"``, ...).
        carrier_scale_ratio: For :data:`NORM_WEIGHTED_TAU_HOSTS`, the ratio of the
            host's carrier scale to the one the default was calibrated at.

    Returns:
        ``DEFAULT_TAU_BY_HOST[host]`` (times the ratio where it applies), or
        ``DEFAULT_SETTINGS["tau"]`` for a class without a calibrated default.

    Raises:
        InvalidPatchConfigError: If the ratio is not a finite number > 0.
    """
    base = DEFAULT_TAU_BY_HOST.get(host, DEFAULT_SETTINGS["tau"])
    if host not in NORM_WEIGHTED_TAU_HOSTS:
        return float(base)
    ratio = float(carrier_scale_ratio)
    if not math.isfinite(ratio) or ratio <= 0:
        raise InvalidPatchConfigError(
            f"{host}: carrier scale ratio must be a finite number > 0, got {ratio!r}"
        )
    return _checked_tau(base * ratio)


#: The taus a retrofit accepts: the normal float32 numbers. Presence is exact
#: for any finite tau > 0 in every dtype (see :func:`patches.presence`), but a
#: tau beyond this range gives every ordinary carrier a presence of about
#: ``||h||^2 / tau`` below float32's smallest normal number (all-null), or of
#: 1 for every non-zero one: no setting a user means.
TAU_RANGE: tuple[float, float] = (2.0**-126, float(torch.finfo(torch.float32).max))


def _checked_tau(tau: Any) -> float:
    if isinstance(tau, numbers.Real) and not isinstance(tau, bool):
        tau = float(tau)  # numpy scalars, ints
    try:
        tau = check_tau(tau)
    except ValueError as err:
        raise InvalidPatchConfigError(str(err)) from None
    lo, hi = TAU_RANGE
    if not lo <= tau <= hi:
        raise InvalidPatchConfigError(
            f"tau must lie in [{lo:.4g}, {hi:.4g}] (the normal float32 numbers presence is "
            f"computed in), got {tau!r}"
        )
    return tau


def _checked_eps_den(eps: Any) -> float:
    if isinstance(eps, bool) or not isinstance(eps, numbers.Real) or not math.isfinite(eps):
        raise InvalidPatchConfigError(f"eps_den must be a finite number >= 0, got {eps!r}")
    if eps < 0:
        raise InvalidPatchConfigError(f"eps_den must be a finite number >= 0, got {eps!r}")
    return float(eps)


def _check_choice(name: str, value: Any, allowed: tuple[str, ...]) -> None:
    if not isinstance(value, str) or value not in allowed:
        raise InvalidPatchConfigError(
            f"unknown {name} {value!r}; {name} must be one of {', '.join(allowed)}"
        )


def check_given(requested: Mapping[str, Any], *, modes: tuple[str, ...] = MODES) -> dict[str, Any]:
    """Validates the settings a caller gave (``None`` means not given), before any work.

    The one validation of given settings: each public entry point (``patch``,
    the estimators' ``fit``, the commands) calls it once and hands the result
    on as checked (:func:`resolve_settings`'s ``given_checked``).

    Args:
        requested: The settings by name.
        modes: The modes allowed (:data:`PATCH_MODES` where a patch is applied).

    Returns:
        The given settings in :data:`SETTING_NAMES` order, ``tau`` and
        ``eps_den`` as floats (None: not given).

    Raises:
        InvalidPatchConfigError: A given setting is out of range.
    """
    checks = {
        "mode": lambda v: _check_choice("mode", v, modes) or v,
        "tau": _checked_tau,
        "support": lambda v: _check_choice("support", v, SUPPORTS) or v,
        "eps_den": _checked_eps_den,
    }
    return {
        name: None if requested.get(name) is None else check(requested[name])
        for name, check in checks.items()
    }


@dataclasses.dataclass(frozen=True)
class RetrofitSettings:
    """One complete, validated set of retrofit settings.

    Attributes:
        mode: One of :data:`MODES`.
        tau: Presence temperature, in :data:`TAU_RANGE`.
        support: One of :data:`SUPPORTS`.
        eps_den: OAttention's denominator floor, ``>= 0``.
    """

    mode: str
    tau: float
    support: str = "count"
    eps_den: float = 1e-6

    allowed_modes: ClassVar[tuple[str, ...]] = MODES

    def __post_init__(self) -> None:
        _check_choice("mode", self.mode, self.allowed_modes)
        object.__setattr__(self, "tau", _checked_tau(self.tau))
        _check_choice("support", self.support, SUPPORTS)
        object.__setattr__(self, "eps_den", _checked_eps_den(self.eps_den))

    @classmethod
    def _of_checked(cls, values: Mapping[str, Any]) -> Self:
        """Settings from values validated already, built without checking them again.

        The values come from :func:`check_given`, a saved directory's reader or
        :func:`default_tau` (:func:`resolve_settings`).
        """
        settings = object.__new__(cls)
        for name in SETTING_NAMES:
            object.__setattr__(settings, name, values[name])
        return settings

    def to_dict(self) -> dict[str, Any]:
        """The settings as a plain dict in :data:`SETTING_NAMES` order."""
        return {name: getattr(self, name) for name in SETTING_NAMES}

    def patch_config(self) -> PatchConfig | None:
        """The :class:`PatchConfig` these settings apply, None for ``mode="none"``."""
        if self.mode == "none":
            return None
        return PatchConfig._of_checked(self.to_dict())


@dataclasses.dataclass(frozen=True)
class PatchConfig(RetrofitSettings):
    """Validated settings of one patch (``mode`` is one of :data:`PATCH_MODES`).

    Attributes:
        mode: ``"oattention"`` (attention and its length scaling only) or
            ``"full-o"`` (also OFFN, ONorm and OInject of the target embedding).
        tau: Presence temperature, in :data:`TAU_RANGE`.
        support: ``n_eff`` fed to the learned length scaling: ``"count"`` (number
            of non-null sources) or ``"mass"`` (sum of presence).
        eps_den: OAttention's denominator floor, ``>= 0``.
    """

    mode: Mode
    support: Support = "count"

    allowed_modes: ClassVar[tuple[str, ...]] = PATCH_MODES


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return float(a) == float(b)
    return a == b


def resolved_mode(requested: Mapping[str, Any], saved: Mapping[str, Any] | None = None) -> str:
    """The mode :func:`resolve_settings` resolves to, known before a host is loaded.

    The same precedence (given, else saved, else :data:`DEFAULT_SETTINGS`);
    the mode, unlike ``tau``, depends on no host fact, so the estimator can
    choose its loading path with it. A conflict with the saved mode is left to
    :func:`resolve_settings` to report.
    """
    given = requested.get("mode")
    if given is not None:
        return given
    return (DEFAULT_SETTINGS if saved is None else saved)["mode"]


def resolve_settings(
    requested: Mapping[str, Any],
    saved: Mapping[str, Any] | None = None,
    *,
    host: str | None = None,
    carrier_scale_ratio: float = 1.0,
    where: str = "the saved model",
    replace_saved: bool = False,
    given_checked: bool = False,
) -> RetrofitSettings:
    """The complete settings of one patch: the one resolution every entry point uses.

    The precedence rule: a setting given by the caller, else the saved
    directory's, else the default: :func:`default_tau` of the host class for
    ``tau``, :data:`DEFAULT_SETTINGS` for the others. The estimator,
    :func:`retrofit.patch`, ``predict``, ``predict-batch`` and ``patch`` all
    reach it through :func:`retrofit.patcher.resolve_for_model`, which reads
    the host facts off the model, so an unset ``tau`` means the same on every
    path.

    Args:
        requested: Settings given by the caller; a missing name or ``None`` means
            "not given".
        saved: A saved directory's settings, which then are the defaults; None
            when the model is not a saved directory.
        host: The host's class name (``"TabPFNV2"``, ...), whose default tau
            applies when neither ``requested`` nor ``saved`` gives one.
        carrier_scale_ratio: For :data:`NORM_WEIGHTED_TAU_HOSTS`, the host's
            carrier-scale ratio (see :func:`default_tau`).
        where: How to name the saved directory in an error message.
        replace_saved: Whether a given setting may differ from the saved one
            (``patch`` writes a new directory); otherwise that is an error.
        given_checked: Whether ``requested`` is :func:`check_given`'s result
            (an entry point validated it already); otherwise it is checked here.

    Returns:
        The settings to use, every one of them set and validated.

    Raises:
        SettingsConflictError: An explicit setting differs from the saved one
            and ``replace_saved`` is false.
        InvalidPatchConfigError: A setting is out of range.
        InvalidPatchConfigError: ``tau`` is set nowhere and no ``host`` is given.
    """
    if not given_checked:
        requested = check_given(requested)
    if saved is None:
        base: Mapping[str, Any] = {**DEFAULT_SETTINGS, "tau": None}
    else:
        conflicts = [
            f"{name}={requested[name]!r} (saved: {saved[name]!r})"
            for name in SETTING_NAMES
            if requested.get(name) is not None and not _same(requested[name], saved[name])
        ]
        if conflicts and not replace_saved:
            raise SettingsConflictError(
                f"{where} was retrofitted with other settings: {'; '.join(conflicts)}; "
                "leave them unset to use the saved ones, or patch the source again"
            )
        base = saved
    values = {
        name: base[name] if requested.get(name) is None else requested[name]
        for name in SETTING_NAMES
    }
    if values["tau"] is None:
        if host is None:
            raise InvalidPatchConfigError("tau is unset and no host class names its default")
        values["tau"] = default_tau(host, carrier_scale_ratio)
    # Every value is checked: given ones above, saved ones when their directory
    # was read (retrofit.models.saved), defaults by default_tau or as constants;
    # a saved JSON number may be an int.
    values["tau"], values["eps_den"] = float(values["tau"]), float(values["eps_den"])
    return RetrofitSettings._of_checked(values)
