"""Checkpoint averaging (LAWA): the mean of the weights at the last few snapshots.

The speedrun averages the weights of its last checkpoints; on a noisy
objective the mean of a few late points of the trajectory generalises better
than its last point. A run keeps a window of state-dict snapshots taken every
``every`` steps (a function of the step alone, so a resumed run keeps the same
window) and writes their mean beside its raw checkpoint.

Floating-point tensors are averaged in float64 and cast back; other tensors
(integer buffers) are taken from the newest snapshot.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

__all__ = ["average_state_dicts", "lawa_update"]


def average_state_dicts(
    snapshots: Sequence[Mapping[str, torch.Tensor]],
) -> dict[str, torch.Tensor]:
    """The element-wise mean of state dicts with the same keys and shapes.

    Args:
        snapshots: At least one state dict.

    Returns:
        A new state dict: floating tensors averaged, the rest copied from the last.

    Raises:
        ValueError: If there is no snapshot or their keys differ.
    """
    if not snapshots:
        raise ValueError("no snapshot to average")
    keys = list(snapshots[-1])
    if any(list(s) != keys for s in snapshots):
        raise ValueError("the snapshots' state dicts have different keys")
    out: dict[str, torch.Tensor] = {}
    for key in keys:
        newest = snapshots[-1][key]
        if newest.is_floating_point():
            total = torch.zeros_like(newest, dtype=torch.float64)
            for s in snapshots:
                total += s[key].to(torch.float64)
            out[key] = (total / len(snapshots)).to(newest.dtype)
        else:
            out[key] = newest.clone()
    return out


def lawa_update(
    window: list[dict[str, torch.Tensor]],
    model: torch.nn.Module,
    keep: int,
) -> list[dict[str, torch.Tensor]]:
    """The window with the model's current weights appended and only the last ``keep`` kept."""
    snapshot = {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}
    return [*window, snapshot][-keep:]
