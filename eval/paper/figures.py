"""The regression report's figures: per-case deltas and the tau sweep (PNG).

Drawn from the report's data (:mod:`eval.paper.tables`) with matplotlib's Agg
backend, imported when a figure is drawn; each file is written atomically.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from eval.paper.tables import MODE_LABEL, CaseRow, VariantSummary
from retrofit.files import atomic_path

__all__ = ["plot_deltas", "plot_sweep"]


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save_figure(fig: Any, path: Path) -> None:
    with atomic_path(path, suffix=".png") as tmp:
        fig.savefig(tmp, dpi=130, bbox_inches="tight")


def plot_deltas(table: Sequence[CaseRow], tau: float, path: Path) -> bool:
    """Per-case deltas of both retrofits at ``tau``, grouped bars, a cross where none.

    Returns:
        Whether a figure was drawn (the table holds a case and a retrofit).
    """
    plt = _pyplot()
    cases = list(dict.fromkeys((r.run.dataset, r.run.seed) for r in table))
    modes = [m for m in ("oattention", "full-o") if any(r.run.mode == m for r in table)]
    if not cases or not modes:
        return False
    lookup = {
        (r.run.dataset, r.run.seed, r.run.mode): r.delta_pct
        for r in table
        if r.run.mode == "none" or r.run.tau == tau
    }
    fig, ax = plt.subplots(figsize=(max(6.0, 0.55 * len(cases) + 2), 3.8))
    width = 0.8 / len(modes)
    for j, mode in enumerate(modes):
        values = [lookup.get((d, s, mode)) for d, s in cases]
        xs = [i + (j - (len(modes) - 1) / 2) * width for i in range(len(cases))]
        ax.bar(
            [x for x, v in zip(xs, values, strict=True) if v is not None],
            [v for v in values if v is not None],
            width=width,
            label=MODE_LABEL[mode],
        )
        failed = [x for x, v in zip(xs, values, strict=True) if v is None]
        if failed:
            ax.plot(failed, [0.0] * len(failed), "kx", label=f"{MODE_LABEL[mode]}: no result")
    ax.axhline(0.0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(cases)))
    ax.set_xticklabels([f"{d}/{s}" for d, s in cases], rotation=60, ha="right", fontsize=8)
    ax.set_ylabel("RMSE change vs unpatched (%)")
    ax.set_title(f"Per-case relative RMSE change, tau = {tau:g}")
    ax.legend(fontsize=8)
    _save_figure(fig, path)
    plt.close(fig)
    return True


def plot_sweep(
    sweep: Sequence[VariantSummary],
    carriers: dict[str, Any] | None,
    default_tau: float,
    path: Path,
) -> None:
    """Mean and median delta against tau, with the default tau and the median carrier."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for mode, color in (("oattention", "tab:blue"), ("full-o", "tab:orange")):
        points = sorted((s for s in sweep if s.mode == mode and s.n), key=lambda s: s.tau)
        if points:
            taus = [s.tau for s in points]
            label = MODE_LABEL[mode]
            ax.plot(taus, [s.mean_pct for s in points], "o-", color=color, label=f"{label} mean")
            ax.plot(taus, [s.median_pct for s in points], "x--", color=color, alpha=0.5,
                    label=f"{label} median")  # fmt: skip
    values = [abs(v) for s in sweep for v in (s.mean_pct, s.median_pct) if v]
    if values and max(values) / min(values) > 100:
        # Deltas span orders of magnitude across tau: symlog keeps the small ones visible.
        ax.set_yscale("symlog", linthresh=max(min(values), 1e-9))
    ax.axhline(0.0, color="black", linewidth=0.8)
    ax.axvline(default_tau, color="grey", linestyle=":", label=f"default tau = {default_tau:g}")
    if carriers and carriers.get("all"):
        median = carriers["all"]["q0.5"]
        ax.axvline(median, color="tab:red", linestyle="-.", label=f"median ||x||^2 = {median:.3g}")
    ax.set_xscale("log")
    ax.set_xlabel("tau")
    ax.set_ylabel("RMSE change vs unpatched (%), symlog" if ax.get_yscale() == "symlog"
                  else "RMSE change vs unpatched (%)")  # fmt: skip
    ax.set_title("Tau sweep: mean relative RMSE change over cases")
    ax.legend(fontsize=8)
    _save_figure(fig, path)
    plt.close(fig)
