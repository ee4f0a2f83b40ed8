"""The null-padded engine of ragged batched prediction, shared by regression and classification.

tabpfn 9.2's batched methods refuse datasets of different shapes, because zero
padding would corrupt an unpatched model. On a patched host a zero ICL carrier
is a true NULL, so :func:`run_padded` does this for any task:

1. every dataset is fitted and preprocessed by a tabpfn estimator that shares
   the patched model (``fit_mode="fit_preprocessors"``, as tabpfn's own
   ``predict_batched``), and its test rows are cleaned and transformed for
   each ensemble member; only then (the NumPy work done) each ensemble member
   of each dataset goes through the stages before ICL on its own, with the
   inputs ``predict`` builds for it;
2. the members' carriers are grouped into length buckets
   (:func:`retrofit.batching.padding.plan_buckets`) and, per bucket, padded with zero
   rows and run through the patched ICL blocks in one forward, every member of
   every dataset of the bucket along the batch (:func:`retrofit.batching.padding.run_padded_icl`);
3. padded rows are dropped before the decoder; the front ends translate,
   average and decode each dataset's member outputs with tabpfn's own helpers
   (:mod:`retrofit.batching.regression`, :mod:`retrofit.batching.classification`).

Which input takes this path is decided in :mod:`retrofit.batching.dispatch`;
its device bounds are :mod:`retrofit.batching.bounds`'s. Hosts with a stage:
every patched host (v2, v2.5, v2.6, v3, v3.5;
``retrofit/hosts/*/icl_stage.py``); another host opts in with
:func:`retrofit.hosts.common.base.register_icl_stage`.

Row weights: :func:`run_padded` takes one weight vector per dataset (over the
train rows its members' forwards get, ``(N_d,)`` for every member or
``(E_d, N_d)`` per ensemble member in config order); each dataset's stages
before ICL run under them (:func:`retrofit.row_weights`) and its rows count
that many times in the padded ICL forward and the classifier's decoder
(:func:`retrofit.batching.padding.run_padded_icl`). A dataset given no such
vector takes its members' own: a fit with sample weights
(``sample_weights``, one vector per dataset over its rows: the dataset's
worker is tabpfn's fit with row weights, :mod:`retrofit.weighted_fit`)
hands every member the weights of its train rows, and those count.

With ``fit_mode="fit_with_cache"`` the padded path, like tabpfn's own
``predict_batched``, runs the full forward instead of the KV cache: it equals
per-dataset ``predict`` exactly with an unquantized cache
(``kv_cache_precision="auto"``) and within the cache's rounding with int8.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from tabpfn import TabPFNClassifier, TabPFNRegressor
from tabpfn.errors import TabPFNValidationError

from retrofit.batching.bounds import (
    default_max_bucket_bytes,
    default_max_padded_fraction,
)
from retrofit.batching.chunks import (
    chunk_cells_for,
    lowered_chunk_cells,
    members_per_stage_forward,
)
from retrofit.batching.padding import (
    PaddingStats,
    icl_working_set_bytes,
    key_rows,
    plan_buckets,
    run_padded_icl,
)
from retrofit.errors import BatchInputError
from retrofit.hosts.common.base import icl_stage_for
from retrofit.hosts.common.row_weights import row_weights
from retrofit.tabpfn_surface import (
    RAGGED_BATCHING,
    batch_member_inputs,
    check_input_shape_matches,
    clean_data_transform,
    default_save_peak_memory_factor,
    ensure_compatible_predict_input_sklearn,
    estimator_batch_budget,
    feature_modality,
    get_autocast_context,
    maybe_run_gpu_preprocessing,
    member_model_index,
    members_per_forward,
    prepare_model_inputs,
    require,
    should_save_peak_mem,
    uses_majority_downsample,
    validate_num_classes,
)
from retrofit.weighted_fit import WeightedTabPFNClassifier, WeightedTabPFNRegressor

__all__ = [
    "BatchedPrediction",
    "DatasetFit",
    "EmbeddedDataset",
    "PaddedRun",
    "check_class_limit",
    "cleaned_test_rows",
    "failing_dataset",
    "models_of",
    "run_padded",
    "worker_for",
]

#: The estimators whose datasets the padded path fits (:func:`worker_for`).
Estimator = TabPFNRegressor | TabPFNClassifier


#: ``progress(phase, done, total)``; phases ``"fit"`` and ``"embed"`` (per dataset) and ``"icl"``.
Progress = Callable[[str, int, int], None]

#: ``fit(index, X_train, y_train, random_state)``: dataset ``index``'s fitted
#: worker. The default fits a :func:`worker_for` on the dataset's own rows
#: (:func:`_fitted_worker`); :mod:`retrofit.leave_out.transductive` hands in
#: workers whose X side was fitted once on all rows.
DatasetFit = Callable[[int, Any, Any, Any], Estimator]


@dataclasses.dataclass
class BatchedPrediction:
    """What the front ends return (:func:`~retrofit.batching.regression.predict_batched`, ...).

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


