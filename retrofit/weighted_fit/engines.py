"""tabpfn's inference engines with every member's forwards under its row weights.

A weighted fit's ensemble members (:class:`~retrofit.weighted_preprocessing.WeightedEnsembleMember`)
carry the weight of each of their train rows (``row_weights``, ``(N,)``,
aligned with the member's ``X_train`` after tabpfn's own row selection). The
model must count those rows that many times in every forward that reads
them (:func:`retrofit.row_weights`). tabpfn's engines call the model in one
place each, for a group of members that share a model and a prepared shape:

* ``fit_mode="low_memory"`` and ``"fit_preprocessors"``: ``_call_model``, per
  group of members, at every predict (the train rows go through the model
  with the test rows);
* ``fit_mode="fit_with_cache"``: ``_build_cache``, per group, once at fit;
  the KV cache then carries the weights
  (:mod:`retrofit.hosts.common.presence_cache`), so the predict forwards,
  which send the test rows only, need nothing more.

The subclasses here run those two methods once per run of members that share
one weight vector, inside :func:`retrofit.row_weights` with that vector, and
hand the outputs back in the group's positions. Without row subsampling every
member holds the same rows with the same weights: one run, so the forwards
are the groups tabpfn forms, with the weights added. Members whose weights
are all 1 run without a block (the forward without weights, bit for bit).

Shape letters: N a member's train rows.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import torch

from retrofit.hosts.common.row_weights import row_weights
from retrofit.tabpfn_surface import (
    inference_engine_cache_preprocessing,
    inference_engine_explicit_kv_cache,
    inference_engine_on_demand,
    member_model_index,
)

__all__ = [
    "WeightedCachePreprocessingEngine",
    "WeightedKVCacheEngine",
    "WeightedOnDemandEngine",
    "member_weight_runs",
    "weighted_inference_engine",
]


class _MissingEngine:
    """Stands in for an engine class the installed tabpfn lacks: building it raises."""

    source: Any = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.source()  # MissingTabPFNName: one line naming the name and the feature


def _base(engine: Any) -> type:
    """The tabpfn engine class, or a stand-in that raises its missing-name error when built."""
    if isinstance(engine, type):
        return engine
    return type("MissingEngine", (_MissingEngine,), {"source": staticmethod(engine)})


def member_weight_runs(members: Sequence[Any]) -> list[tuple[list[int], np.ndarray | None]]:
    """The positions of ``members`` sharing one weight vector, in order of first appearance.

    Returns:
        ``(positions, w_N)`` per run; ``w_N`` is None where the members carry no
        weights or weights all 1 (they run as tabpfn runs them).
    """
    runs: list[tuple[list[int], np.ndarray | None]] = []
    for position, member in enumerate(members):
        w_N = getattr(member, "row_weights", None)
        if w_N is not None and np.all(w_N == 1.0):
            w_N = None
        for positions, shared in runs:
            if shared is w_N or (
                shared is not None
                and w_N is not None
                and shared.shape == w_N.shape
                and np.array_equal(shared, w_N)
            ):
                positions.append(position)
                break
        else:
            runs.append(([position], w_N))
    return runs


@contextlib.contextmanager
def _weighted(model: torch.nn.Module, w_N: np.ndarray | None) -> Iterator[None]:
    if w_N is None:
        yield
    else:
        with row_weights(model, w_N):
            yield


def _by_runs(
    engine: Any,
    device: torch.device,
    members: Sequence[Any],
    call: Callable[[list[int]], list[tuple[list[int], Any]]],
) -> list[tuple[list[int], Any]]:
    """``call(positions)`` per weight run under its weights; outputs at the group's positions."""
    outputs: list[tuple[list[int], Any]] = []
    for positions, w_N in member_weight_runs(members):
        model = engine.model_caches[member_model_index(members[positions[0]].config)].get(device)
        with _weighted(model, w_N):
            part = call(positions)
        outputs.extend(([positions[i] for i in inner], out) for inner, out in part)
    return outputs


class _WeightedForwards:
    """``_call_model`` of the full-forward engines, run per weight run of the group."""

    def _call_model(
        self, *, device: torch.device, members: list[Any], X_tests: list[Any], **options: Any
    ) -> list[tuple[list[int], Any]]:
        parent = super()

        def call(positions: list[int]) -> list[tuple[list[int], Any]]:
            return parent._call_model(
                device=device,
                members=[members[i] for i in positions],
                X_tests=[X_tests[i] for i in positions],
                **options,
            )

        return _by_runs(self, device, members, call)


class WeightedOnDemandEngine(_WeightedForwards, _base(inference_engine_on_demand)):  # type: ignore[misc]
    """The ``fit_mode="low_memory"`` engine, each member's forwards under its row weights."""


class WeightedCachePreprocessingEngine(
    _WeightedForwards,
    _base(inference_engine_cache_preprocessing),  # type: ignore[misc]
):
    """The ``fit_mode="fit_preprocessors"`` engine, each member's forwards under its weights."""


class WeightedKVCacheEngine(_base(inference_engine_explicit_kv_cache)):  # type: ignore[misc]
    """The ``fit_mode="fit_with_cache"`` engine, each cache built under its members' weights."""

    def _build_cache(
        self, *, device: torch.device, members: list[Any], **options: Any
    ) -> tuple[list[tuple[list[int], Any]], torch.device]:
        parent = super()

        def call(positions: list[int]) -> list[tuple[list[int], Any]]:
            caches, _ = parent._build_cache(
                device=device, members=[members[i] for i in positions], **options
            )
            return caches

        return _by_runs(self, device, members, call), device


def weighted_inference_engine(
    *,
    fit_mode: str,
    X_train: np.ndarray,
    y_train: np.ndarray,
    ensemble_preprocessor: Any,
    models: list[Any],
    devices_: Sequence[torch.device],
    byte_size: int,
    forced_inference_dtype_: torch.dtype | None,
    memory_saving_mode: Any,
    use_autocast_: bool,
    task_type: str,
    inference_mode: bool = True,
    keep_cache_on_device: bool = True,
    kv_cache_precision: Any = None,
    enable_torch_compile: bool = False,
) -> Any:
    """The weighted engine of ``fit_mode``, built as tabpfn's ``create_inference_engine`` builds it.

    Takes the arguments of ``tabpfn.base.create_inference_engine``.

    Raises:
        ValueError: A ``fit_mode`` with no weighted engine (``"batched"``).
    """
    common = {
        "X_train": X_train,
        "y_train": y_train,
        "ensemble_preprocessor": ensemble_preprocessor,
        "models": models,
        "devices": devices_,
        "dtype_byte_size": byte_size,
        "force_inference_dtype": forced_inference_dtype_,
        "save_peak_mem": memory_saving_mode,
        "enable_torch_compile": enable_torch_compile,
    }
    if fit_mode == "low_memory":
        return WeightedOnDemandEngine(**common)
    if fit_mode == "fit_preprocessors":
        return WeightedCachePreprocessingEngine(**common, inference_mode=inference_mode)
    if fit_mode == "fit_with_cache":
        return WeightedKVCacheEngine(
            **common,
            autocast=use_autocast_,
            task_type=task_type,
            keep_cache_on_device=keep_cache_on_device,
            kv_cache_precision=kv_cache_precision,
        )
    raise ValueError(f"row weights: fit_mode={fit_mode!r} has no weighted inference engine")
