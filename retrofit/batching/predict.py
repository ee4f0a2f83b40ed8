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
behaves (and errs) as tabpfn does. Hosts with a stage: every patched host
(v2, v2.5, v2.6, v3, v3.5; ``retrofit/hosts/*_icl_stage.py``); another host
opts in with :func:`retrofit.hosts.base.register_icl_stage`.

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
import torch
from tabpfn import TabPFNRegressor
from tabpfn.errors import TabPFNValidationError

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
from retrofit.hosts.base import icl_stage_for, supports_padded_icl
from retrofit.settings import (
    DEFAULT_QUANTILES,
    check_max_bucket_bytes,
    check_max_padded_fraction,
    default_max_bucket_bytes,
    default_max_padded_fraction,
)
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
)
from retrofit.validation import check_numeric_target

__all__ = ["BatchedPrediction", "check_batch_lists", "is_ragged", "predict_batched"]

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
    X_train_list: Sequence[Any], y_train_list: Sequence[Any], X_test_list: Sequence[Any]
) -> list[Any]:
    """Refuses malformed batch input before anything is fitted.

    Returns:
        The targets as ``OTabPFNRegressor.fit`` takes them (text that spells
        numbers converted: :func:`retrofit.validation.check_numeric_target`).

    Raises:
        BatchInputError: If the lists differ in length or are empty, or a
            dataset (named by its index) has fewer than two train rows, a
            target of another length than its train rows, a non-finite or
            non-numeric target, or no test rows.
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
        y = _numeric_target(i, y)
        try:
            y_arr = np.asarray(y, dtype=np.float64).reshape(-1)
        except (TypeError, ValueError) as err:
            raise BatchInputError(f"dataset {i}: y_train is not numeric ({err})") from None
        if y_arr.shape[0] != n:
            raise BatchInputError(
                f"dataset {i}: y_train has {y_arr.shape[0]} values for {n} train rows"
            )
        if not np.isfinite(y_arr).all():
            bad = int((~np.isfinite(y_arr)).sum())
            raise BatchInputError(f"dataset {i}: y_train has {bad} NaN or infinite values")
        if _n_rows(X_test) < 1:
            raise BatchInputError(f"dataset {i}: X_test has no rows")
        targets.append(y)
    return targets


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
    carriers ``(B, R, D)`` are one entry of a padded ICL batch.
    """

    dataset: int
    members: list[int]
    model: torch.nn.Module
    carriers_BRD: torch.Tensor | None
    num_keys: int

    @property
    def shape(self) -> tuple[int, int]:
        """``(key rows, test rows)``; the key rows are the train rows and any host-added rows."""
        assert self.carriers_BRD is not None
        return self.num_keys, self.carriers_BRD.shape[1] - self.num_keys


@dataclasses.dataclass
class _Dataset:
    """One dataset after fit and stages 0-2: its worker, member configs and units."""

    worker: TabPFNRegressor
    configs: list[Any]
    units: list[_Unit]
    save_peak_mem: bool


def _worker_for(regressor: TabPFNRegressor, random_state: Any) -> TabPFNRegressor:
    """A plain tabpfn regressor with ``regressor``'s tabpfn parameters, sharing its model.

    Always ``TabPFNRegressor`` itself, so a subclass's ``fit`` (which may load
    and patch a host of its own) is not run per dataset; ``sklearn.clone``
    would deep-copy the in-memory model of ``model_path``. ``random_state`` is
    the batch's copy of the caller's (see :func:`predict_batched`).
    """
    names = TabPFNRegressor._get_param_names()
    params = {**regressor.get_params(deep=False), "random_state": random_state}
    worker = TabPFNRegressor(**{k: v for k, v in params.items() if k in names})
    worker.fit_mode = "fit_preprocessors"
    return worker


def _embed_dataset(
    regressor: TabPFNRegressor,
    index: int,
    X: Any,
    y: Any,
    X_test: Any,
    cast: dict[tuple[int, torch.dtype], torch.nn.Module],
    random_state: Any,
) -> tuple[_Dataset | None, TabPFNRegressor]:
    """Fits one dataset and runs its members' stages before ICL, as ``predict`` does.

    Members that share a model and a prepared shape run as one forward in
    chunks of tabpfn's estimator batch budget, like ``predict``'s engine, with
    the device's cache-sized row chunks (:mod:`retrofit.batching.chunks`).
    ``cast`` holds the models already cast to a forced dtype in this batch
    (keyed by identity and dtype; shared by every dataset, since the workers
    use the same model objects). Returns ``(None, worker)`` for a constant
    target (answered analytically).
    """
    worker = _worker_for(regressor, random_state)
    worker.fit(X, y)
    if worker.is_constant_target_:
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
                    model, X_RBC, y_NB, performance_options=_options(model, save_peak_mem)
                )
            num_keys = key_rows(carriers_BRD, X_RBC.shape[0] - y_NB.shape[0])
            unit = _Unit(index, [c[0] for c in chunk], model, carriers_BRD, num_keys)
            data.units.append(unit)
    return data, worker


def _models_of(regressor: TabPFNRegressor) -> list[Any]:
    """The models in ``regressor``'s ``model_path``: one, or each of a list."""
    model_path = regressor.get_params(deep=False)["model_path"]
    entries = model_path if isinstance(model_path, list) else [model_path]
    return [getattr(entry, "model", entry) for entry in entries]


def _clean_test(worker: TabPFNRegressor, X_test: Any) -> Any:
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
    regressor: TabPFNRegressor,
    X_train_list: Sequence[Any],
    y_train_list: Sequence[Any],
    X_test_list: Sequence[Any],
) -> int | None:
    """The first dataset whose own fit or test cleaning fails, None if each passes alone.

    tabpfn's ``predict_batched`` does not say which dataset its error is about;
    run only after it failed, to name it.
    """
    random_state = copy.deepcopy(regressor.get_params(deep=False)["random_state"])
    for i, (X, y, X_test) in enumerate(zip(X_train_list, y_train_list, X_test_list, strict=True)):
        try:
            worker = _worker_for(regressor, copy.deepcopy(random_state))
            worker.fit(X, y)
            if not worker.is_constant_target_:
                _clean_test(worker, X_test)
        except (ValueError, TypeError):
            return i
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
            (:func:`retrofit.settings.default_max_padded_fraction`: 0.05 on a
            CPU, where padding costs what it pads, 0.25 on an accelerator).
        max_rows: Bound on the padded rows of one ICL forward.
        max_bucket_bytes: Bound on the estimated working set of one ICL
            forward (:func:`retrofit.batching.padding.icl_working_set_bytes`);
            ``"auto"``: the device's default
            (:func:`retrofit.settings.default_max_bucket_bytes`: cache-sized on
            a CPU, none on an accelerator); None: no bound.
        progress: Called as ``progress(phase, done, total)``.
        padded: None (default): the padded path for ragged input on a patched
            host, tabpfn's ``predict_batched`` otherwise. True: the padded path
            for same-shape input too (benchmarks); False: always tabpfn's.

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
    if max_padded_fraction is not None:
        max_padded_fraction = check_max_padded_fraction(max_padded_fraction)
    if max_bucket_bytes != "auto":
        max_bucket_bytes = check_max_bucket_bytes(max_bucket_bytes)
    quantiles = _check_output_request(output_type, quantiles)
    models = _models_of(regressor)
    if padded is None:
        # tabpfn's fused forward refuses float64; the padded one runs it exactly.
        needs_padding = (
            is_ragged(X_train_list, X_test_list)
            or regressor.get_params(deep=False)["inference_precision"] == torch.float64
        )
        padded = needs_padding and all(supports_padded_icl(m) for m in models)
    if not padded:
        try:
            # tabpfn's own method, also when ``regressor`` is a subclass overriding it.
            results = TabPFNRegressor.predict_batched(
                regressor,
                list(X_train_list),
                list(y_train_list),
                list(X_test_list),
                output_type=output_type,
                quantiles=quantiles,
            )
        except (ValueError, TypeError) as err:
            if is_ragged(X_train_list, X_test_list):
                raise  # tabpfn's refusal of the whole batch
            index = _failing_dataset(regressor, X_train_list, y_train_list, X_test_list)
            if index is None:
                raise
            raise BatchInputError(f"dataset {index}: {err}") from err
        return BatchedPrediction(list(results), False, PaddingStats(), [])
    require(RAGGED_BATCHING)  # one line naming a tabpfn helper this tabpfn lacks
    _refuse_per_dataset_state(regressor)
    for model in models:  # a host without a null-padded stage fails here, not per dataset
        icl_stage_for(model)
    # One copy of a caller's RandomState or Generator for the whole batch, consumed
    # dataset after dataset as tabpfn's predict_batched consumes its clone's: the
    # caller's object is left as it was, and two identical calls agree.
    random_state = copy.deepcopy(regressor.get_params(deep=False)["random_state"])

    n_data = len(X_train_list)
    results: list[Any] = [None] * n_data
    embedded: dict[int, _Dataset] = {}
    cast: dict[tuple[int, torch.dtype], torch.nn.Module] = {}
    for i, (X, y, X_test) in enumerate(zip(X_train_list, y_train_list, X_test_list, strict=True)):
        try:
            data, worker = _embed_dataset(regressor, i, X, y, X_test, cast, random_state)
        except (ValueError, TypeError) as err:
            raise BatchInputError(f"dataset {i}: {err}") from err
        if data is None:
            results[i] = handle_constant_target(worker, _n_rows(X_test), output_type, quantiles)
        else:
            embedded[i] = data
        if progress is not None:
            progress("embed", i + 1, n_data)

    stats = PaddingStats()
    buckets: list[list[int]] = []
    if embedded:
        device = next(iter(embedded.values())).worker.devices_[0]
        if max_padded_fraction is None:
            max_padded_fraction = default_max_padded_fraction(device)
        if max_bucket_bytes == "auto":
            max_bucket_bytes = default_max_bucket_bytes(device)
        bounds = _BucketBounds(max_padded_fraction, max_rows, max_bucket_bytes)
        outputs = _run_icl(embedded, bounds, stats, buckets, progress)
        for i, data in embedded.items():
            results[i] = _decode(data, outputs[i], output_type, quantiles)
    return BatchedPrediction(results, True, stats, buckets)


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
) -> dict[int, list[torch.Tensor | None]]:
    """The padded ICL forwards, one per bucket of units; ``(M, O)`` per member."""
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
                performance_options=_options(model, save_peak),
            )
        for unit, out_MBO in zip(bucket, outs, strict=True):
            for column, member in enumerate(unit.members):
                outputs[unit.dataset][member] = out_MBO[:, column]
            unit.carriers_BRD = None  # release the carriers as soon as they are used
        if progress is not None:
            progress("icl", done, len(plans))
    return outputs


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
