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

Presence is the special case of row weights in ``{0, 1}``
(:mod:`retrofit.hosts.common.row_weights`, which says what each host does): an
absent row is dropped before the stages that read across rows (the in-model
preprocessing's statistics, v3's inducing points), leaves them as the zero
carrier with no target injected, and the patched blocks keep it null and inert;
learned rows (v2.5's thinking rows) stay present. A data row's presence is
declared, not read from a carrier: a data row is not a zero vector.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch import nn

from retrofit.errors import InvalidRowWeightsError
from retrofit.hosts.common.row_weights import enter_row_weights

__all__ = ["row_presence"]


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
        InvalidRowWeightsError: If ``present_BN`` is not such a tensor, names no
            train row (``(0,)``, ``(B, 0)``), marks every train row of a batch
            element absent (no host has a forward on an empty context: each
            fails on zero train rows, so there is no "context without them" to
            be), or a block is already active on ``model``.
    """
    with enter_row_weights(model, _checked(present_BN), "row_presence"):
        yield model


def _checked(present_BN: torch.Tensor) -> torch.Tensor:
    """``present_BN`` as float64 ``(B, N)`` weights in ``{0, 1}``, validated where it enters."""
    if not isinstance(present_BN, torch.Tensor) or present_BN.dim() not in (1, 2):
        raise InvalidRowWeightsError(
            "row_presence: present_BN must be a (B, N) or (N,) tensor of 0/1, "
            f"got {type(present_BN).__name__} {tuple(getattr(present_BN, 'shape', ()))}"
        )
    if present_BN.dtype != torch.bool:
        if not bool(((present_BN == 0) | (present_BN == 1)).all()):
            raise InvalidRowWeightsError(
                "row_presence: present_BN holds values other than 0 and 1 "
                "(a data row is either in the context or not)"
            )
        present_BN = present_BN != 0
    if present_BN.shape[-1] == 0:
        raise InvalidRowWeightsError(
            f"row_presence: present_BN of shape {tuple(present_BN.shape)} names no train row; "
            "give one entry per train row of the forward, (N,) or (B, N)"
        )
    present_BN = present_BN.reshape(-1, present_BN.shape[-1]).detach().cpu()
    empty_B = ~present_BN.any(dim=-1)
    if bool(empty_B.any()):
        which = "" if len(empty_B) == 1 else f" of batch element {int(empty_B.nonzero()[0])}"
        raise InvalidRowWeightsError(
            f"row_presence: present_BN marks every train row{which} absent; a forward needs "
            "at least one present train row (no host runs on an empty context)"
        )
    return present_BN.to(torch.float64)
