"""Ragged ``predict_batched`` for regressors: datasets of different shapes, exact by null padding.

:func:`predict_batched` checks the lists and the bounds, asks
:mod:`retrofit.batching.dispatch` which path answers, and on the padded one
runs the engine (:func:`retrofit.batching.engine.run_padded`) and decodes each
dataset's members as ``predict`` does: translated, averaged and decoded with
tabpfn's own helpers.

Same-shape input, and any input on a model without a null-padded ICL stage
(``mode="none"``), is handed to tabpfn's ``predict_batched`` unchanged, so it
behaves (and errs) as tabpfn does.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from tabpfn import TabPFNRegressor
from tabpfn.errors import TabPFNValidationError

from retrofit.batching.bounds import (
    check_bucket_bounds,
)
from retrofit.batching.dispatch import (
    check_batch_lists,
    check_batch_weights,
    n_rows,
    tabpfn_batched,
    takes_padded_path,
)
from retrofit.batching.engine import (
    BatchedPrediction,
    DatasetFit,
    EmbeddedDataset,
    Progress,
    run_padded,
)
from retrofit.batching.padding import (
    DEFAULT_MAX_ROWS_PER_FORWARD,
    PaddingStats,
)
from retrofit.settings import DEFAULT_QUANTILES
from retrofit.tabpfn_surface import (
    decode_batched_dataset,
    handle_constant_target,
    translate_batched_logits,
    usable_output_types,
)

__all__ = [
    "predict_batched",
]


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
    fit: DatasetFit | None = None,
    sample_weight: Sequence[Any] | None = None,
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
            (:func:`~retrofit.batching.dispatch.takes_padded_path`). True: the
            padded path for same-shape input too (benchmarks); False: always
            tabpfn's.
        fit: The padded path's fit of each dataset
            (:data:`~retrofit.batching.engine.DatasetFit`); None: tabpfn's
            ``fit`` on the dataset's own rows.
        sample_weight: None, or per dataset None or the weights of its train
            rows (as ``fit``'s ``sample_weight``): each dataset is fitted with
            its rows counted that many times and runs on the padded path (the
            model must be patched). With a ``fit`` of the caller's, that fit
            applies them.

    Returns:
        The :class:`~retrofit.batching.engine.BatchedPrediction`; its ``results`` are what
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
    weights = check_batch_weights(sample_weight, X_train_list)
    padded_path = takes_padded_path(
        regressor, X_train_list, y_train_list, X_test_list, padded, weighted=weights is not None
    )
    if not padded_path:
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
        fit,
        sample_weights=weights,
    )
    results: list[Any] = []
    for i, (worker, data) in enumerate(run.fitted):
        if data is None:
            n_test = n_rows(X_test_list[i])
            results.append(handle_constant_target(worker, n_test, output_type, quantiles))
        else:
            results.append(_decode(data, run.outputs[i], output_type, quantiles))
    return BatchedPrediction(results, True, run.stats, run.buckets)


def _decode(
    data: EmbeddedDataset,
    outputs: list[torch.Tensor | None],
    output_type: str,
    quantiles: list[float],
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
