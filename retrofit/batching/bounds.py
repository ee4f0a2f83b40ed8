"""The device bounds of ragged batched prediction: padded share, working set, stage sizes.

Defaults by device type (a CPU pads little and keeps its forwards cache-sized;
an accelerator pads more and is bounded by the padded rows alone) and the
checks of a caller's bounds, before anything runs. Used by the padded engine
(:mod:`retrofit.batching.engine`), its front ends, the row chunks
(:mod:`retrofit.batching.chunks`) and ``predict-batch``.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from typing import Any

import torch

from retrofit.errors import BatchInputError

__all__ = [
    "DEFAULT_CHUNK_CELLS_BY_DEVICE",
    "DEFAULT_MAX_BUCKET_BYTES_BY_DEVICE",
    "DEFAULT_MAX_PADDED_FRACTION",
    "DEFAULT_MAX_PADDED_FRACTION_BY_DEVICE",
    "DEFAULT_STAGE_FORWARD_CELLS_BY_DEVICE",
    "check_bucket_bounds",
    "check_max_bucket_bytes",
    "check_max_padded_fraction",
    "default_chunk_cells",
    "default_max_bucket_bytes",
    "default_max_padded_fraction",
    "default_stage_forward_cells",
]

#: Bound on each length bucket's padded share of rows and of attention cells
#: in a ragged batched prediction (``retrofit.batching.engine``) on an accelerator,
#: where a wider batch should cost little more than a narrow one (not yet
#: measured on one: ``python -m lab gpu-check``'s ``batched`` part does).
DEFAULT_MAX_PADDED_FRACTION: float = 0.25
#: The bound by device type where it differs. On a CPU a padded cell costs what a
#: real one does and a fused forward saves only per-call overhead, so a CPU pads
#: little: ``results/bench_batched`` (``python -m lab bench --batched``, 2 cores,
#: embedded host, 64 small datasets) has ragged batches at 0.86x a loop of
#: fit/predict at this bound and 0.85x at 25 % (the engine before its cache-sized
#: stage forwards: 0.98-1.01x and 1.14-1.19x).
DEFAULT_MAX_PADDED_FRACTION_BY_DEVICE: Mapping[str, float] = {"cpu": 0.05}
#: Bound on the estimated working set of one fused ICL forward of a ragged batch
#: (:func:`retrofit.batching.padding.icl_working_set_bytes`), by device type; a
#: device not named here has none (an accelerator's memory is bounded by the
#: padded rows alone). A CPU is compute-bound and its caches are small: a fused
#: forward whose working set outgrows them costs more per cell than the
#: per-dataset forwards it replaces, so its buckets stay cache-sized. The value
#: is the cache argument's (a few MiB of L2/L3 per core), not a measured optimum:
#: the budgets measured did not differ beyond noise (``docs/ragged_batches.md``).
DEFAULT_MAX_BUCKET_BYTES_BY_DEVICE: Mapping[str, int] = {"cpu": 8 * 2**20}
#: Cells per row chunk of the stages before ICL (tabpfn v3's and v3.5's
#: ``inference_chunk_cells``, summed over the batch) that the ragged path and
#: the evaluation use, by device type (:mod:`retrofit.batching.chunks`); tabpfn's
#: default, 2048 x 768, is kept where a device is not named. On a CPU a
#: cache-sized chunk is faster and equal up to rounding (a BLAS may block a
#: shorter matrix otherwise; ``tests/retrofit/batching/test_chunks.py``).
#: ``bench``'s ``chunks`` part measures chunked against unchunked
#: (``results/bench``; the figures and the machine: ``docs/cpu_chunks.md``).
DEFAULT_CHUNK_CELLS_BY_DEVICE: Mapping[str, int] = {"cpu": 65_536}
#: Cells (rows x members x columns) of one dataset's forward through the stages
#: before ICL on the padded path, by device type: the dataset's ensemble members
#: are split evenly into the fewest forwards within it
#: (:func:`retrofit.batching.chunks.members_per_stage_forward`); a device not
#: named here runs as many members per forward as tabpfn's batch budget allows.
#: On a CPU a smaller forward's temporaries stay in memory the allocator keeps:
#: those of a forward of 4 members of a few hundred rows are mapped afresh at
#: every forward (glibc returns the largest allocations to the system), and the
#: page faults cost kernel time (docs/ragged_batches.md; ``results/bench_batched``
#: before and after). How many faults a forward takes depends on what the
#: allocator kept from earlier calls, so the gain varies with the process; with
#: an allocator that keeps its memory (docs/cpu_chunks.md) there are none to
#: save and the split only adds forwards.
DEFAULT_STAGE_FORWARD_CELLS_BY_DEVICE: Mapping[str, int] = {"cpu": 16_384}


def default_max_padded_fraction(device: torch.device | str) -> float:
    """The default padded-share bound of ragged batches on ``device`` (see the constants)."""
    kind = torch.device(device).type
    return DEFAULT_MAX_PADDED_FRACTION_BY_DEVICE.get(kind, DEFAULT_MAX_PADDED_FRACTION)


def check_max_padded_fraction(value: Any) -> float:
    """``value`` as a padded-share bound, a float in ``[0, 1)``.

    Raises:
        BatchInputError: If it is not a number in ``[0, 1)``.
    """
    if (
        isinstance(value, bool)
        or not isinstance(value, numbers.Real)
        or not 0.0 <= float(value) < 1.0
    ):
        raise BatchInputError(f"max_padded_fraction must be in [0, 1), got {value!r}")
    return float(value)


def default_chunk_cells(device: torch.device | str) -> int | None:
    """The stage 0-2 chunk size (cells) used on ``device``; None: tabpfn's own."""
    return DEFAULT_CHUNK_CELLS_BY_DEVICE.get(torch.device(device).type)


def default_stage_forward_cells(device: torch.device | str) -> int | None:
    """The cells of one stage 0-2 forward of the padded path on ``device``; None: no bound."""
    return DEFAULT_STAGE_FORWARD_CELLS_BY_DEVICE.get(torch.device(device).type)


def default_max_bucket_bytes(device: torch.device | str) -> int | None:
    """The default working-set bound of a fused ICL forward on ``device``; None: no bound."""
    return DEFAULT_MAX_BUCKET_BYTES_BY_DEVICE.get(torch.device(device).type)


def check_max_bucket_bytes(value: Any) -> int | None:
    """``value`` as a working-set bound in bytes: a positive integer, or None (no bound).

    Raises:
        BatchInputError: If it is neither None nor an integer >= 1.
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise BatchInputError(f"max_bucket_bytes must be an integer >= 1 or None, got {value!r}")
    return int(value)


def check_bucket_bounds(
    max_padded_fraction: float | None, max_bucket_bytes: int | str | None
) -> tuple[float | None, int | str | None]:
    """The caller's bucket bounds, checked before anything runs (None and "auto" kept).

    Raises:
        BatchInputError: A ``max_padded_fraction`` outside ``[0, 1)``, or a
            ``max_bucket_bytes`` that is not ``"auto"``, None or an integer >= 1.
    """
    if max_padded_fraction is not None:
        max_padded_fraction = check_max_padded_fraction(max_padded_fraction)
    if max_bucket_bytes != "auto":
        max_bucket_bytes = check_max_bucket_bytes(max_bucket_bytes)
    return max_padded_fraction, max_bucket_bytes
