"""What ``OTabPFNRegressor`` and ``OTabPFNClassifier`` share: loading, patching, settings.

Both estimators *are* tabpfn's (``class OTabPFNRegressor(RetrofitEstimatorMixin,
TabPFNRegressor)``, the same for the classifier): every constructor parameter,
method, fitted attribute, input and error is tabpfn's, plus four retrofit
settings (``mode``, ``tau``, ``support``, ``eps_den``). Only model loading
differs, and it lives here once for both:

* ``_initialize_model_variables`` (tabpfn's one loading point: every fit and
  ``get_inference_config``): tabpfn is given the resolved ``model_path``
  (:func:`retrofit.models.loading.resolve_model`, for the estimator's kind,
  handed over by :func:`tabpfn_loads`) and the models it loaded are patched
  before anything runs them;
* the patch digest check of each saved directory;
* :meth:`RetrofitEstimatorMixin.batched_host`, a plain tabpfn estimator over
  the patched models (for the null-padded batched predictions);
* :meth:`RetrofitEstimatorMixin._tuning_estimator`, which each class's override
  of tabpfn's holdout-estimator builder (``_get_tuning_regressor``,
  ``_get_tuning_classifier``) calls;
* ``save_fit_state`` / ``load_from_fit_state`` (tabpfn's public pair), in a
  format that holds data only and is replayed on load
  (:mod:`retrofit.fit_state.archive`): ``fit`` keeps a copy of its inputs for it;
* ``fit(X, y, sample_weight=None)``: the weights checked once
  (:func:`retrofit.validation.check_sample_weight`), a classifier's
  ``class_weight`` multiplied in, then tabpfn's ``fit`` with every row counted
  that many times (:mod:`retrofit.weighted_fit`); without weights it is
  tabpfn's ``fit``, the same code path.

The private tabpfn methods overridden are listed in
:data:`retrofit.tabpfn_surface.PRIVATE_METHODS` and pinned by
``tests/retrofit/test_tabpfn_private_api.py``.
"""

from __future__ import annotations

import contextlib
import copy
import warnings
from collections.abc import Iterator
from os import PathLike
from typing import Any, ClassVar, Self

import torch
from sklearn.base import BaseEstimator, clone
from tabpfn import ModelSpecs

from retrofit.errors import FitStateError, IgnoredSettingWarning, RetrofitError
from retrofit.fit_state.archive import FitRecord, read_fit_state, weights_digest, write_fit_state
from retrofit.models.loading import ResolvedModel, resolve_model
from retrofit.models.patched_host import PatchedHostCache
from retrofit.models.saved import check_patch_digest
from retrofit.patcher import PatchReport, patch_loaded_models
from retrofit.settings import SETTING_NAMES, check_given
from retrofit.tabpfn_surface import models_may_be_shared
from retrofit.validation import check_sample_weight, rows_of
from retrofit.weighted_fit import unpatched_refusal

__all__ = ["ModelPath", "RetrofitEstimatorMixin", "tabpfn_loads"]

#: Where an estimator keeps its patched host between fits (not a fitted attribute:
#: no trailing underscore; left out of pickles and copies, never cloned).
_HOSTS_ATTR = "_patched_hosts"
#: Where ``fit`` keeps what it was given, for ``save_fit_state`` (a
#: :class:`~retrofit.fit_state.archive.FitRecord`; private, so no fitted attribute).
_FIT_RECORD_ATTR = "_fit_record"

#: What ``model_path`` takes: tabpfn's kinds plus "embedded", the aliases, saved
#: directories and a model resolved once (:func:`retrofit.resolve_model`).
ModelPath = (
    str | PathLike | ModelSpecs | ResolvedModel | list[str | PathLike | ModelSpecs | ResolvedModel]
)


def _same_param(a: Any, b: Any) -> bool:
    """Whether a parameter is unchanged: the same object, or an equal value."""
    if a is b:
        return True
    try:
        return bool(a == b)
    except (TypeError, ValueError, RuntimeError):
        return False


