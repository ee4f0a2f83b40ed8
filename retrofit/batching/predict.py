"""Ragged ``predict_batched``: many datasets of different shapes, exact by null padding.

tabpfn 9.2's ``TabPFNRegressor.predict_batched`` refuses datasets of different
shapes, because zero padding would corrupt an unpatched model. On a patched
host a zero ICL carrier is a true NULL, so :func:`predict_batched` does this:

1. every dataset is fitted and preprocessed by a tabpfn regressor that shares
   the patched model (``fit_mode="fit_preprocessors"``, as tabpfn's own
   ``predict_batched``), and each ensemble member goes through the stages
   before ICL on its own, with the inputs ``predict`` builds for it;
2. the members' carriers are grouped into length buckets
   (:func:`retrofit.batching.padding.plan_buckets`) and, per bucket, padded with zero
   rows and run through the patched ICL blocks in one forward, every member of
   every dataset of the bucket along the batch (:func:`retrofit.batching.padding.run_padded_icl`);
3. padded rows are dropped before the decoder, and each dataset's estimators
   are translated, averaged and decoded with tabpfn's own helpers, as
   ``predict`` does.

Same-shape input, and any input on a model without a null-padded ICL stage
(``mode="none"``), is handed to tabpfn's ``predict_batched`` unchanged, so it
behaves (and errs) as tabpfn does. Which input needs the padded path is one
rule, :func:`needs_padding`, for both estimators, both tasks and
``predict-batch`` (:func:`takes_padded_path` adds the host's support). Hosts
with a stage: every patched host
(v2, v2.5, v2.6, v3, v3.5; ``retrofit/hosts/*/icl_stage.py``); another host
opts in with :func:`retrofit.hosts.common.base.register_icl_stage`.

With ``fit_mode="fit_with_cache"`` the padded path, like tabpfn's own
``predict_batched``, runs the full forward instead of the KV cache: it equals
per-dataset ``predict`` exactly with an unquantized cache
(``kv_cache_precision="auto"``) and within the cache's rounding with int8.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pandas as pd
import torch
from tabpfn import TabPFNClassifier, TabPFNRegressor
from tabpfn.errors import TabPFNValidationError

from retrofit.batching.bounds import (
    check_bucket_bounds,
    default_max_bucket_bytes,
    default_max_padded_fraction,
)
from retrofit.batching.chunks import chunk_cells_for, lowered_chunk_cells
from retrofit.batching.padding import (
    DEFAULT_MAX_ROWS_PER_FORWARD,
    PaddingStats,
    icl_working_set_bytes,
    key_rows,
    plan_buckets,
    run_padded_icl,
)
from retrofit.errors import BatchInputError, InvalidInputError
from retrofit.hosts.common.base import icl_stage_for, supports_padded_icl
from retrofit.settings import DEFAULT_QUANTILES
from retrofit.tabpfn_surface import (
    RAGGED_BATCHING,
    batch_member_inputs,
    check_input_shape_matches,
    clean_data_transform,
    decode_batched_dataset,
    default_save_peak_memory_factor,
    ensure_compatible_predict_input_sklearn,
    estimator_batch_budget,
    feature_modality,
    get_autocast_context,
    handle_constant_target,
    maybe_run_gpu_preprocessing,
    member_model_index,
    members_per_forward,
    prepare_model_inputs,
    require,
    should_save_peak_mem,
    translate_batched_logits,
    usable_output_types,
    uses_majority_downsample,
    validate_num_classes,
)
from retrofit.validation import check_numeric_target

__all__ = [
    "BatchedPrediction",
    "PaddedRun",
    "check_batch_lists",
    "check_class_limit",
    "first_other_class_set",
    "is_ragged",
    "models_of",
    "needs_padding",
    "predict_batched",
    "refuse_other_class_sets",
    "run_padded",
    "tabpfn_batched",
    "takes_padded_path",
]

#: The estimators whose datasets the padded path fits (``_worker_for``).
Estimator = TabPFNRegressor | TabPFNClassifier

#: ``progress(phase, done, total)``; phases ``"embed"`` (per dataset) and ``"icl"``.
Progress = Callable[[str, int, int], None]


@dataclasses.dataclass
class BatchedPrediction:
    """What :func:`predict_batched` returns.

    Attributes:
        results: One entry per dataset, in input order, each what ``predict``
            returns for that dataset.
        padded: True when the null-padded path ran; False when tabpfn's own
            ``predict_batched`` answered (same-shape input or an unpatched host).
        stats: Padding counts of the padded path (all zero otherwise).
        buckets: The length buckets (dataset indices) of the padded path.
    """

    results: list[Any]
    padded: bool
    stats: PaddingStats
    buckets: list[list[int]]


def _n_rows(X: Any) -> int:
    return int(X.shape[0]) if hasattr(X, "shape") else len(X)


def check_batch_lists(
    X_train_list: Sequence[Any],
    y_train_list: Sequence[Any],
    X_test_list: Sequence[Any],
    *,
    numeric: bool = True,
) -> list[Any]:
    """Refuses malformed batch input before anything is fitted.

    Args:
        X_train_list: Training features, one array per dataset.
        y_train_list: Training targets, one array per dataset.
        X_test_list: Test features, one array per dataset.
        numeric: True for regression targets (numbers); False for class
            labels (any values tabpfn's classifier takes, none missing).

    Returns:
        The targets as ``OTabPFNRegressor.fit`` takes them (text that spells
        numbers converted: :func:`retrofit.validation.check_numeric_target`);
        class labels as given.

    Raises:
        BatchInputError: If the lists differ in length or are empty, or a
            dataset (named by its index) has fewer than two train rows, a
            target of another length than its train rows, a non-finite or
            non-numeric target (a missing label), or no test rows.
    """
    lengths = (len(X_train_list), len(y_train_list), len(X_test_list))
    if len(set(lengths)) != 1:
        raise BatchInputError(
            "X_train_list, y_train_list and X_test_list must have equal length; got "
            f"{lengths[0]}, {lengths[1]} and {lengths[2]}"
        )
    if lengths[0] == 0:
        raise BatchInputError("nothing to predict: empty dataset list")
    targets = []
    for i, (X, y, X_test) in enumerate(zip(X_train_list, y_train_list, X_test_list, strict=True)):
        n = _n_rows(X)
        if n < 2:
            raise BatchInputError(f"dataset {i}: needs at least 2 train rows, got {n}")
        if numeric:
            y = _numeric_target(i, y)
        y_arr = _target_values(i, y) if numeric else np.asarray(y, dtype=object).reshape(-1)
        if y_arr.shape[0] != n:
            raise BatchInputError(
                f"dataset {i}: y_train has {y_arr.shape[0]} values for {n} train rows"
            )
        bad = int((~np.isfinite(y_arr)).sum()) if numeric else int(pd.isna(y_arr).sum())
        if bad:
            what = "NaN or infinite values" if numeric else "missing labels"
            raise BatchInputError(f"dataset {i}: y_train has {bad} {what}")
        if _n_rows(X_test) < 1:
            raise BatchInputError(f"dataset {i}: X_test has no rows")
        targets.append(y)
    return targets


def _target_values(index: int, y: Any) -> np.ndarray:
    """A regression target's values as float64, naming the dataset when they are not numbers."""
    try:
        return np.asarray(y, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError) as err:
        raise BatchInputError(f"dataset {index}: y_train is not numeric ({err})") from None


def _numeric_target(index: int, y: Any) -> Any:
    """``y`` as ``OTabPFNRegressor.fit`` takes it (text numbers converted), naming the dataset."""
    try:
        return check_numeric_target(y)
    except InvalidInputError as err:
        raise BatchInputError(f"dataset {index}: {err}") from None


def is_ragged(X_train_list: Sequence[Any], X_test_list: Sequence[Any]) -> bool:
    """Whether the raw arrays differ in shape (tabpfn's ``predict_batched`` refuses that)."""
    train_shapes = {_shape(X) for X in X_train_list}
    test_shapes = {_shape(X) for X in X_test_list}
    return len(train_shapes) > 1 or len(test_shapes) > 1


def _shape(X: Any) -> tuple[int, ...]:
    # An array's or a DataFrame's own shape, without copying it into a new array.
    return tuple(X.shape) if hasattr(X, "shape") else np.shape(X)


def _class_set(y: Any) -> frozenset:
    """A dataset's distinct labels, compared as tabpfn compares class sets (``1 == 1.0 != "1"``)."""
    values = pd.unique(np.asarray(y, dtype=object).reshape(-1))
    return frozenset(v.item() if isinstance(v, np.generic) else v for v in values)


def first_other_class_set(y_train_list: Sequence[Any]) -> int | None:
    """The first dataset whose class set is not dataset 0's; None when all share one.

    tabpfn's ``predict_proba_batched`` scores every dataset with one set of
    classes; labels of different kinds (integers beside text) are different
    classes. Missing labels are refused before (:func:`check_batch_lists`).
    """
    first = _class_set(y_train_list[0])
    for i, y in enumerate(y_train_list[1:], start=1):
        if _class_set(y) != first:
            return i
    return None


def refuse_other_class_sets(y_train_list: Sequence[Any]) -> None:
    """Refuses, naming the dataset, class sets that tabpfn's one-class-set method cannot score.

    Raises:
        BatchInputError: A dataset whose classes are not dataset 0's.
    """
    index = first_other_class_set(y_train_list)
    if index is not None:
        ours, theirs = (_shown(_class_set(y_train_list[i])) for i in (index, 0))
        raise BatchInputError(
            f"dataset {index}: its classes {ours} are not dataset 0's {theirs}, and tabpfn's "
            "predict_proba_batched needs the same set of classes in every dataset: batch "
            "datasets of one class set together, or use a patched host (a mode other than "
            "'none'), which scores each dataset over its own classes"
        )


def _shown(labels: frozenset, limit: int = 8) -> str:
    """Up to ``limit`` labels, sorted (by their text when they are of kinds that do not compare)."""
    try:
        ordered = sorted(labels)
    except TypeError:
        ordered = sorted(labels, key=repr)
    more = f", ... ({len(ordered)} in all)" if len(ordered) > limit else ""
    return "[" + ", ".join(repr(v) for v in ordered[:limit]) + more + "]"


def _check_output_request(output_type: str, quantiles: list[float] | None) -> list[float]:
    if quantiles is None:
        quantiles = list(DEFAULT_QUANTILES)
    elif not all((0 <= q <= 1) and isinstance(q, float) for q in quantiles):
        raise TabPFNValidationError("All quantiles must be between 0 and 1 and floats.")
    if output_type not in usable_output_types:
        raise TabPFNValidationError(f"Invalid output type: {output_type}")
    return quantiles


def _refuse_per_dataset_state(regressor: TabPFNRegressor) -> None:
    # The same refusals as tabpfn's predict_batched: state fitted per dataset
    # that a shared batch cannot apply.
    if regressor.tuning_config is not None:
        raise NotImplementedError(
            "predict_batched does not support tuning_config (ensemble temperature "
            "calibration is fitted per dataset); score datasets individually with predict"
        )


@dataclasses.dataclass
class _Unit:
    """Members of one dataset that share a model and a prepared shape.

    Their stages before ICL run as one forward, as in ``predict``; their
    carriers ``(B, R, D)`` are one entry of a padded ICL batch. ``y_NB`` are
    their train targets as the forward got them (a classifier's decoder reads
    them).
    """

    dataset: int
    members: list[int]
    model: torch.nn.Module
    carriers_BRD: torch.Tensor | None
    num_keys: int
    y_NB: torch.Tensor

    @property
    def shape(self) -> tuple[int, int]:
        """``(key rows, test rows)``; the key rows are the train rows and any host-added rows."""
        assert self.carriers_BRD is not None
        return self.num_keys, self.carriers_BRD.shape[1] - self.num_keys


@dataclasses.dataclass
class _Dataset:
    """One dataset after fit and stages 0-2: its worker, member configs and units."""

    worker: Estimator
    configs: list[Any]
    units: list[_Unit]
    save_peak_mem: bool


def _worker_for(estimator: Estimator, random_state: Any) -> Estimator:
    """A plain tabpfn estimator with ``estimator``'s tabpfn parameters, sharing its model.

    Always ``TabPFNRegressor`` or ``TabPFNClassifier`` itself (whichever
    ``estimator`` is), so a subclass's ``fit`` (which may load and patch a host
    of its own) is not run per dataset; ``sklearn.clone`` would deep-copy the
    in-memory model of ``model_path``. ``random_state`` is the batch's copy of
    the caller's (see :func:`predict_batched`).
    """
    base = TabPFNClassifier if isinstance(estimator, TabPFNClassifier) else TabPFNRegressor
    names = base._get_param_names()
    params = {**estimator.get_params(deep=False), "random_state": random_state}
    worker = base(**{k: v for k, v in params.items() if k in names})
    worker.fit_mode = "fit_preprocessors"
    return worker


def _fitted_worker(estimator: Estimator, X: Any, y: Any, random_state: Any) -> Estimator:
    """:func:`_worker_for` fitted on one dataset; a classifier's class count checked too.

    Raises:
        ValueError: tabpfn's ``fit`` refuses the dataset, or it has more
            classes than the model scores (:func:`check_class_limit`).
    """
    worker = _worker_for(estimator, random_state)
    worker.fit(X, y)
    if isinstance(worker, TabPFNClassifier):
        check_class_limit(worker)
    return worker


def check_class_limit(classifier: TabPFNClassifier) -> None:
    """Refuses a fitted dataset with more classes than the classifier's models score.

    tabpfn's ``fit`` refuses more classes than ``inference_config``'s
    ``MAX_NUMBER_OF_CLASSES`` (its ``validate_num_classes``); a config that
    raises it above the model's own ``max_num_classes`` gets past ``fit``, and
    the decoder's logits are then indexed past their end (a bare
    ``IndexError``). The same check, with the model's limit.

    Raises:
        TabPFNValidationError: tabpfn's message (a ``ValueError``), naming the
            model's class limit and the setting above it.
    """
    limit = min(int(config.max_num_classes) for config in classifier.configs_)
    try:
        validate_num_classes(num_classes=int(classifier.n_classes_), max_num_classes=limit)
    except TabPFNValidationError as err:
        setting = classifier.inference_config_.MAX_NUMBER_OF_CLASSES
        raise TabPFNValidationError(
            f"{err} That is the model's own class limit (its max_num_classes), below "
            f"inference_config MAX_NUMBER_OF_CLASSES={setting}: score at most {limit} "
            "classes per dataset (tabpfn-extensions' ManyClassClassifier splits more)"
        ) from None


def _task_type(estimator: Estimator) -> str:
    """The estimator's task as tabpfn names it: ``"multiclass"`` or ``"regression"``."""
    return "multiclass" if isinstance(estimator, TabPFNClassifier) else "regression"


def _is_constant_target(worker: Estimator) -> bool:
    """Whether tabpfn answers the fitted dataset with no forward (a constant regression target)."""
    return bool(getattr(worker, "is_constant_target_", False))


def _embed_dataset(
    estimator: Estimator,
    index: int,
    X: Any,
    y: Any,
    X_test: Any,
    cast: dict[tuple[int, torch.dtype], torch.nn.Module],
    random_state: Any,
) -> tuple[_Dataset | None, Estimator]:
    """Fits one dataset and runs its members' stages before ICL, as ``predict`` does.

    Members that share a model and a prepared shape run as one forward in
    chunks of tabpfn's estimator batch budget, like ``predict``'s engine, with
    the device's cache-sized row chunks (:mod:`retrofit.batching.chunks`).
    ``cast`` holds the models already cast to a forced dtype in this batch
    (keyed by identity and dtype; shared by every dataset, since the workers
    use the same model objects). Returns ``(None, worker)`` for a constant
    target (answered analytically).
    """
    worker = _fitted_worker(estimator, X, y, random_state)
    if _is_constant_target(worker):
        return None, worker
    if uses_majority_downsample(worker):
        raise NotImplementedError(
            "predict_batched does not support SAMPLE_SUBSAMPLING_METHOD='majority_downsample'"
        )
    X_test = _clean_test(worker, X_test)
    executor = worker.executor_
    device = worker.devices_[0]
    dtype = executor.force_inference_dtype
    save_peak_mem = should_save_peak_mem(
        memory_saving_mode=executor.save_peak_mem,
        X_train_shape=tuple(executor.X_train_shape_before_preprocessing),
        X_test_shape=tuple(X_test.shape),
        devices=[device],
        dtype_byte_size=executor.dtype_byte_size,
    )
    members = executor.ensemble_members
    prepared: dict[tuple, list[tuple[int, torch.Tensor, torch.Tensor]]] = {}
    models: dict[int, torch.nn.Module] = {}
    for j, member in enumerate(members):
        model = executor.model_caches[member_model_index(member.config)].get(device)
        if dtype is not None and (id(model), dtype) not in cast:
            # What the engine's iter_outputs does once per predict; once per batch
            # here, not per member and dataset (a pass over every parameter, 9 % of
            # a batch of small datasets when repeated).
            model.type(dtype)
            cast[(id(model), dtype)] = model
        models[id(model)] = model
        X_full, y_train = prepare_model_inputs(
            device, dtype, member.X_train, member.transform_X_test(X_test), member.y_train
        )
        X_full, _ = maybe_run_gpu_preprocessing(
            X_full,
            gpu_preprocessor=member.gpu_preprocessor,
            num_train_rows=member.X_train.shape[0],
            feature_schema=member.feature_schema,
        )
        key = (id(model), tuple(X_full.shape), tuple(y_train.shape))
        prepared.setdefault(key, []).append((j, X_full, y_train))
    data = _Dataset(worker, [m.config for m in members], [], save_peak_mem)
    for (model_id, shape, _), group in prepared.items():
        model = models[model_id]
        size = members_per_forward(shape[0], shape[2], estimator_batch_budget(model))
        for start in range(0, len(group), size):
            chunk = group[start : start + size]
            X_RBC, y_NB = batch_member_inputs([c[1] for c in chunk], [c[2] for c in chunk])
            with (
                get_autocast_context(device, enabled=worker.use_autocast_),
                torch.inference_mode(),
                lowered_chunk_cells(model, chunk_cells_for(device, *X_RBC.shape[1:])),
            ):
                carriers_BRD = icl_stage_for(model).embed(
                    model,
                    X_RBC,
                    y_NB,
                    performance_options=_options(model, save_peak_mem),
                    task_type=_task_type(worker),
                )
            num_keys = key_rows(carriers_BRD, X_RBC.shape[0] - y_NB.shape[0])
            unit = _Unit(index, [c[0] for c in chunk], model, carriers_BRD, num_keys, y_NB)
            data.units.append(unit)
    return data, worker


def models_of(estimator: Estimator) -> list[Any]:
    """The models in ``estimator``'s ``model_path``: one, or each of a list."""
    model_path = estimator.get_params(deep=False)["model_path"]
    entries = model_path if isinstance(model_path, list) else [model_path]
    return [getattr(entry, "model", entry) for entry in entries]


def _clean_test(worker: Estimator, X_test: Any) -> Any:
    """``X_test`` after the cleaning ``predict`` applies before its executor."""
    check_input_shape_matches(X_test, estimator=worker)
    X_test = worker.date_transformer_.transform(X_test)
    X_test = worker.text_transformer_.transform(X_test)
    X_test = ensure_compatible_predict_input_sklearn(X_test, worker)
    return clean_data_transform(
        X_test,
        cat_indices=worker.inferred_feature_schema_.indices_for(feature_modality.CATEGORICAL),
        ord_encoder=getattr(worker, "ordinal_encoder_", None),
        passthrough_inf=worker.get_inference_config().PASSTHROUGH_INF,
    )


def _failing_dataset(
    estimator: Estimator,
    X_train_list: Sequence[Any],
    y_train_list: Sequence[Any],
    X_test_list: Sequence[Any],
) -> tuple[int, Exception] | None:
    """The first dataset whose own fit or test cleaning fails, and its error; None if each passes.

    tabpfn's ``predict_batched`` does not say which dataset its error is about;
    run only after it failed, to name it.
    """
    random_state = copy.deepcopy(estimator.get_params(deep=False)["random_state"])
    for i, (X, y, X_test) in enumerate(zip(X_train_list, y_train_list, X_test_list, strict=True)):
        try:
            worker = _fitted_worker(estimator, X, y, copy.deepcopy(random_state))
            if not _is_constant_target(worker):
                _clean_test(worker, X_test)
        except (ValueError, TypeError) as err:
            return i, err
    return None


def _options(model: torch.nn.Module, save_peak_mem: bool) -> Any:
    return dataclasses.replace(
        model.get_default_performance_options(),
        save_peak_memory_factor=default_save_peak_memory_factor if save_peak_mem else None,
    )


def predict_batched(
    regressor: TabPFNRegressor,
    X_train_list: Sequence[Any],
    y_train_list: Sequence[Any],
    X_test_list: Sequence[Any],
    *,
    output_type: str = "mean",
    quantiles: list[float] | None = None,
    max_padded_fraction: float | None = None,
    max_rows: int = DEFAULT_MAX_ROWS_PER_FORWARD,
    max_bucket_bytes: int | str | None = "auto",
    progress: Progress | None = None,
    padded: bool | None = None,
) -> BatchedPrediction:
    """Predicts for several independent datasets, ragged ones in fused ICL forwards.

    Args:
        regressor: A ``tabpfn.TabPFNRegressor`` whose ``model_path`` holds the
            model (for the padded path a patched host, e.g. an
            ``OTabPFNRegressor.batched_host()``); it is left unchanged.
        X_train_list: Training features, one array per dataset.
        y_train_list: Training targets, one array per dataset.
        X_test_list: Test features, one array per dataset.
        output_type: As in ``TabPFNRegressor.predict``, for every dataset.
        quantiles: As in ``TabPFNRegressor.predict``.
        max_padded_fraction: Bound in ``[0, 1)`` on each bucket's padded share
            of rows and of attention cells; None: the device's default
            (:func:`retrofit.batching.bounds.default_max_padded_fraction`: 0.05 on a
            CPU, where padding costs what it pads, 0.25 on an accelerator).
        max_rows: Bound on the padded rows of one ICL forward.
        max_bucket_bytes: Bound on the estimated working set of one ICL
            forward (:func:`retrofit.batching.padding.icl_working_set_bytes`);
            ``"auto"``: the device's default
            (:func:`retrofit.batching.bounds.default_max_bucket_bytes`: cache-sized on
            a CPU, none on an accelerator); None: no bound.
        progress: Called as ``progress(phase, done, total)``.
        padded: None (default): the padded path for ragged or float64 input on
            a patched host, tabpfn's ``predict_batched`` otherwise
            (:func:`takes_padded_path`). True: the padded path for same-shape
            input too (benchmarks); False: always tabpfn's.

    Returns:
        The :class:`BatchedPrediction`; its ``results`` are what
        ``TabPFNRegressor.predict_batched`` returns.

    Raises:
        BatchInputError: Malformed lists or datasets (the message names the
            dataset index), a ``max_padded_fraction`` outside ``[0, 1)`` or a
            ``max_bucket_bytes`` that is not ``"auto"``, None or an integer >= 1;
            nothing is returned in part.
        TabPFNValidationError: An invalid ``output_type`` or ``quantiles``.
        NotImplementedError: ``tuning_config`` or majority downsampling, which
            fit per-dataset state (as tabpfn's ``predict_batched``).
        ValueError: Ragged input on a host whose ICL stage is not closed
            (tabpfn's own error).
        UnsupportedArchitectureError: ``padded=True`` on such a host.
    """
    y_train_list = check_batch_lists(X_train_list, y_train_list, X_test_list)
    max_padded_fraction, max_bucket_bytes = check_bucket_bounds(
        max_padded_fraction, max_bucket_bytes
    )
    quantiles = _check_output_request(output_type, quantiles)
    if not takes_padded_path(regressor, X_train_list, y_train_list, X_test_list, padded):
        results = tabpfn_batched(
            # tabpfn's own method, also when ``regressor`` is a subclass overriding it.
            lambda: TabPFNRegressor.predict_batched(
                regressor,
                list(X_train_list),
                list(y_train_list),
                list(X_test_list),
                output_type=output_type,
                quantiles=quantiles,
            ),
            lambda: regressor,
            X_train_list,
            y_train_list,
            X_test_list,
        )
        return BatchedPrediction(list(results), False, PaddingStats(), [])
    _refuse_per_dataset_state(regressor)
    run = run_padded(
        regressor,
        X_train_list,
        y_train_list,
        X_test_list,
        max_padded_fraction,
        max_rows,
        max_bucket_bytes,
        progress,
    )
    results: list[Any] = []
    for i, (worker, data) in enumerate(run.fitted):
        if data is None:
            n_test = _n_rows(X_test_list[i])
            results.append(handle_constant_target(worker, n_test, output_type, quantiles))
        else:
            results.append(_decode(data, run.outputs[i], output_type, quantiles))
    return BatchedPrediction(results, True, run.stats, run.buckets)


def needs_padding(
    estimator: Estimator,
    X_train_list: Sequence[Any],
    y_train_list: Sequence[Any],
    X_test_list: Sequence[Any],
) -> bool:
    """Whether tabpfn's fused forward refuses the input that the padded path runs exactly.

    The one rule, for both estimators and tasks: ragged arrays,
    ``inference_precision=torch.float64``, and for a classifier datasets whose
    class sets differ (:func:`first_other_class_set`: other classes, or labels
    of another kind), which the padded path scores each over its own classes.
    It reads only the input and the parameters, so an estimator asks it before
    loading any model.
    """
    return (
        is_ragged(X_train_list, X_test_list)
        or estimator.get_params(deep=False)["inference_precision"] == torch.float64
        or (
            isinstance(estimator, TabPFNClassifier)
            and first_other_class_set(y_train_list) is not None
        )
    )


def takes_padded_path(
    estimator: Estimator,
    X_train_list: Sequence[Any],
    y_train_list: Sequence[Any],
    X_test_list: Sequence[Any],
    padded: bool | None,
) -> bool:
    """Whether the null-padded path answers, given the caller's ``padded`` (None: decide).

    None decides: input that :func:`needs_padding`, on models that all have a
    null-padded ICL stage; anything else is tabpfn's own batched method.
    """
    if padded is not None:
        return padded
    return needs_padding(estimator, X_train_list, y_train_list, X_test_list) and all(
        supports_padded_icl(m) for m in models_of(estimator)
    )


def tabpfn_batched(
    call: Callable[[], Any],
    host: Callable[[], Estimator],
    X_train_list: Sequence[Any],
    y_train_list: Sequence[Any],
    X_test_list: Sequence[Any],
) -> Any:
    """Runs tabpfn's batched method (``call``), naming the dataset an error is about.

    Args:
        call: tabpfn's method, bound to its input.
        host: Gives the plain tabpfn estimator (its model loaded) whose
            per-dataset fits find the failing dataset; called only after a
            failure.
        X_train_list: Training features, one array per dataset.
        y_train_list: Training targets, one array per dataset.
        X_test_list: Test features, one array per dataset.

    Raises:
        BatchInputError: tabpfn's ``ValueError``, ``TypeError`` or
            ``IndexError`` (a class past the decoder's logits) when one dataset
            fails on its own too (the message names it, and for too many
            classes the model's class limit: :func:`check_class_limit`).
        ValueError: tabpfn's refusal of the whole batch (ragged input), as is.
    """
    try:
        return call()
    except (ValueError, TypeError, IndexError) as err:
        if is_ragged(X_train_list, X_test_list):
            raise  # tabpfn's refusal of the whole batch
        failure = _failing_dataset(host(), X_train_list, y_train_list, X_test_list)
        if failure is None:
            raise
        index, own = failure
        raise BatchInputError(f"dataset {index}: {own}") from err


@dataclasses.dataclass
class PaddedRun:
    """What :func:`run_padded` hands to a task's decoding.

    Attributes:
        fitted: ``(worker, dataset)`` per dataset in input order: the tabpfn
            estimator fitted on it, and its members (None when tabpfn answers
            it without a forward, a regressor's constant target).
        outputs: The decoder's output ``(M, O)`` per member, by dataset index.
        stats: Padding counts.
        buckets: The length buckets (dataset indices).
    """

    fitted: list[tuple[Estimator, _Dataset | None]]
    outputs: dict[int, list[torch.Tensor | None]]
    stats: PaddingStats
    buckets: list[list[int]]


def run_padded(
    estimator: Estimator,
    X_train_list: Sequence[Any],
    y_train_list: Sequence[Any],
    X_test_list: Sequence[Any],
    max_padded_fraction: float | None,
    max_rows: int,
    max_bucket_bytes: int | str | None,
    progress: Progress | None,
) -> PaddedRun:
    """Fits every dataset, runs its stages before ICL alone and the ICL stage padded.

    The task-independent part of the padded path, shared by regression
    (:func:`predict_batched`) and classification
    (:func:`retrofit.batching.classify.predict_proba_batched`); the caller has
    checked the lists and refused per-dataset state.

    Raises:
        BatchInputError: A dataset's fit or test cleaning fails (named).
        UnsupportedArchitectureError: A model without a null-padded ICL stage.
    """
    require(RAGGED_BATCHING)  # one line naming a tabpfn helper this tabpfn lacks
    for model in models_of(estimator):  # a host without a stage fails here, not per dataset
        icl_stage_for(model)
    # One copy of a caller's RandomState or Generator for the whole batch, consumed
    # dataset after dataset as tabpfn's predict_batched consumes its clone's: the
    # caller's object is left as it was, and two identical calls agree.
    random_state = copy.deepcopy(estimator.get_params(deep=False)["random_state"])

    n_data = len(X_train_list)
    fitted: list[tuple[Estimator, _Dataset | None]] = []
    embedded: dict[int, _Dataset] = {}
    cast: dict[tuple[int, torch.dtype], torch.nn.Module] = {}
    for i, (X, y, X_test) in enumerate(zip(X_train_list, y_train_list, X_test_list, strict=True)):
        try:
            data, worker = _embed_dataset(estimator, i, X, y, X_test, cast, random_state)
        except (ValueError, TypeError) as err:
            raise BatchInputError(f"dataset {i}: {err}") from err
        fitted.append((worker, data))
        if data is not None:
            embedded[i] = data
        if progress is not None:
            progress("embed", i + 1, n_data)

    run = PaddedRun(fitted, {}, PaddingStats(), [])
    if embedded:
        device = next(iter(embedded.values())).worker.devices_[0]
        if max_padded_fraction is None:
            max_padded_fraction = default_max_padded_fraction(device)
        if max_bucket_bytes == "auto":
            max_bucket_bytes = default_max_bucket_bytes(device)
        bounds = _BucketBounds(max_padded_fraction, max_rows, max_bucket_bytes)
        run.outputs = _run_icl(
            embedded,
            bounds,
            run.stats,
            run.buckets,
            progress,
            classify=_task_type(estimator) == "multiclass",
        )
    return run


@dataclasses.dataclass(frozen=True)
class _BucketBounds:
    """The resolved bounds of :func:`retrofit.batching.padding.plan_buckets`."""

    max_padded_fraction: float
    max_rows: int
    max_bytes: int | None


def _run_icl(
    embedded: dict[int, _Dataset],
    bounds: _BucketBounds,
    stats: PaddingStats,
    buckets: list[list[int]],
    progress: Progress | None,
    *,
    classify: bool = False,
) -> dict[int, list[torch.Tensor | None]]:
    """The padded ICL forwards, one per bucket of units; ``(M, O)`` per member.

    ``classify``: decode with the stages' ``decode_classes`` (a classifier's
    logits, from each unit's own train rows and labels) instead of ``decode``.
    """
    # One forward needs one model and one trailing carrier shape (v2: its cells).
    by_model: dict[tuple, list[_Unit]] = {}
    for data in embedded.values():
        for unit in data.units:
            assert unit.carriers_BRD is not None
            key = (id(unit.model), tuple(unit.carriers_BRD.shape[2:]))
            by_model.setdefault(key, []).append(unit)
    plans = []
    for units in by_model.values():
        carriers = units[0].carriers_BRD
        assert carriers is not None
        planned = plan_buckets(
            [u.shape for u in units],
            batch=[len(u.members) for u in units],
            max_padded_fraction=bounds.max_padded_fraction,
            max_rows=bounds.max_rows,
            row_bytes=icl_working_set_bytes(carriers.shape[2:], carriers.dtype),
            max_bytes=bounds.max_bytes,
        )
        plans.extend([units[k] for k in bucket] for bucket in planned)
    buckets.extend(sorted({u.dataset for u in bucket}) for bucket in plans)
    outputs: dict[int, list[torch.Tensor | None]] = {
        i: [None] * len(d.configs) for i, d in embedded.items()
    }
    for done, bucket in enumerate(plans, start=1):
        model = bucket[0].model
        save_peak = any(embedded[u.dataset].save_peak_mem for u in bucket)
        worker = embedded[bucket[0].dataset].worker
        with (
            get_autocast_context(worker.devices_[0], enabled=worker.use_autocast_),
            torch.inference_mode(),
        ):
            outs = run_padded_icl(
                model,
                [u.carriers_BRD for u in bucket],
                [u.num_keys for u in bucket],
                stats=stats,
                decode=_class_decoder(model, bucket) if classify else None,
                performance_options=_options(model, save_peak),
            )
        for unit, out_MBO in zip(bucket, outs, strict=True):
            for column, member in enumerate(unit.members):
                outputs[unit.dataset][member] = out_MBO[:, column]
            unit.carriers_BRD = None  # release the carriers as soon as they are used
        if progress is not None:
            progress("icl", done, len(plans))
    return outputs


def _class_decoder(
    model: torch.nn.Module, bucket: list[_Unit]
) -> Callable[[int, torch.Tensor, torch.Tensor], torch.Tensor]:
    """``decode(d, keys, test)`` for :func:`run_padded_icl`: class logits of unit ``d``."""
    stage = icl_stage_for(model)

    def decode(d: int, keys: torch.Tensor, test: torch.Tensor) -> torch.Tensor:
        return stage.decode_classes(model, keys, test, bucket[d].y_NB)

    return decode


def _decode(
    data: _Dataset, outputs: list[torch.Tensor | None], output_type: str, quantiles: list[float]
) -> Any:
    """Translates, averages and decodes one dataset's members as ``predict`` does."""
    worker = data.worker
    znorm_borders = worker.znorm_space_bardist_.borders
    std_borders = znorm_borders.cpu().numpy()
    accumulated: torch.Tensor | None = None
    for out_MO, config in zip(outputs, data.configs, strict=True):
        contribution = translate_batched_logits(
            worker,
            output=out_MO,
            config=config,
            znorm_borders=znorm_borders,
            std_borders=std_borders,
        )
        accumulated = contribution if accumulated is None else accumulated + contribution
    assert accumulated is not None
    return decode_batched_dataset(
        worker,
        accumulated_logits=accumulated,
        n_estimators=len(outputs),
        raw_space_bardist=worker.raw_space_bardist_,
        znorm_space_bardist=worker.znorm_space_bardist_,
        y_mean=worker.y_train_mean_,
        y_std=worker.y_train_std_,
        output_type=output_type,
        quantiles=quantiles,
    )
