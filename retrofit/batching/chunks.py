"""Cache-sized row chunks of tabpfn's stages before ICL: faster on a CPU, equal up to rounding.

TabPFN v3 and v3.5 run stages 0-2 (cell embedding, distribution embedder,
column aggregator) over row chunks of ``inference_chunk_cells`` cells summed
over the batch (rows per chunk: the cells over batch times columns); the
default (2048 x 768) is sized for an accelerator's memory. The stages are
row-local given the train rows' inducing states, so a smaller chunk runs the
same operations on fewer rows at a time: on a CPU the working set then fits
the caches, which is faster. The result equals the unchunked one up to
rounding: a chunk runs the stages' projections over a shorter matrix, which a
BLAS may block otherwise (bit-identical on AVX-512 at 8 rows and more, 1.5
float32 ulps with ATen and MKL on AVX2; a 1- or 2-row matrix takes another
code path and moves more), so a chunk keeps :data:`MIN_CHUNK_ROWS` rows.
``tests/retrofit/batching/test_chunks.py`` bounds the change by the ulps bound
stated for a whole forward over a taller or shorter matrix.

:func:`chunk_cells_for` is the chunk size for one forward's batch and
columns; :func:`cache_sized_chunks` applies it to every forward of the given
models for the duration of a block and then restores tabpfn's setting, so a
caller's model keeps its own. The ragged ``predict_batched`` and the paper's
evaluation use it on a CPU (:data:`retrofit.batching.bounds.DEFAULT_CHUNK_CELLS_BY_DEVICE`);
users get the same through the model's own setting (README: "Faster
predictions on a CPU"). :func:`members_per_stage_forward` is how many of a
dataset's members the padded path runs through the stages in one forward
(:data:`retrofit.batching.bounds.DEFAULT_STAGE_FORWARD_CELLS_BY_DEVICE`).
Hosts without the setting (the v2 family) are left as they are.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterable, Iterator
from typing import Any

import torch
from torch import nn

from retrofit.batching.bounds import default_chunk_cells, default_stage_forward_cells

__all__ = [
    "CHUNK_CELLS_ATTR",
    "MIN_CHUNK_ROWS",
    "cache_sized_chunks",
    "chunk_cells_for",
    "lowered_chunk_cells",
    "members_per_stage_forward",
]

#: The public attribute of tabpfn v3 and v3.5 models that holds the chunk size.
CHUNK_CELLS_ATTR = "inference_chunk_cells"
#: Fewest rows a lowered chunk keeps, well above the 1-2 row matrices a BLAS runs otherwise.
MIN_CHUNK_ROWS = 64


def chunk_cells_for(device: torch.device | str, batch: int, columns: int) -> int | None:
    """Cells per stage 0-2 chunk for a forward of ``batch`` members and ``columns`` features.

    Returns:
        The device's default (:func:`retrofit.batching.bounds.default_chunk_cells`),
        raised so that a chunk keeps :data:`MIN_CHUNK_ROWS` rows; None where
        the device keeps tabpfn's own.
    """
    cells = default_chunk_cells(device)
    return None if cells is None else max(cells, MIN_CHUNK_ROWS * batch * columns)


def members_per_stage_forward(
    model: nn.Module, device: torch.device | str, members: int, rows: int, columns: int, limit: int
) -> int:
    """How many of a dataset's ``members`` go through the stages before ICL in one forward.

    On a device with a cell bound (:func:`retrofit.batching.bounds.default_stage_forward_cells`)
    the members are split evenly into the fewest forwards of at most that many
    cells (``rows x members x columns``), at least one member each; never more
    than ``limit`` (tabpfn's batch budget). A member's stages do not read the
    other members, so a split changes only the height of the projections'
    matrices (rounding within the ulps bound of a changed shape). Hosts
    without row chunks (the v2 family) keep ``limit``, as they keep their
    chunks: the bound was measured on v3.

    Args:
        model: The host the members run on.
        device: Where the stages run.
        members: The dataset's members that share a model and an input shape.
        rows: Their rows (train then test).
        columns: Their features.
        limit: tabpfn's members per forward for this shape.
    """
    cells = default_stage_forward_cells(device)
    if cells is None or not isinstance(getattr(model, CHUNK_CELLS_ATTR, None), int):
        return limit
    forwards = max(1, math.ceil(members * rows * columns / cells))
    return max(1, min(limit, math.ceil(members / forwards)))


@contextlib.contextmanager
def cache_sized_chunks(models: Iterable[nn.Module], device: torch.device | str) -> Iterator[None]:
    """Every forward of ``models`` in the block runs with :func:`chunk_cells_for` chunks.

    A forward pre-hook reads the forward's ``(rows, batch, columns)`` input and
    lowers the model's setting for that call (never raises it above the
    model's own); on exit the hooks go and every setting is restored.

    Args:
        models: The models of a fit (those without the setting are skipped).
        device: Where they run (a device without a default changes nothing).
    """
    saved: list[tuple[nn.Module, int]] = []
    hooks = []
    try:
        if default_chunk_cells(device) is not None:
            for model in models:
                current = getattr(model, CHUNK_CELLS_ATTR, None)
                if isinstance(current, int):
                    saved.append((model, current))
                    hooks.append(
                        model.register_forward_pre_hook(
                            _lowering_hook(current, device), with_kwargs=True
                        )
                    )
        yield
    finally:
        for hook in hooks:
            hook.remove()
        for model, current in saved:
            setattr(model, CHUNK_CELLS_ATTR, current)


@contextlib.contextmanager
def lowered_chunk_cells(model: nn.Module, cells: int | None) -> Iterator[None]:
    """Sets ``model``'s chunk size to ``cells`` for the block if that is lower, then restores it."""
    current = getattr(model, CHUNK_CELLS_ATTR, None)
    lower = isinstance(current, int) and cells is not None and cells < current
    if lower:
        setattr(model, CHUNK_CELLS_ATTR, cells)
    try:
        yield
    finally:
        if lower:
            setattr(model, CHUNK_CELLS_ATTR, current)


def _lowering_hook(own: int, device: torch.device | str) -> Any:
    def hook(model: nn.Module, args: tuple, kwargs: dict) -> None:
        x = args[0] if args else kwargs.get("x")
        if isinstance(x, dict):  # v3's forward takes {"main": x} too
            x = x.get("main")
        if isinstance(x, torch.Tensor) and x.dim() == 3:
            cells = chunk_cells_for(device, x.shape[1], x.shape[2])
            setattr(model, CHUNK_CELLS_ATTR, own if cells is None else min(own, cells))

    return hook