@dataclasses.dataclass
class _Unit:
    """Members of one dataset that share a model and a prepared shape.

    Their stages before ICL run as one forward, as in ``predict``; their
    carriers ``(B, R, D)`` are one entry of a padded ICL batch. ``y_NB`` are
    their train targets as the forward got them (a classifier's decoder reads
    them); ``weights_BN`` their train rows' weights, None when each counts once.
    """

    dataset: int
    members: list[int]
    model: torch.nn.Module
    carriers_BRD: torch.Tensor | None
    num_keys: int
    y_NB: torch.Tensor
    weights_BN: torch.Tensor | None = None

    @property
    def shape(self) -> tuple[int, int]:
        """``(key rows, test rows)``; the key rows are the train rows and any host-added rows."""
        assert self.carriers_BRD is not None
        return self.num_keys, self.carriers_BRD.shape[1] - self.num_keys


@dataclasses.dataclass
class EmbeddedDataset:
    """One dataset after fit and stages 0-2: its worker, member configs and units."""

    worker: Estimator
    configs: list[Any]
    units: list[_Unit]
    save_peak_mem: bool


def worker_for(estimator: Estimator, random_state: Any, *, weighted: bool = False) -> Estimator:
    """A plain tabpfn estimator with ``estimator``'s tabpfn parameters, sharing its model.

    Always ``TabPFNRegressor`` or ``TabPFNClassifier`` itself (whichever
    ``estimator`` is), so a subclass's ``fit`` (which may load and patch a host
    of its own) is not run per dataset; ``sklearn.clone`` would deep-copy the
    in-memory model of ``model_path``. ``random_state`` is the batch's copy of
    the caller's (see :func:`~retrofit.batching.regression.predict_batched`).
    ``weighted``: the same with ``fit(X, y, sample_weight=)``
    (:class:`~retrofit.weighted_fit.WeightedTabPFNRegressor`, ``...Classifier``).
    """
    classify = isinstance(estimator, TabPFNClassifier)
    base = TabPFNClassifier if classify else TabPFNRegressor
    if weighted:
        base = WeightedTabPFNClassifier if classify else WeightedTabPFNRegressor
    names = base._get_param_names()
    params = {**estimator.get_params(deep=False), "random_state": random_state}
    worker = base(**{k: v for k, v in params.items() if k in names})
    worker.fit_mode = "fit_preprocessors"
    return worker


def _fitted_worker(
    estimator: Estimator, X: Any, y: Any, random_state: Any, sample_weight: Any = None
) -> Estimator:
    """:func:`worker_for` fitted on one dataset; a classifier's class count checked too.

    ``sample_weight``: the dataset's row weights (a weighted fit), or None.

    Raises:
        ValueError: tabpfn's ``fit`` refuses the dataset, or it has more
            classes than the model scores (:func:`check_class_limit`).
    """
    if sample_weight is None:
        worker = worker_for(estimator, random_state)
        worker.fit(X, y)
    else:
        worker = worker_for(estimator, random_state, weighted=True)
        worker.fit(X, y, sample_weight=sample_weight)
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


@dataclasses.dataclass
class _TestRows:
    """One fitted dataset's test rows as each ensemble member sees them (NumPy, before torch).

    Attributes:
        worker: The dataset's fitted worker (:data:`DatasetFit`).
        X_test_members: Per member, its transform of the cleaned test rows.
        save_peak_mem: Whether tabpfn's ``predict`` would run this dataset saving peak memory.
    """

    worker: Estimator
    X_test_members: list[Any]
    save_peak_mem: bool


def _member_test_rows(worker: Estimator, X_test: Any) -> _TestRows | None:
    """Cleans ``X_test`` as tabpfn's ``predict`` does and transforms it for every member.

    NumPy and scikit-learn only: :func:`run_padded` runs it for every dataset
    before any stage forward. Returns None for a constant target (answered
    analytically, with no forward).
    """
    if _is_constant_target(worker):
        return None
    if uses_majority_downsample(worker):
        raise NotImplementedError(
            "predict_batched does not support SAMPLE_SUBSAMPLING_METHOD='majority_downsample'"
        )
    X_test = cleaned_test_rows(worker, X_test)
    executor = worker.executor_
    save_peak_mem = should_save_peak_mem(
        memory_saving_mode=executor.save_peak_mem,
        X_train_shape=tuple(executor.X_train_shape_before_preprocessing),
        X_test_shape=tuple(X_test.shape),
        devices=[worker.devices_[0]],
        dtype_byte_size=executor.dtype_byte_size,
    )
    members = executor.ensemble_members
    return _TestRows(worker, [m.transform_X_test(X_test) for m in members], save_peak_mem)


