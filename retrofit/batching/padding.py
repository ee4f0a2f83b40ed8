"""Exact ragged batching of the ICL stage by null padding.

After the retrofit a zero carrier in the ICL stage is a true NULL: it gets an
exactly zero update (so it stays zero through every block), it adds no mass to
any softmax denominator, and it does not count in ``n_eff``. So the ICL
carriers of datasets with different numbers of train and test rows can be
padded with zero rows to one length and run through the ICL blocks in one
forward, with no mask, and every real row's output is the one it gets alone.

This module is host-agnostic. A host opts in by registering an
:class:`~retrofit.hosts.common.base.ICLStage` for its class
(:func:`retrofit.hosts.common.base.register_icl_stage`); only a *patched* model of
that class gets it (padding is not exact on an unpatched host).
:func:`run_padded_icl` pads, runs and unpads; :func:`plan_buckets` groups
datasets by length so that the padding stays a bounded fraction of the work.

Layout of one padded batch element (``N`` = longest train part, ``M`` =
longest test part of the bucket)::

    [ train rows (N_d) | zeros (N - N_d) | test rows (M_d) | zeros (M - M_d) ]

with ``single_eval_pos = N``, so every key row is a train row or a null.

Row weights (:mod:`retrofit.hosts.common.row_weights`): a dataset whose train
rows carry weights ``(B_d, N_d)`` (its stages before ICL ran under them) gets
them as the blocks' source weights in the padded forward, zeros for its
padding rows (which are null, so any weight would do), and as the decoder's
when a classifier decodes it from its own train rows.

Shape letters: B batch elements (ensemble members of one dataset), R rows
(train then test), N train rows, M test rows, D ICL width, O decoder outputs;
``...`` the trailing carrier dimensions of a row (``D`` for v3, ``(C, D)`` for
v2's per-cell carriers).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

from retrofit.batching.bounds import DEFAULT_MAX_PADDED_FRACTION, check_max_padded_fraction
from retrofit.errors import BatchInputError
from retrofit.hosts.common.base import icl_stage_for, runs_blocks_to_test_rows
from retrofit.hosts.common.row_weights import source_weights

__all__ = [
    "DEFAULT_MAX_ROWS_PER_FORWARD",
    "ICL_WORKING_SET_WIDTHS",
    "PaddingStats",
    "icl_working_set_bytes",
    "key_rows",
    "pad_carriers",
    "pad_weights",
    "plan_buckets",
    "run_padded_icl",
]

#: Bound on the padded rows (summed over the batch) of one ICL forward.
DEFAULT_MAX_ROWS_PER_FORWARD = 200_000

#: Carrier-sized tensors an ICL block holds per row at its peak: the carrier,
#: its norm, q, k, v, the attention output and its projection, and the
#: feed-forward's hidden layer (twice the width at tabpfn v3's ``ff_factor=2``).
#: An estimate for bounding buckets, not an allocator's count.
ICL_WORKING_SET_WIDTHS = 9


def icl_working_set_bytes(row_shape: Sequence[int], dtype: torch.dtype) -> int:
    """Estimated bytes an ICL forward touches per padded row of ``row_shape`` carriers.

    Args:
        row_shape: The trailing carrier shape of one row (``(D,)`` for v3,
            ``(C, D)`` for v2's per-cell carriers).
        dtype: The carriers' dtype.
    """
    cells = 1
    for size in row_shape:
        cells *= int(size)
    return cells * torch.empty((), dtype=dtype).element_size() * ICL_WORKING_SET_WIDTHS


def key_rows(carriers: torch.Tensor, num_test: int) -> int:
    """Key rows of ``(B, R, ...)`` carriers from :meth:`ICLStage.embed`, given the test rows."""
    return carriers.shape[1] - num_test


@dataclasses.dataclass
class PaddingStats:
    """How much of the padded work was padding, summed over forwards.

    Attributes:
        real_rows: Rows of the datasets (train plus test), per batch element.
        padded_rows: Rows of the padded tensors.
        real_cells: Query-key pairs of the datasets' own attention.
        padded_cells: Query-key pairs the padded forwards computed.
        forwards: Number of padded ICL forwards.
    """

    real_rows: int = 0
    padded_rows: int = 0
    real_cells: int = 0
    padded_cells: int = 0
    forwards: int = 0

    @property
    def padded_row_fraction(self) -> float:
        """Share of the computed rows that were padding."""
        return 1.0 - self.real_rows / self.padded_rows if self.padded_rows else 0.0

    @property
    def padded_cell_fraction(self) -> float:
        """Share of the computed attention cells that involved padding."""
        return 1.0 - self.real_cells / self.padded_cells if self.padded_cells else 0.0

    def add(self, shapes: Sequence[tuple[int, int]], batch: Sequence[int] | None = None) -> None:
        """Counts one padded forward over datasets of ``(n_train, n_test)`` shapes.

        Args:
            shapes: ``(n_train, n_test)`` per dataset.
            batch: Batch elements (ensemble members) per dataset; 1 each when None.
        """
        batch = [1] * len(shapes) if batch is None else list(batch)
        n_max = max(n for n, _ in shapes)
        m_max = max(m for _, m in shapes)
        for (n, m), b in zip(shapes, batch, strict=True):
            self.real_rows += b * (n + m)
            self.padded_rows += b * (n_max + m_max)
            self.real_cells += b * (n + m) * n
            self.padded_cells += b * (n_max + m_max) * n_max
        self.forwards += 1

    def to_dict(self) -> dict[str, float]:
        """The counts and both fractions, JSON-able."""
        return {
            **dataclasses.asdict(self),
            "padded_row_fraction": self.padded_row_fraction,
            "padded_cell_fraction": self.padded_cell_fraction,
        }


def _fractions(shapes: Sequence[tuple[int, int]], batch: Sequence[int]) -> PaddingStats:
    stats = PaddingStats()
    stats.add(shapes, batch)
    return stats


def plan_buckets(
    shapes: Sequence[tuple[int, int]],
    *,
    batch: Sequence[int] | None = None,
    max_padded_fraction: float = DEFAULT_MAX_PADDED_FRACTION,
    max_rows: int = DEFAULT_MAX_ROWS_PER_FORWARD,
    row_bytes: int = 0,
    max_bytes: int | None = None,
) -> list[list[int]]:
    """Groups datasets into buckets that pad little and fit a working-set budget.

    Datasets are taken longest train part first; each joins the open bucket if
    the bucket's padded share of rows *and* of attention cells stays at most
    ``max_padded_fraction``, its padded rows at most ``max_rows`` and its
    working set (padded rows times ``row_bytes``) at most ``max_bytes``, else
    it opens a new bucket. Every bucket therefore meets the bounds (a bucket of
    one dataset pads nothing and is never refused), and so does their sum.

    Args:
        shapes: ``(n_train, n_test)`` per dataset.
        batch: Batch elements (ensemble members) per dataset; 1 each when None.
        max_padded_fraction: Bound in ``[0, 1)`` on each bucket's padded share.
        max_rows: Bound on a bucket's padded rows summed over its batch
            elements (memory); a single dataset
            longer than this still gets a bucket of its own.
        row_bytes: Working-set bytes per padded row
            (:func:`icl_working_set_bytes`); 0 counts nothing.
        max_bytes: Bound on a bucket's working set; None: no bound. A CPU
            keeps its fused forwards cache-sized
            (:data:`retrofit.batching.bounds.DEFAULT_MAX_BUCKET_BYTES_BY_DEVICE`).

    Returns:
        Buckets of dataset indices; every index appears once.

    Raises:
        BatchInputError: If ``max_padded_fraction`` is not in ``[0, 1)``.
    """
    max_padded_fraction = check_max_padded_fraction(max_padded_fraction)
    batch = [1] * len(shapes) if batch is None else list(batch)
    order = sorted(range(len(shapes)), key=lambda i: (-shapes[i][0], -shapes[i][1], i))
    buckets: list[list[int]] = []
    for i in order:
        if buckets:
            members = [*buckets[-1], i]
            trial = _fractions([shapes[j] for j in members], [batch[j] for j in members])
            if (
                trial.padded_rows <= max_rows
                and (max_bytes is None or trial.padded_rows * row_bytes <= max_bytes)
                and trial.padded_row_fraction <= max_padded_fraction
                and trial.padded_cell_fraction <= max_padded_fraction
            ):
                buckets[-1].append(i)
                continue
        buckets.append([i])
    return buckets


def pad_carriers(
    carriers: Sequence[torch.Tensor], num_train: Sequence[int]
) -> tuple[torch.Tensor, int]:
    """Stacks ragged ICL carriers with zero rows (layout in the module docstring).

    Args:
        carriers: ``(B_d, R_d, ...)`` per dataset, train rows first, one
            trailing shape for all.
        num_train: ``N_d`` per dataset.

    Returns:
        ``(x_BRD, N)``: the padded batch (datasets in order along B) and the
        common number of key rows.
    """
    n_max = max(num_train)
    m_max = max(x.shape[1] - n for x, n in zip(carriers, num_train, strict=True))
    first = carriers[0]
    x_BRD = first.new_zeros((sum(x.shape[0] for x in carriers), n_max + m_max, *first.shape[2:]))
    start = 0
    for x, n in zip(carriers, num_train, strict=True):
        b, m = x.shape[0], x.shape[1] - n
        x_BRD[start : start + b, :n] = x[:, :n]
        x_BRD[start : start + b, n_max : n_max + m] = x[:, n:]
        start += b
    return x_BRD, n_max


def pad_weights(
    weights: Sequence[torch.Tensor | None],
    carriers: Sequence[torch.Tensor],
    num_train: Sequence[int],
) -> torch.Tensor | None:
    """The datasets' row weights as one ``(B, N - T)`` batch, zeros for padding rows.

    Args:
        weights: ``(B_d, N_d)`` or ``(N_d,)`` per dataset over its train rows
            (the key rows after the ``T`` learned rows a host adds first, v2.5's
            thinking rows), or None for a dataset whose rows count once.
        carriers: The datasets' carriers ``(B_d, R_d, ...)``.
        num_train: Their key rows ``T + N_d``.

    Returns:
        The padded weights, None when no dataset has any.

    Raises:
        BatchInputError: If a dataset's weights do not fit its rows.
    """
    if all(w is None for w in weights):
        return None
    learned = {n - w.shape[-1] for w, n in zip(weights, num_train, strict=True) if w is not None}
    if len(learned) != 1 or min(learned) < 0:
        raise BatchInputError(
            f"row weights of {[None if w is None else w.shape[-1] for w in weights]} rows do "
            f"not fit datasets of {list(num_train)} key rows"
        )
    (T,) = learned
    first = next(w for w in weights if w is not None)
    w_BN = first.new_zeros((sum(x.shape[0] for x in carriers), max(num_train) - T))
    start = 0
    for w, x, n in zip(weights, carriers, num_train, strict=True):
        b = x.shape[0]
        w_BN[start : start + b, : n - T] = 1.0 if w is None else w
        start += b
    return w_BN


def run_padded_icl(
    model: nn.Module,
    carriers: Sequence[torch.Tensor],
    num_train: Sequence[int],
    *,
    stats: PaddingStats | None = None,
    decode: Callable[[int, torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
    weights: Sequence[torch.Tensor | None] | None = None,
    **forward_kwargs: Any,
) -> list[torch.Tensor]:
    """One ICL forward over the zero-padded carriers of several datasets.

    Args:
        model: A host with a registered :class:`ICLStage` (a patched host).
        carriers: ``(B_d, R_d, ...)`` per dataset, from the stage's ``embed``.
        num_train: ``N_d`` per dataset (its key rows).
        stats: Accumulates the padding counts when given.
        decode: ``decode(d, keys, test)`` decodes dataset ``d`` from its own
            key rows ``(B_d, N_d, ...)`` and test rows ``(B_d, M_d, ...)``
            (a classifier's decoder may read the train rows); None: the
            stage's ``decode`` of the test rows.
        weights: Per dataset, the row weights its ``embed`` ran under
            (:func:`pad_weights`), or None; None: every row counts once.
        **forward_kwargs: Passed to the stage (e.g. ``performance_options``).

    Returns:
        The decoded output ``(M_d, B_d, O)`` of each dataset's test rows; the
        padded rows are dropped before the decoder. With the stage's decoder
        (``decode`` None) and a stage that has ``run_blocks_to_test_rows``, the
        last block runs for the test rows alone (its key rows' outputs would
        be dropped).
    """
    stage = icl_stage_for(model)
    weights = [None] * len(carriers) if weights is None else list(weights)
    x_BRD, n_max = pad_carriers(carriers, num_train)
    if stats is not None:
        shapes = [(n, x.shape[1] - n) for x, n in zip(carriers, num_train, strict=True)]
        stats.add(shapes, [x.shape[0] for x in carriers])
    # Decoding the test rows alone, the last block need not update the key rows.
    test_rows_only = decode is None and runs_blocks_to_test_rows(stage)
    with source_weights(model, pad_weights(weights, carriers, num_train)):
        if test_rows_only:
            x_BMD = stage.run_blocks_to_test_rows(model, x_BRD, n_max, **forward_kwargs)
        else:
            x_BRD = stage.run_blocks(model, x_BRD, n_max, **forward_kwargs)
            x_BMD = x_BRD[:, n_max:]
    outputs = []
    start = 0
    for d, (x, n) in enumerate(zip(carriers, num_train, strict=True)):
        b, m = x.shape[0], x.shape[1] - n
        test = x_BMD[start : start + b, :m]
        if decode is None:
            outputs.append(stage.decode(model, test))
        else:
            w = weights[d]
            with source_weights(model, None if w is None else w.expand(b, -1)):
                outputs.append(decode(d, x_BRD[start : start + b, :n], test))
        start += b
    return outputs
