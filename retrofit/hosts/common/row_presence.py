"""Which train rows of a forward are absent: the row-presence input of a patched host.

``with row_presence(model, present_BN): model(x, y, ...)`` runs every forward of
the patched ``model`` inside the block as if the train rows marked 0 were not in
the context: "the same context without rows J", without refitting anything and
without changing the tensors' shapes. ``present_BN`` is ``(B, N)`` (one row of
presence per batch element, tabpfn's ensemble members or the datasets of a
batch) or ``(N,)`` (the same for every element); 1 or ``True`` is present, 0 or
``False`` absent. Test rows are never absent (they are no key anywhere).
Outside the block, or with every row present, the model computes exactly what
it computes without it (the same code path, so the same bits).

A data row's presence is binary and declared, not read from a carrier: a data
row is not a zero vector (its cells are data), so the closure starts from the
declaration. What each host does with it:

* the stages a row reaches other rows through before the blocks (the fitted
  statistics of the in-model preprocessing: imputation means, the standard
  scaler, v3.5's ECDF ranks, v2's constant-feature and group masks and its
  target encoding; v3's distribution embedder, whose inducing points read the
  train rows and scale by their count) run on the present rows only, one call
  per distinct presence pattern of the batch, which is exactly the law's
  presence-weighted statistics and ``n_eff`` for presence in ``{0, 1}`` (a
  source of presence 0 carries no mass); the host's own code computes them, so
  nothing is copied and every chunked path of the host is covered;
* an absent row's carrier is the zero vector where it leaves them (v3: the
  stage-2 output; v2: the encoder's output), and the train target injected into
  it there is gated by its presence (as ``OInject`` gates an injection), in
  both modes; from there on the patched blocks keep it null and inert (the
  existing ICL-stage closure), and learned rows (v2.5's thinking rows) stay
  present.

Shape letters: B batch elements, N train rows, G groups of batch elements
sharing one presence pattern, K present train rows of a group.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import torch
from torch import nn

from retrofit.errors import InvalidInputError, UnsupportedArchitectureError
from retrofit.hosts.common.base import host_patcher_for, patch_config_of

__all__ = [
    "ROW_PRESENCE_ATTR",
    "PresenceGroup",
    "active_row_presence",
    "on_present_rows",
    "presence_groups",
    "refuse_cache",
    "row_presence",
    "suspended",
    "train_targets_of",
]

#: Where :func:`row_presence` keeps the presence on the model (in ``__dict__``).
ROW_PRESENCE_ATTR = "_retrofit_row_presence_BN"

#: ``(batch_idx_G, rows_K)``: batch elements sharing one pattern and its present train rows.
PresenceGroup = tuple[torch.Tensor, torch.Tensor]


@contextlib.contextmanager
def row_presence(model: nn.Module, present_BN: torch.Tensor) -> Iterator[nn.Module]:
    """Marks train rows absent for every forward of the patched ``model`` inside the block.

    Args:
        model: A model patched by :func:`retrofit.patch` whose host closes its
            input rows (every host class tabpfn 9.2 ships).
        present_BN: ``(B, N)`` or ``(N,)``, bool or numbers in ``{0, 1}``: which
            of the ``N`` train rows of each forward are present.

    Yields:
        ``model``.

    Raises:
        NotPatchedError: If ``model`` is not patched.
        UnsupportedArchitectureError: If its host does not close its input rows.
        InvalidInputError: If ``present_BN`` is not such a tensor, names no
            train row (``(0,)``, ``(B, 0)``), marks every train row of a batch
            element absent (no host has a forward on an empty context: each
            fails on zero train rows, so there is no "context without them" to
            be), or a block is already active on ``model``.
    """
    patch_config_of(model)  # raises NotPatchedError
    if not host_patcher_for(model).closes_input_rows:
        raise UnsupportedArchitectureError(
            f"row_presence: {type(model).__name__}'s patch does not close its input rows"
        )
    present = _checked(present_BN)
    if ROW_PRESENCE_ATTR in model.__dict__:
        raise InvalidInputError(
            "row_presence: a block is already active on this model; end it before starting another"
        )
    model.__dict__[ROW_PRESENCE_ATTR] = present
    try:
        yield model
    finally:
        model.__dict__.pop(ROW_PRESENCE_ATTR, None)


def _checked(present_BN: torch.Tensor) -> torch.Tensor:
    """``present_BN`` as a bool ``(B, N)`` tensor, validated once where it enters."""
    if not isinstance(present_BN, torch.Tensor) or present_BN.dim() not in (1, 2):
        raise InvalidInputError(
            "row_presence: present_BN must be a (B, N) or (N,) tensor of 0/1, "
            f"got {type(present_BN).__name__} {tuple(getattr(present_BN, 'shape', ()))}"
        )
    if present_BN.dtype != torch.bool:
        if not bool(((present_BN == 0) | (present_BN == 1)).all()):
            raise InvalidInputError(
                "row_presence: present_BN holds values other than 0 and 1 "
                "(a data row is either in the context or not)"
            )
        present_BN = present_BN != 0
    if present_BN.shape[-1] == 0:
        raise InvalidInputError(
            f"row_presence: present_BN of shape {tuple(present_BN.shape)} names no train row; "
            "give one entry per train row of the forward, (N,) or (B, N)"
        )
    present_BN = present_BN.reshape(-1, present_BN.shape[-1]).detach().cpu()
    empty_B = ~present_BN.any(dim=-1)
    if bool(empty_B.any()):
        which = "" if len(empty_B) == 1 else f" of batch element {int(empty_B.nonzero()[0])}"
        raise InvalidInputError(
            f"row_presence: present_BN marks every train row{which} absent; a forward needs "
            "at least one present train row (no host runs on an empty context)"
        )
    return present_BN


def active_row_presence(model: nn.Module, batch: int, num_train: int) -> torch.Tensor | None:
    """The presence of this forward's train rows ``(B, N)``, None if every row is present.

    Called by the hosts' overrides at the start of a forward, where ``B`` and
    ``N`` are known. None outside :func:`row_presence`, and when every row is
    present (the forward is then the host's, bit for bit).

    Raises:
        InvalidInputError: If the presence does not fit the forward's ``(B, N)``.
    """
    present = model.__dict__.get(ROW_PRESENCE_ATTR)
    if present is None:
        return None
    if present.shape[-1] != num_train or present.shape[0] not in (1, batch):
        raise InvalidInputError(
            f"row_presence: present_BN of shape {tuple(present.shape)} does not fit a forward "
            f"of {batch} batch elements and {num_train} train rows; pass ({batch}, {num_train}) "
            f"or ({num_train},)"
        )
    if bool(present.all()):
        return None
    return present.expand(batch, num_train)


def presence_groups(present_BN: torch.Tensor) -> list[PresenceGroup]:
    """The distinct presence patterns of ``present_BN``: their batch elements and present rows."""
    patterns_GN, inverse_B = torch.unique(present_BN, dim=0, return_inverse=True)
    return [
        (torch.nonzero(inverse_B == g).flatten(), torch.nonzero(pattern_N).flatten())
        for g, pattern_N in enumerate(patterns_GN)
    ]


def on_present_rows(
    run: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor],
    present_BN: torch.Tensor,
    num_rows: int,
    device: torch.device,
) -> torch.Tensor:
    """Runs a host's stage on the present rows of each presence pattern, in place.

    Args:
        run: ``run(batch_G, rows_K, rows) -> (G or 1, len(rows), ...)``: the
            host's stage on batch elements ``batch_G``, with ``rows_K`` the
            present train rows and ``rows`` those followed by every test row.
        present_BN: The forward's presence (:func:`active_row_presence`).
        num_rows: Train plus test rows ``R`` of the forward.
        device: Where the index tensors go.

    Returns:
        ``(B, R, ...)``: each group's output at its rows, exact zeros at absent rows.
    """
    B, N = present_BN.shape
    test_rows = torch.arange(N, num_rows, device=device)
    out_BR: torch.Tensor | None = None
    for batch_G, rows_K in presence_groups(present_BN):
        batch_G, rows_K = batch_G.to(device), rows_K.to(device)
        rows = torch.cat([rows_K, test_rows])
        part_GR = run(batch_G, rows_K, rows)
        if out_BR is None:
            out_BR = part_GR.new_zeros((B, num_rows, *part_GR.shape[2:]))
        out_BR[batch_G[:, None], rows[None, :]] = part_GR
    return out_BR


def train_targets_of(y: torch.Tensor, batch_G: torch.Tensor, rows_K: torch.Tensor) -> torch.Tensor:
    """Targets ``y`` (``(N,)``, ``(N, B)``, ``(N, B, 1)``) of rows ``rows_K``, batch ``batch_G``."""
    return y[rows_K] if y.dim() == 1 else y[rows_K][:, batch_G]


@contextlib.contextmanager
def suspended(model: nn.Module) -> Iterator[None]:
    """No row presence on ``model`` inside: a host stage run on the present rows alone.

    The stage's own calls of overridden methods then see a context of present
    rows only, as a forward without presence does.
    """
    present = model.__dict__.pop(ROW_PRESENCE_ATTR, None)
    try:
        yield
    finally:
        if present is not None:
            model.__dict__[ROW_PRESENCE_ATTR] = present


def refuse_cache(what: str) -> None:
    """Raises for a KV cache under :func:`row_presence` (its context is fixed when built)."""
    raise InvalidInputError(
        f"row_presence: {what} under row_presence is not supported: a KV cache "
        "(fit_mode='fit_with_cache') fixes its train rows when it is built; leave rows out "
        "without a cache (fit_mode='fit_preprocessors' or 'low_memory')"
    )