def _embed_dataset(
    index: int,
    test_rows: _TestRows,
    cast: dict[tuple[int, torch.dtype], torch.nn.Module],
    weights: Any = None,
) -> EmbeddedDataset:
    """Runs the members of one fitted dataset through the stages before ICL, as ``predict`` does.

    Members that share a model and a prepared shape run as one forward in
    chunks of tabpfn's estimator batch budget, like ``predict``'s engine, with
    the device's cache-sized row chunks (:mod:`retrofit.batching.chunks`).
    ``cast`` holds the models already cast to a forced dtype in this batch
    (keyed by identity and dtype; shared by every dataset, since the workers
    use the same model objects). ``test_rows`` are the dataset's members'
    test rows (:func:`_member_test_rows`). ``weights`` (``(N,)`` or per member
    ``(E, N)``) are its train rows' weights.
    """
    worker = test_rows.worker
    executor = worker.executor_
    device = worker.devices_[0]
    dtype = executor.force_inference_dtype
    save_peak_mem = test_rows.save_peak_mem
    members = executor.ensemble_members
    if weights is None:
        weights = _fitted_member_weights(members)
    prepared: dict[tuple, list[tuple[int, torch.Tensor, torch.Tensor]]] = {}
    models: dict[int, torch.nn.Module] = {}
    for j, (member, X_test) in enumerate(zip(members, test_rows.X_test_members, strict=True)):
        model = executor.model_caches[member_model_index(member.config)].get(device)
        if dtype is not None and (id(model), dtype) not in cast:
            # What the engine's iter_outputs does once per predict; once per batch
            # here, not per member and dataset (a pass over every parameter, 9 % of
            # a batch of small datasets when repeated).
            model.type(dtype)
            cast[(id(model), dtype)] = model
        models[id(model)] = model
        X_full, y_train = prepare_model_inputs(
            device, dtype, member.X_train, X_test, member.y_train
        )
        X_full, _ = maybe_run_gpu_preprocessing(
            X_full,
            gpu_preprocessor=member.gpu_preprocessor,
            num_train_rows=member.X_train.shape[0],
            feature_schema=member.feature_schema,
        )
        key = (id(model), tuple(X_full.shape), tuple(y_train.shape))
        prepared.setdefault(key, []).append((j, X_full, y_train))
    data = EmbeddedDataset(worker, [m.config for m in members], [], save_peak_mem)
    for (model_id, shape, _), group in prepared.items():
        model = models[model_id]
        limit = members_per_forward(shape[0], shape[2], estimator_batch_budget(model))
        size = members_per_stage_forward(model, device, len(group), shape[0], shape[2], limit)
        for start in range(0, len(group), size):
            chunk = group[start : start + size]
            X_RBC, y_NB = batch_member_inputs([c[1] for c in chunk], [c[2] for c in chunk])
            unit_members = [c[0] for c in chunk]
            w_BN = _unit_weights(weights, unit_members, len(members))
            with (
                get_autocast_context(device, enabled=worker.use_autocast_),
                torch.inference_mode(),
                lowered_chunk_cells(model, chunk_cells_for(device, *X_RBC.shape[1:])),
                contextlib.nullcontext() if w_BN is None else row_weights(model, w_BN),
            ):
                carriers_BRD = icl_stage_for(model).embed(
                    model,
                    X_RBC,
                    y_NB,
                    performance_options=_options(model, save_peak_mem),
                    task_type=_task_type(worker),
                )
            num_keys = key_rows(carriers_BRD, X_RBC.shape[0] - y_NB.shape[0])
            unit = _Unit(index, unit_members, model, carriers_BRD, num_keys, y_NB, w_BN)
            data.units.append(unit)
    return data


def _fitted_member_weights(members: Sequence[Any]) -> list[Any] | None:
    """Each member's own row weights (a weighted fit's), None when no member counts a row twice."""
    found = [getattr(member, "row_weights", None) for member in members]
    if all(w is None or bool(np.all(w == 1.0)) for w in found):
        return None
    return [
        np.ones(len(m.X_train)) if w is None else w for m, w in zip(members, found, strict=True)
    ]