@contextlib.contextmanager
def tabpfn_loads(estimator: BaseEstimator, model_path: Any) -> Iterator[None]:
    """While tabpfn's loader runs, the estimator's ``model_path`` is ``model_path``.

    Why the public parameter is rewritten at all: tabpfn's
    ``_initialize_model_variables`` takes no argument and reads the model to
    load from ``self.model_path``, and the retrofit hands it what that parameter
    resolved to (checkpoint files, or the patched host kept between fits). The
    user's value is back as soon as tabpfn returns or raises, so ``get_params``,
    ``clone`` and ``save_fit_state`` only ever see what the user gave.
    """
    given = estimator.model_path
    estimator.model_path = model_path
    try:
        yield
    finally:
        estimator.model_path = given


def _warn_ignored_settings(estimator: str, requested: dict[str, Any]) -> None:
    """Says, as scikit-learn does for a parameter the fit does not use, that a setting is unused.

    ``mode="none"`` patches nothing, so ``tau``, ``support`` and ``eps_den``
    change no number: a grid over ``mode`` and ``tau`` fits the unpatched host
    once per tau, to the same predictions.
    """
    given = [
        f"{name}={requested[name]!r}" for name in SETTING_NAMES[1:] if requested[name] is not None
    ]
    if given:
        warnings.warn(
            f"{estimator}: {', '.join(given)} has no effect with mode='none' (the unpatched "
            "host); it applies to mode='full-o' and 'oattention' only",
            IgnoredSettingWarning,
            stacklevel=3,
        )


