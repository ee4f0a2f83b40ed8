"""The optimisers of a training run: AdamW alone, or Muon on hidden matrices plus AdamW.

``torch.optim.Muon`` orthogonalises each update of a 2-D weight; it suits the
hidden maps (attention projections, MLP weights), not the network's inputs and
outputs (a 1- or 6-column embedding, the 200-bucket decoder) nor learned token
tables, which stay with AdamW, as is usual practice with Muon. Muon's
``adjust_lr_fn`` decides what its learning rate means: ``"original"`` (its
paper's shape scaling, lr around 0.02) or ``"match_rms_adamw"`` (updates of
AdamW's RMS, so one learning rate serves both optimisers).
"""

from __future__ import annotations

import torch

__all__ = ["OPTIMIZERS", "build_optimizers", "muon_parameter_names"]

OPTIMIZERS = ("adamw", "muon")
"""Names accepted by :func:`build_optimizers`."""

# Inputs and outputs of the network are not hidden matrices.
_NOT_HIDDEN = ("x_embed.", "col_y_encoder.", "icl_y_encoder.", "output_projection.")


def muon_parameter_names(model: torch.nn.Module) -> list[str]:
    """Names of the hidden 2-D weight matrices (Muon's share of the parameters).

    Learned token tables (inducing vectors, CLS tokens) are 2-D but are not
    maps, and matrices with a side under 8 (the log-n scaling MLP's input row)
    are too thin to orthogonalise usefully; both stay with AdamW.
    """
    return [
        name
        for name, p in model.named_parameters()
        if p.ndim == 2
        and name.endswith(".weight")
        and not name.startswith(_NOT_HIDDEN)
        and min(p.shape) >= 8
    ]


def build_optimizers(
    model: torch.nn.Module,
    optimizer: str,
    *,
    adam_lr: float,
    muon_lr: float,
    weight_decay: float,
    muon_adjust_lr: str = "original",
) -> list[torch.optim.Optimizer]:
    """AdamW over the parameters Muon does not take, then Muon (if chosen) over the rest.

    Every parameter group carries ``peak_lr``, the learning rate a schedule
    multiplies.

    Args:
        model: The network.
        optimizer: ``"adamw"`` or ``"muon"``.
        adam_lr: Peak learning rate of AdamW.
        muon_lr: Peak learning rate of Muon.
        weight_decay: Decoupled weight decay of both.
        muon_adjust_lr: Muon's ``adjust_lr_fn``.

    Returns:
        ``[adamw]`` or ``[adamw, muon]``; each parameter is in exactly one.

    Raises:
        ValueError: For an unknown optimizer name.
    """
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {optimizer!r}; choose one of {OPTIMIZERS}")
    params = dict(model.named_parameters())
    hidden = set(muon_parameter_names(model)) if optimizer == "muon" else set()
    rest = [p for n, p in params.items() if n not in hidden]
    optims: list[torch.optim.Optimizer] = [
        torch.optim.AdamW(rest, lr=adam_lr, weight_decay=weight_decay, betas=(0.9, 0.99))
    ]
    if hidden:
        optims.append(
            torch.optim.Muon(
                [p for n, p in params.items() if n in hidden],
                lr=muon_lr,
                weight_decay=weight_decay,
                momentum=0.95,
                nesterov=True,
                adjust_lr_fn=muon_adjust_lr,
            )
        )
    for opt in optims:
        for group in opt.param_groups:
            group["peak_lr"] = group["lr"]
    return optims