def _unit_weights(weights: Any, members: list[int], num_members: int) -> torch.Tensor | None:
    """The weights ``(len(members), N)`` of a unit's members, None when the dataset has none.

    ``weights``: ``(N,)``, ``(E, N)``, or a list of each member's ``(N,)`` (a
    unit's members share their train rows' count).

    Raises:
        BatchInputError: If per-member weights do not have one row per member.
    """
    if weights is None:
        return None
    if isinstance(weights, list):
        if len(weights) != num_members:
            raise BatchInputError(
                f"{len(weights)} per-member weight vectors for {num_members} ensemble members"
            )
        return torch.as_tensor(np.stack([weights[j] for j in members]), dtype=torch.float64)
    w = torch.as_tensor(weights, dtype=torch.float64)
    if w.dim() == 1:
        return w.expand(len(members), -1)
    if w.dim() != 2 or w.shape[0] != num_members:
        raise BatchInputError(
            f"row weights of shape {tuple(w.shape)}; pass (N,) or one row per ensemble "
            f"member ({num_members}, N)"
        )
    return w[members]


def models_of(estimator: Estimator) -> list[Any]:
    """The models in ``estimator``'s ``model_path``: one, or each of a list."""
    model_path = estimator.get_params(deep=False)["model_path"]
    entries = model_path if isinstance(model_path, list) else [model_path]
    return [getattr(entry, "model", entry) for entry in entries]


def cleaned_test_rows(worker: Estimator, X_test: Any) -> Any:
    """``X_test`` after the cleaning tabpfn's ``predict`` applies before its executor."""
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


def failing_dataset(
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
                cleaned_test_rows(worker, X_test)
        except (ValueError, TypeError) as err:
            return i, err
    return None


def _options(model: torch.nn.Module, save_peak_mem: bool) -> Any:
    return dataclasses.replace(
        model.get_default_performance_options(),
        save_peak_memory_factor=default_save_peak_memory_factor if save_peak_mem else None,
    )


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

    fitted: list[tuple[Estimator, EmbeddedDataset | None]]
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
    fit: DatasetFit | None = None,
    weights: Sequence[Any] | None = None,
    sample_weights: Sequence[Any] | None = None,
) -> PaddedRun:
    """Fits every dataset, runs its stages before ICL alone and the ICL stage padded.

    The task-independent part of the padded path, shared by regression
    (:func:`~retrofit.batching.regression.predict_batched`) and classification
    (:func:`retrofit.batching.classification.predict_proba_batched`); the caller has
    checked the lists and refused per-dataset state. ``fit`` fits each
    dataset's worker (:data:`DatasetFit`); None: tabpfn's ``fit`` on the
    dataset's own rows. ``weights``: per dataset, its train rows' weights
    (``(N_d,)``, or ``(E_d, N_d)`` per ensemble member; see the module
    docstring) or None; None: every row counts once, or as the dataset's fit
    weighted its members. ``sample_weights``: per dataset, the weights of its
    rows (checked, ``(n_d,)``) or None, for the default fit (a fit with row
    weights); a ``fit`` of the caller's applies its own.

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
    if fit is None:

        def fit(index: int, X: Any, y: Any, random_state: Any) -> Estimator:
            w = None if sample_weights is None else sample_weights[index]
            return _fitted_worker(estimator, X, y, random_state, w)

    n_data = len(X_train_list)
    fitted: list[tuple[Estimator, EmbeddedDataset | None]] = []
    embedded: dict[int, EmbeddedDataset] = {}
    cast: dict[tuple[int, torch.dtype], torch.nn.Module] = {}
    if weights is not None and len(weights) != n_data:
        raise BatchInputError(f"{len(weights)} weight vectors for {n_data} datasets")
    # Every fit and test transform first, then every dataset's stages: those are
    # Python and NumPy, the stages torch kernels, and interleaving them leaves
    # torch's thread team spinning through the NumPy work, which counts as the
    # process's CPU time (a test transform then costs two to three times its own).
    prepared: list[tuple[Estimator, _TestRows | None]] = []
    for i, (X, y, X_test) in enumerate(zip(X_train_list, y_train_list, X_test_list, strict=True)):
        try:
            worker = fit(i, X, y, random_state)
            prepared.append((worker, _member_test_rows(worker, X_test)))
        except (ValueError, TypeError) as err:
            raise BatchInputError(f"dataset {i}: {err}") from err
        if progress is not None:
            progress("fit", i + 1, n_data)
    for i, (worker, test_rows) in enumerate(prepared):
        data = None
        if test_rows is not None:
            w = None if weights is None else weights[i]
            try:
                data = _embed_dataset(i, test_rows, cast, w)
            except (ValueError, TypeError) as err:
                raise BatchInputError(f"dataset {i}: {err}") from err
            embedded[i] = data
        fitted.append((worker, data))
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
    embedded: dict[int, EmbeddedDataset],
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
                weights=[u.weights_BN for u in bucket],
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