class RetrofitEstimatorMixin:
    """Mixed in before a tabpfn estimator class; a subclass names ``tabpfn_class``.

    Attributes:
        tabpfn_class: The tabpfn estimator class the subclass extends
            (``TabPFNRegressor`` or ``TabPFNClassifier``).
    """

    tabpfn_class: ClassVar[type[BaseEstimator]]

    @property
    def patch_report_(self) -> PatchReport | None:
        """The patch report of the single model; None for ``mode="none"``.

        Raises:
            AttributeError: Before the model is loaded.
            ValueError: With several models (use ``patch_reports_``), as
                tabpfn's ``model_`` does.
        """
        reports = self.__dict__.get("patch_reports_")
        if reports is None:
            raise AttributeError("patch_report_ is set when the model is loaded (in fit)")
        if len(self.models_) > 1:
            raise ValueError("several models are in use; read patch_reports_ instead")
        return reports[0] if reports else None

    def _initialize_model_variables(self) -> int:
        """Loads the models as tabpfn does, from the resolved ``model_path``, and patches them.

        A patched host is loaded, verified and patched once per model file and
        settings and kept between fits (:mod:`retrofit.models.patched_host`);
        ``mode="none"``, in-memory models and files tabpfn has yet to download
        load at every fit, as in tabpfn.
        """
        # The one validation of the settings: a bad one fails before anything is loaded.
        requested = check_given({name: getattr(self, name) for name in SETTING_NAMES})
        resolved = resolve_model(self.model_path, which=self.estimator_type)
        saved = resolved.saved_settings
        where = f"saved model {resolved.label}"
        hosts = self.__dict__.setdefault(_HOSTS_ATTR, PatchedHostCache())
        host = hosts.host_for(
            resolved, requested, saved, estimator_type=self.estimator_type, where=where
        )
        if host is None:
            for_tabpfn = resolved.tabpfn_model_path(self.estimator_type)
        else:
            for_tabpfn = host.model_path(as_list=resolved.is_list)
        with tabpfn_loads(self, for_tabpfn):
            byte_size = super()._initialize_model_variables()
        if host is not None:
            self.models_ = host.models_for_fit(self.devices_, self.forced_inference_dtype_)
            settings, reports, digests = list(host.settings), list(host.reports), host.digests
        else:
            self.models_, settings, reports = patch_loaded_models(
                self.models_,
                requested,
                saved,
                where=where,
                # Built models are shared when tabpfn's model cache is on, and
                # ModelSpecs models are the caller's: the patch goes to a copy then.
                copy_first=resolved.by_reference or models_may_be_shared(),
            )
            digests = tuple(report.digest() for report in reports)
        for found in resolved.saved:
            check_patch_digest(found, digests or (None,))
        if settings[0].mode == "none":
            _warn_ignored_settings(type(self).__name__, requested)
        self.settings_ = settings[0].to_dict()
        self.patch_reports_ = reports
        return byte_size

    def fit(self, X: Any, y: Any, sample_weight: Any = None) -> Self:
        """The tabpfn ``fit``, each row counted ``sample_weight`` times; copies kept for saving.

        The weights are checked once, here: None, a number, or ``(N,)`` finite
        numbers ``>= 0``, not all 0, never modified (scikit-learn's
        ``_check_sample_weight`` semantics). A classifier's ``class_weight``
        multiplies them (:mod:`retrofit.weighted_fit.class_weights`). Weights
        are frequencies: weight ``k`` is the row given ``k`` times, 0 is the
        row removed, and scaling every weight by ``c`` is ``c`` copies of the
        data. None (or every weight 1) is tabpfn's ``fit`` itself.

        Raises:
            InvalidSampleWeightError: Malformed weights or ``class_weight``.
            UnsupportedWeightingError: Weights with ``mode="none"`` (unpatched),
                or a setting the weights cannot be applied to (one line naming it).
        """
        w_N = None if sample_weight is None else check_sample_weight(sample_weight, rows_of(X))
        fit_w_N = self._row_weights_for_fit(y, w_N)
        if fit_w_N is not None and self.mode == "none":
            raise unpatched_refusal()
        fitted = self._fit_rows(X, y, fit_w_N)
        self.__dict__[_FIT_RECORD_ATTR] = FitRecord.of(
            X, y, self.get_params(deep=False), sample_weight=w_N
        )
        return fitted

    def _row_weights_for_fit(self, y: Any, w_N: Any) -> Any:
        """The weights the fit counts rows by: the sample weights (a classifier adds its own)."""
        return w_N

    def save_fit_state(self, path: str | PathLike[str]) -> None:
        """Saves the fit to ``path`` (``.tabpfn_fit``) as data only, for ``load_from_fit_state``.

        Unlike tabpfn's archive (its fitted attributes pickled), the file holds
        the constructor parameters, the training inputs, the resolved settings
        and the digests of the patch reports and model weights
        (:mod:`retrofit.fit_state.archive`); a ``ModelSpecs`` model travels as
        safetensors. Loading fits again from them.

        Raises:
            FitStateError: Not fitted with ``fit``, parameters changed since the
                fit, a ``random_state`` that is not an integer, or an input or
                parameter that cannot be stored as data.
        """
        record = self.__dict__.get(_FIT_RECORD_ATTR)
        if record is None or "settings_" not in self.__dict__:
            raise FitStateError(
                f"cannot save the fit state to {path}: {type(self).__name__} is not fitted with "
                "fit() (fit_with_differentiable_input fits are not saved); call fit first"
            )
        # The device is the loader's choice (load_from_fit_state's device), so it may differ.
        current = {k: v for k, v in self.get_params(deep=False).items() if k != "device"}
        changed = sorted(k for k, v in current.items() if not _same_param(v, record.params.get(k)))
        if changed:
            raise FitStateError(
                f"cannot save the fit state to {path}: {', '.join(changed)} changed since the "
                "fit, so the fit would not be the one saved; call fit again first"
            )
        write_fit_state(
            path,
            estimator=type(self).__name__,
            record=record,
            settings=self.settings_,
            report_digests=[report.digest() for report in self.patch_reports_],
            weights=[weights_digest(model) for model in self.models_],
        )

    @classmethod
    def load_from_fit_state(cls, path: str | PathLike[str], *, device: Any = "auto") -> Self:
        """The estimator :meth:`save_fit_state` saved, fitted again on ``device``.

        The file is checked before anything in it is used: the sizes its zip
        directory declares (nothing is unpacked past a bound a saved file never
        reaches), then the SHA-256 of its manifest (parameters, settings, model
        path) and of every member (:mod:`retrofit.fit_state.archive`). The
        estimator is then built from the saved parameters and fitted on the
        saved inputs: tabpfn loads a fresh model and the retrofit patches it.
        The refit must reproduce the saved settings, patch report digests and
        weight digests, or loading fails. On the same machine, device and
        package versions the loaded estimator predicts what the saved one
        predicted, bit for bit.

        The digests catch a file edited or damaged since it was saved, not a
        forger who recomputes them; such a file still holds data only (nothing
        in it runs), and any error its refit meets is a ``FitStateError`` too.

        Raises:
            FitStateError: Naming ``path``: a missing, foreign or oversized
                file, one edited or damaged since it was saved, a fit of another
                class, a refit that fails, or a refit that differs from the
                saved fit (a changed checkpoint file, another retrofit version).
        """
        saved = read_fit_state(path, estimator=cls.__name__, which=cls._estimator_kind())
        try:
            estimator = cls(**saved.params, device=device)
        except TypeError as err:  # a parameter this class does not take
            raise FitStateError(f"{path}: {err}; save the fit state again") from err
        try:
            estimator.fit(saved.X, saved.y, sample_weight=saved.sample_weight)
        except (FitStateError, MemoryError, torch.OutOfMemoryError):
            raise  # named already, or the machine's limit rather than the file's
        except Exception as err:
            # A model file moved or changed since the save, or a forged file whose
            # digests match (another estimator named, inputs that do not fit). The
            # library's own errors are one line that says what to do: kept whole.
            why = str(err) if isinstance(err, RetrofitError) else str(err).strip()[:200]
            raise FitStateError(
                f"{path}: refitting its saved inputs failed ({type(err).__name__}: {why}); "
                "fit and save again"
            ) from err
        found = {
            "settings": estimator.settings_,
            "patch report digests": tuple(r.digest() for r in estimator.patch_reports_),
            "model weight digests": tuple(weights_digest(m) for m in estimator.models_),
        }
        expected = {
            "settings": saved.settings,
            "patch report digests": saved.report_digests,
            "model weight digests": saved.weights,
        }
        differ = [name for name in found if found[name] != expected[name]]
        if differ:
            raise FitStateError(
                f"{path}: the refit here differs from the saved fit in its {', '.join(differ)} "
                "(a changed model file or another retrofit version); fit and save again"
            )
        return estimator

    @classmethod
    def _estimator_kind(cls) -> str:
        """``"regressor"`` or ``"classifier"``: the task of ``tabpfn_class``."""
        return "classifier" if cls.tabpfn_class.__name__.endswith("Classifier") else "regressor"

    def __getstate__(self) -> dict[str, Any]:
        """The pickled state: sklearn's, without the patched host kept between fits."""
        state = super().__getstate__()
        return {name: value for name, value in state.items() if name != _HOSTS_ATTR}

    def batched_host(self) -> BaseEstimator:
        """A plain tabpfn estimator over a model loaded and patched from the current parameters.

        The model is loaded on a clone, as tabpfn's own batched predictions fit
        a clone: parameters changed with ``set_params`` after ``fit`` apply, and
        ``self`` is left unchanged.
        """
        source = clone(self)
        source._initialize_model_variables()
        names = self.tabpfn_class._get_param_names()
        params = {k: v for k, v in self.get_params(deep=False).items() if k in names}
        specs = [
            ModelSpecs(
                model=model,
                architecture_config=config,
                inference_config=source.inference_config_,
                # The regressor's bar distribution; a classifier has none.
                norm_criterion=getattr(source, "znorm_space_bardist_", None),
            )
            for model, config in zip(source.models_, source.configs_, strict=True)
        ]
        params["model_path"] = specs[0] if len(specs) == 1 else specs
        return self.tabpfn_class(**params)

    def _tuning_estimator(self, tabpfn_builder: Any, **overwrite_kwargs: Any) -> Any:
        """The holdout estimator tabpfn's ``tabpfn_builder`` builds, as one of this class.

        tabpfn builds it from ``get_params()``, which here holds the four
        retrofit settings that its class does not take: tabpfn builds it from a
        plain view of this estimator, then the settings are added back.
        """
        view = copy.copy(self)
        view.__class__ = self.tabpfn_class
        plain = tabpfn_builder(view, **overwrite_kwargs)
        settings = {name: getattr(self, name) for name in SETTING_NAMES}
        return type(self)(**plain.get_params(deep=False), **settings)
