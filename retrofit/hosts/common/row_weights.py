"""How many times each train row of a forward counts: the row weights of a patched host.

``with row_weights(model, weights_BN): model(x, y, ...)`` runs every forward of
the patched ``model`` inside the block as if train row ``j`` were in the
context ``w_j`` times: every operation that reads across train rows counts it
``w_j`` times. An integer weight ``k`` is the row given ``k`` times, 0 is the
row removed, and real weights interpolate by the same formulas (a definition:
scaling every weight by ``c`` is ``c`` copies of the data). ``weights_BN`` is
``(B, N)`` (one row per batch element: tabpfn's ensemble members or the
datasets of a batch) or ``(N,)`` (the same for every element), finite and
``>= 0``, with a positive weight in every batch element. Outside the block, or
with every weight 1, the model computes exactly what it computes without it
(the same code path, so the same bits). Presence (:func:`row_presence
<retrofit.hosts.common.row_presence.row_presence>`) is the special case of
weights in ``{0, 1}``: one mechanism, this module's.

What each host does with the weights (identical rows have identical states at
every layer, so counting a row ``w_j`` times wherever rows meet is the whole
law):

* rows of weight 0 are dropped before the first stage that reads across rows:
  each host's stages before its blocks run once per pattern of nonzero weights
  (:func:`on_supported_rows`) on those rows and every test row, and a dropped
  row leaves them as the zero carrier with no target injected, which the
  patched blocks keep null and inert;
* where every weight of a run is positive, the host's own cross-row statistics
  are replaced by weighted ones (:mod:`retrofit.hosts.common.weighted_stats`):
  imputation means and standard scalers (``sum w x / sum w``; the variance over
  ``sum w - 1`` where the host divides by ``N - 1``), v3.5's ECDF ranks (by
  cumulative weight), the imputation mean of the targets; v3's and v3.5's
  inducing points read the train rows with ``log w_j`` added to each key and
  ``n_eff = sum w`` in their length scaling;
* the patched blocks and the classifiers' many-class decoder weight every
  train row as a source by ``w_j p_j`` and count ``n_eff = sum_j w_j [p_j > 0]``
  (``support="count"``) or ``sum_j w_j p_j`` (``"mass"``): their *source
  weights* (:func:`source_weights`), ``(B, N)`` over the rows after any learned
  rows (v2.5's thinking rows weigh 1); a KV cache built under weights carries
  them beside the train presence (:mod:`retrofit.hosts.common.presence_cache`).

Refused, each in one line (:class:`~retrofit.errors.InvalidRowWeightsError`): a
forward from a KV cache under weights (the cache holds the weights it was
built with), building a cache over several patterns of rows of weight 0, and
on v2 a non-finite train target under weights other than 0/1 (its label
encoding would read the imputed mean). Not exact: real weights are a
definition (the same formulas), not a repetition; on CUDA in bfloat16 or
float16 the attention's bias ``log(w p)`` is rounded to that dtype (weight 2
acts as about 1.9965); ``torch.compile`` of the weighted stages is not covered.

Shape letters: B batch elements, N train rows, G batch elements sharing one
pattern of nonzero weights, K their rows of nonzero weight, R rows (train then
test).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import numpy as np
import torch
from torch import nn

from retrofit.errors import InvalidRowWeightsError, UnsupportedArchitectureError
from retrofit.hosts.common.base import host_patcher_for, patch_config_of

__all__ = [
    "ROW_WEIGHTS_ATTR",
    "SOURCE_WEIGHTS_ATTR",
    "BatchCursor",
    "ReadsSourceWeights",
    "SupportGroup",
    "active_row_weights",
    "enter_row_weights",
    "is_binary",
    "nested_row_weights",
    "on_supported_rows",
    "refuse",
    "row_weights",
    "source_weights",
    "support_groups",
    "train_targets_of",
]

#: Where :func:`row_weights` keeps the weights on the model (in ``__dict__``).
ROW_WEIGHTS_ATTR = "_retrofit_row_weights_BN"

#: Where :func:`source_weights` puts a forward's source weights on a patched block.
SOURCE_WEIGHTS_ATTR = "_retrofit_source_weights_BN"

#: ``(batch_idx_G, rows_K)``: batch elements sharing one pattern, and its rows of nonzero weight.
SupportGroup = tuple[torch.Tensor, torch.Tensor]


@contextlib.contextmanager
def row_weights(model: nn.Module, weights_BN: torch.Tensor | np.ndarray) -> Iterator[nn.Module]:
    """Counts train row ``j`` ``w_j`` times in every forward of the patched ``model`` inside.

    Args:
        model: A model patched by :func:`retrofit.patch` whose host closes its
            input rows (every host class tabpfn 9.2 ships: v2, v2.5, v2.6, v3, v3.5).
        weights_BN: ``(B, N)`` or ``(N,)``, finite and ``>= 0``, a positive entry in
            every batch element: the multiplicity of each of the ``N`` train rows
            of each forward (a tensor or a numpy array; never modified).

    Yields:
        ``model``.

    Raises:
        NotPatchedError: If ``model`` is not patched.
        UnsupportedArchitectureError: If its host does not close its input rows.
        InvalidRowWeightsError: If ``weights_BN`` is not such an array, or a block
            of weights or presence is already active on ``model``.
    """
    with enter_row_weights(model, _checked(weights_BN), "row_weights"):
        yield model


@contextlib.contextmanager
def enter_row_weights(model: nn.Module, weights_BN: torch.Tensor, caller: str) -> Iterator[None]:
    """Sets validated weights ``(B, N)`` float64 on ``model`` for the block (``caller`` errs)."""
    patch_config_of(model)  # raises NotPatchedError
    if not host_patcher_for(model).closes_input_rows:
        raise UnsupportedArchitectureError(
            f"{caller}: {type(model).__name__}'s patch does not close its input rows"
        )
    if ROW_WEIGHTS_ATTR in model.__dict__:
        raise InvalidRowWeightsError(
            f"{caller}: a block of row weights or presence is already active on this model; "
            "end it before starting another"
        )
    model.__dict__[ROW_WEIGHTS_ATTR] = weights_BN
    try:
        yield
    finally:
        model.__dict__.pop(ROW_WEIGHTS_ATTR, None)


def _checked(weights_BN: torch.Tensor | np.ndarray) -> torch.Tensor:
    """``weights_BN`` as a float64 ``(B, N)`` CPU tensor (a copy), validated where it enters."""
    if isinstance(weights_BN, np.ndarray):
        if weights_BN.dtype.kind not in "biuf":
            raise InvalidRowWeightsError(
                f"row_weights: weights_BN must be numeric, got a numpy array of {weights_BN.dtype}"
            )
        weights_BN = torch.from_numpy(np.asarray(weights_BN, dtype=np.float64))
    if not isinstance(weights_BN, torch.Tensor) or weights_BN.dim() not in (1, 2):
        raise InvalidRowWeightsError(
            "row_weights: weights_BN must be a (B, N) or (N,) tensor of finite weights >= 0, "
            f"got {type(weights_BN).__name__} {tuple(getattr(weights_BN, 'shape', ()))}"
        )
    if weights_BN.is_complex() or weights_BN.shape[-1] == 0:
        raise InvalidRowWeightsError(
            f"row_weights: weights_BN must be real with at least one train row, got "
            f"{weights_BN.dtype} {tuple(weights_BN.shape)}"
        )
    w_BN = weights_BN.detach().to("cpu", torch.float64).reshape(-1, weights_BN.shape[-1])
    if not bool(torch.isfinite(w_BN).all()):
        raise InvalidRowWeightsError("row_weights: weights_BN holds NaN or infinity")
    if bool((w_BN < 0).any()):
        raise InvalidRowWeightsError("row_weights: weights_BN holds a negative weight")
    if not bool((w_BN > 0).any(dim=-1).all()):
        raise InvalidRowWeightsError(
            "row_weights: a batch element has every weight 0 (an empty context); give it "
            "a row of positive weight"
        )
    return w_BN.clone() if w_BN.data_ptr() == weights_BN.data_ptr() else w_BN


def is_binary(w: torch.Tensor) -> bool:
    """Whether every weight is 0 or 1 (presence: a dropped row is the null carrier there)."""
    return bool(((w == 0) | (w == 1)).all())


def active_row_weights(model: nn.Module, batch: int, num_train: int) -> torch.Tensor | None:
    """The weights of this forward's train rows ``(B, N)`` (float64, CPU), None if all are 1.

    Called by the hosts' overrides where ``B`` and ``N`` are known. None outside
    :func:`row_weights`, and when every weight is 1 (the forward is then the
    host's, bit for bit).

    Raises:
        InvalidRowWeightsError: If the weights do not fit the forward's ``(B, N)``.
    """
    w = model.__dict__.get(ROW_WEIGHTS_ATTR)
    if w is None:
        return None
    if w.shape[-1] != num_train or w.shape[0] not in (1, batch):
        raise InvalidRowWeightsError(
            f"the row weights' shape {tuple(w.shape)} does not fit a forward of {batch} batch "
            f"elements and {num_train} train rows; pass ({batch}, {num_train}) or ({num_train},)"
        )
    if bool((w == 1).all()):
        return None
    return w.expand(batch, num_train)


def support_groups(w_BN: torch.Tensor) -> list[SupportGroup]:
    """The distinct patterns of nonzero weights of ``w_BN``: their batch elements and rows."""
    patterns_GN, inverse_B = torch.unique(w_BN > 0, dim=0, return_inverse=True)
    return [
        (torch.nonzero(inverse_B == g).flatten(), torch.nonzero(pattern_N).flatten())
        for g, pattern_N in enumerate(patterns_GN)
    ]


@contextlib.contextmanager
def nested_row_weights(model: nn.Module, w_GK: torch.Tensor | None) -> Iterator[None]:
    """``w_GK`` as ``model``'s row weights inside (none if None or all 1); the outer after.

    A host stage run on one group's rows (:func:`on_supported_rows`) sees a
    forward of ``G`` elements and ``K`` train rows whose weights are all
    positive: its own calls of overridden methods then weight those rows.
    """
    outer = model.__dict__.pop(ROW_WEIGHTS_ATTR, None)
    if w_GK is not None and not bool((w_GK == 1).all()):
        model.__dict__[ROW_WEIGHTS_ATTR] = w_GK
    try:
        yield
    finally:
        model.__dict__.pop(ROW_WEIGHTS_ATTR, None)
        if outer is not None:
            model.__dict__[ROW_WEIGHTS_ATTR] = outer


def on_supported_rows(
    model: nn.Module,
    run: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor],
    w_BN: torch.Tensor,
    num_rows: int,
    device: torch.device,
) -> torch.Tensor:
    """Runs a host's stage on the rows of nonzero weight of each pattern, in place.

    Args:
        model: The patched host; inside each ``run`` its row weights are the
            group's (:func:`nested_row_weights`), all positive.
        run: ``run(batch_G, rows_K, rows) -> (G or 1, len(rows), ...)``: the
            stage on batch elements ``batch_G``, with ``rows_K`` the train rows
            of nonzero weight and ``rows`` those followed by every test row.
        w_BN: The forward's weights (:func:`active_row_weights`).
        num_rows: Train plus test rows ``R`` of the forward.
        device: Where the index tensors go.

    Returns:
        ``(B, R, ...)``: each group's output at its rows, exact zeros at rows of weight 0.
    """
    B, N = w_BN.shape
    test_rows = torch.arange(N, num_rows, device=device)
    out_BR: torch.Tensor | None = None
    for batch_G, rows_K in support_groups(w_BN):
        w_GK = w_BN[batch_G][:, rows_K]
        batch_G, rows_K = batch_G.to(device), rows_K.to(device)
        rows = torch.cat([rows_K, test_rows])
        with nested_row_weights(model, w_GK):
            part_GR = run(batch_G, rows_K, rows)
        if out_BR is None:
            out_BR = part_GR.new_zeros((B, num_rows, *part_GR.shape[2:]))
        out_BR[batch_G[:, None], rows[None, :]] = part_GR
    return out_BR


def train_targets_of(y: torch.Tensor, batch_G: torch.Tensor, rows_K: torch.Tensor) -> torch.Tensor:
    """Targets ``y`` (``(N,)``, ``(N, B)``, ``(N, B, 1)``) of rows ``rows_K``, batch ``batch_G``."""
    return y[rows_K] if y.dim() == 1 else y[rows_K][:, batch_G]


def refuse(what: str) -> None:
    """Raises for what row weights cannot do (one line naming it)."""
    raise InvalidRowWeightsError(f"row weights: {what}")


class ReadsSourceWeights:
    """A patched module that weights the train rows as sources (blocks, decoders).

    :func:`source_weights` sets the weights of a forward on it; it reads them
    with :meth:`source_weights_or_none`.
    """

    def source_weights_or_none(self) -> torch.Tensor | None:
        """The source weights ``(B, N)`` of the running forward, None when every row counts once."""
        return self.__dict__.get(SOURCE_WEIGHTS_ATTR)


@contextlib.contextmanager
def source_weights(model: nn.Module, w_BN: torch.Tensor | None) -> Iterator[None]:
    """``w_BN`` as the source weights of every patched block and decoder of ``model`` inside.

    None, or weights all in ``{0, 1}``, set nothing: rows of weight 0 are null
    carriers in the blocks by then, which give them no mass by themselves, so
    the blocks run exactly as without weights.
    """
    if w_BN is None or is_binary(w_BN):
        yield
        return
    modules = [m for m in model.modules() if isinstance(m, ReadsSourceWeights)]
    for m in modules:
        m.__dict__[SOURCE_WEIGHTS_ATTR] = w_BN
    try:
        yield
    finally:
        for m in modules:
            m.__dict__.pop(SOURCE_WEIGHTS_ATTR, None)


class BatchCursor:
    """Hands out consecutive rows of per-batch weights ``(X, N)`` to the chunks of a batch.

    A patched block's attention may run in chunks of its batch axis (tabpfn's
    ``chunked_evaluate_maybe_inplace`` under ``save_peak_memory_factor``: one call
    per consecutive slice, in order); each call takes the weights of its slice.
    """

    def __init__(self, w_XN: torch.Tensor) -> None:
        self.w_XN = w_XN
        self.at = 0

    def take(self, n: int) -> torch.Tensor:
        """The next ``n`` rows of weights.

        Raises:
            InvalidRowWeightsError: If fewer than ``n`` are left (the weights do
                not fit the batch they are read for).
        """
        part = self.w_XN[self.at : self.at + n]
        if part.shape[0] != n:
            refuse(
                f"source weights of {self.w_XN.shape[0]} batch elements do not fit a batch "
                f"read past element {self.at + n}"
            )
        self.at += n
        return part
