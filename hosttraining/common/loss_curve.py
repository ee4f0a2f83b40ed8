"""The training loss curve of a host, drawn from its training log for the model cards.

The shipped cards sit beside the weights (``retrofit/models/embedded/``) and link
their curves in ``docs/lab/embedded/``, outside the wheel: :func:`curve_link` is the
link a card writes, relative to the card's folder.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

__all__ = ["curve_link", "plot_loss_curve"]


def curve_link(curve: Path, card: Path) -> str:
    """The curve's path as the card at ``card`` links it: relative to its folder, with ``/``."""
    return Path(os.path.relpath(curve.resolve(), card.parent.resolve())).as_posix()


def plot_loss_curve(
    log: list[dict[str, Any]],
    png: Path,
    *,
    loss_name: str = "bar-distribution NLL",
    title: str = "Embedded TabPFN-v3 host: pretraining on the synthetic prior",
) -> None:
    """Plot the smoothed training loss and learning rate against steps.

    Args:
        log: Records of the training log (``step``, ``loss_ema``, ``lr``).
        png: Output image.
        loss_name: What the loss is (the y-axis label).
        title: The figure's title.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [r["step"] for r in log]
    fig, ax = plt.subplots(figsize=(7, 3.6), dpi=110)
    ax.plot(steps, [r["loss_ema"] for r in log], color="tab:blue")
    ax.set_xlabel("optimiser step")
    ax.set_ylabel(f"{loss_name} (EMA 0.98)", color="tab:blue")
    ax.grid(alpha=0.3)
    ax2 = ax.twinx()
    ax2.plot(steps, [r["lr"] for r in log], color="tab:orange", alpha=0.6)
    ax2.set_ylabel("learning rate", color="tab:orange")
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(png)
    plt.close(fig)
