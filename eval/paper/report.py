"""Reports built only from stored results: cases.csv, summary.md, and the figures.

Reads the run rows of a suite's results directory (``runs/*.json``, written by
:mod:`eval.runner`), the carrier statistics (``carriers/``, :mod:`eval.paper.carriers`)
and the session records (``sessions/``), and writes, as one set that replaces
the previous set whole (``retrofit.files.atomic_file_set``):

* ``cases.csv``: one row per case x variant x tau, with its paired baseline
  RMSE, ``delta_pct = 100 * (rmse - rmse_none) / rmse_none`` and provenance;
* ``summary.md``: per-case table at the default tau, mean / median / #worse
  beside the paper's numbers, times, the tau sweep and the carrier scale;
* ``deltas.png``: per-case deltas, both retrofits, grouped bars, zero line;
* ``tau_sweep.csv`` and ``tau_sweep.png``: mean delta vs tau (when swept).

Nothing is recomputed here, and nothing is written unless the store holds rows.
The rows of one context are reported (:func:`select_context` states the rule
and names what it leaves out), each case once (:func:`one_run_per_case`).
"""

from __future__ import annotations

import csv
import dataclasses
import io
import math
import statistics
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from eval.errors import ReportError
from eval.locations import default_output
from eval.markdown import markdown_table
from eval.paper.completeness import (
    Completeness,
    completeness,
    pair_counts,
    planned_taus,
    require_complete,
)
from eval.paper.datasets import OFFLINE18_DATASETS, suite_cases
from eval.paper.protocol import PAPER_MEAN_DELTA_PCT, SWEEP_TAUS
from eval.paper.reference import committed_store
from eval.paper.spec import RunSpec, canonical_json
from eval.paper.store import iter_sessions, load_carriers, load_rows
from patches.presence import presence
from retrofit.files import atomic_file_set, atomic_path, write_text_atomic

__all__ = [
    "CASE_COLUMNS",
    "REPORT_FILES",
    "aggregate",
    "build_report",
    "case_table",
    "comparison_lines",
    "main_table",
    "one_run_per_case",
    "select_context",
]

CASE_COLUMNS: tuple[str, ...] = (
    "dataset",
    "seed",
    "mode",
    "tau",
    "support",
    "eps_den",
    "status",
    "rmse",
    "rmse_none",
    "delta_pct",
    "mae",
    "n_train",
    "n_test",
    "n_features",
    "fit_s",
    "predict_s",
    "n_estimators",
    "checkpoint_sha256",
    "state_dict_sha256",
    "code_sha256",
    "tabpfn_retrofit_version",
    "tabpfn_version",
    "torch_version",
    "scikit_learn_version",
    "numpy_version",
    "device",
    "dtype",
    "resolved_dtype",
    "autocast",
    "threads",
    "executor",
    "patch_digest",
    "error",
    "finished_at",
    "key",
)
"""Columns of ``cases.csv``, in order."""

REPORT_FILES: tuple[str, ...] = (
    "cases.csv",
    "summary.md",
    "deltas.png",
    "tau_sweep.csv",
    "tau_sweep.png",
)
"""The files one report writes, replaced together (``retrofit.files.atomic_file_set``)."""

# Fields that must agree for rows to belong to one report (everything but the
# case and the variant).
_CONTEXT_FIELDS = (
    "suite",
    "cpu",
    "checkpoint_sha256",
    "code_sha256",
    "n_estimators",
    "dtype",
    "device",
    "fit_mode",
    "max_train_rows",
    "max_test_rows",
    "tabpfn_retrofit_version",
    "tabpfn_version",
    "torch_version",
    "scikit_learn_version",
    "numpy_version",
)
_MODE_LABEL = {"none": "unpatched", "oattention": "OAttention", "full-o": "Full-O"}


_CASE_FIELDS = ("dataset", "seed", "mode", "tau", "support", "eps_den")
"""What makes a case of a report: (dataset, seed, variant, settings)."""


def _context(row: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
    # Every package version the row records belongs to its context, so a run
    # made after an upgrade (safetensors, say) never joins an older one's table.
    versions = sorted(k for k in row if k.endswith("_version"))
    return tuple((k, row.get(k)) for k in (*_CONTEXT_FIELDS, *versions))


def _counts_at(rows: Sequence[dict[str, Any]], tau: float) -> int:
    """Successful runs that the table at ``tau`` uses (baselines and retrofits at tau)."""
    return sum(
        r.get("status") == "ok" and (r.get("mode") == "none" or r.get("tau") == tau) for r in rows
    )


def _short(value: Any) -> str:
    text = str(value)
    return text[:12] if len(text) == 64 else text  # a SHA-256: its prefix names it


def _context_difference(chosen: tuple[Any, ...], other: tuple[Any, ...]) -> str:
    mine, theirs = dict(chosen), dict(other)
    fields = [k for k in sorted(set(mine) | set(theirs)) if mine.get(k) != theirs.get(k)]
    return "; ".join(
        f"{k} {_short(theirs.get(k))} (reported: {_short(mine.get(k))})" for k in fields
    )


def main_tau(
    store: str | Path, suite: str, checkpoint: str | None = None, tau: float | None = None
) -> float:
    """The tau of the main table: the one given, else the host's default.

    ``eval`` records the host's default tau of its checkpoint in each session
    record (``host_default_tau``, resolved as the library resolves an unset
    ``tau``), so the report's default is the library's default on every host.

    A store no eval session finished in (its eval was killed, or still runs)
    has the tau its runs hold (:func:`_stored_tau`); whether its planned runs
    are all there is the report's check (``--partial``), not this one's.

    Raises:
        ReportError: If no tau is given and the store's sessions of ``suite``
            (and ``checkpoint``) record more than one, or none while its runs
            hold no single tau (or there are no runs).
    """
    if tau is not None:
        return float(tau)
    sessions = [
        s
        for s in iter_sessions(store)
        if s.get("suite") == suite
        and str(s.get("checkpoint_sha256", "")).startswith(checkpoint or "")
    ]
    if not sessions:
        return _stored_tau(store, suite, checkpoint)
    recorded = {float(s["host_default_tau"]) for s in sessions if "host_default_tau" in s}
    if len(recorded) != 1:
        found = ", ".join(f"{t:g}" for t in sorted(recorded)) or "none"
        raise ReportError(
            f"{store}: the eval sessions of {suite} record {found} as the host's default "
            "tau; pass --tau (and --checkpoint when the store holds several checkpoints)"
        )
    return recorded.pop()


def _stored_tau(store: str | Path, suite: str, checkpoint: str | None) -> float:
    """The table's tau of a store no eval session finished in (a killed or running eval).

    Its runs say it when they hold one retrofit tau, or one beside the sweep's
    (``--sweep`` adds ``SWEEP_TAUS`` to the main tau); anything else needs ``--tau``.

    Raises:
        ReportError: If the store holds no run of ``suite``, or no single tau.
    """
    rows = [
        r
        for r in load_rows(store)
        if r.get("suite") == suite
        and str(r.get("checkpoint_sha256", "")).startswith(checkpoint or "")
    ]
    if not rows:
        raise ReportError(
            f"no stored runs of {suite} in {store}; run `eval --suite {suite}` first "
            "(or pass --store with the store it wrote)"
        )
    taus = {float(r["tau"]) for r in rows if r.get("mode") != "none" and r.get("tau") is not None}
    beside_sweep = taus - set(SWEEP_TAUS)
    if len(taus) == 1 or len(beside_sweep) == 1:
        return (taus if len(taus) == 1 else beside_sweep).pop()
    found = ", ".join(f"{t:g}" for t in sorted(taus)) or "none (unpatched runs only)"
    raise ReportError(
        f"{store}: no eval of {suite} finished there (no session record: it was stopped or is "
        f"running) and its runs hold retrofit tau {found}; pass --tau, or run the same `eval` "
        "again to finish it"
    )


def select_context(
    rows: Sequence[dict[str, Any]],
    suite: str,
    checkpoint: str | None = None,
    *,
    tau: float,
) -> tuple[list[dict[str, Any]], list[str]]:
    """Rows of one comparable run context (checkpoint, ensemble, dtype, CPU, versions...).

    The rule, by settings and never by recency alone: of the stored contexts
    that match ``suite`` (and ``checkpoint``), the one with the most
    successful runs in the table at ``tau`` (baselines and retrofits at
    ``tau``); a tie goes to the context with more runs, then to the most
    recently finished. So a handful of failed runs of another device or
    version never replaces a complete table; each context left out is named
    in a note with its counts and how it differs.

    Args:
        rows: Every stored row.
        suite: Suite name.
        checkpoint: A prefix of the checkpoint SHA-256 to report.
        tau: The tau of the main table (:func:`main_tau`).

    Returns:
        The rows of the chosen context and notes on what was left out.

    Raises:
        ReportError: If nothing matches.
    """
    rows = [r for r in rows if r.get("suite") == suite]
    if checkpoint:
        rows = [r for r in rows if str(r.get("checkpoint_sha256", "")).startswith(checkpoint)]
    if not rows:
        what = f" with checkpoint {checkpoint}" if checkpoint else ""
        raise ReportError(f"no stored runs of suite {suite!r}{what}; run `eval` first")
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault(_context(row), []).append(row)

    def rank(item: tuple[tuple[Any, ...], list[dict[str, Any]]]) -> tuple[Any, ...]:
        group = item[1]
        newest = max(str(r.get("finished_at", "")) for r in group)
        return (_counts_at(group, tau), len(group), newest)

    ordered = sorted(groups.items(), key=rank, reverse=True)
    chosen, kept = ordered[0]
    notes = []
    for context, group in ordered[1:]:
        ok = sum(r.get("status") == "ok" for r in group)
        notes.append(
            f"left out {len(group)} stored runs of another context ({ok} ok, "
            f"{len(group) - ok} failed or non-finite; {_counts_at(group, tau)} usable at "
            f"tau {tau:g} against {_counts_at(kept, tau)} here): "
            + _context_difference(chosen, context)
        )
    return kept, notes


def one_run_per_case(rows: Sequence[dict[str, Any]]) -> None:
    """Refuses rows that hold a case more than once (a mean must count each case once).

    Within one context two runs of a case can differ only in a key field the
    report does not compare (the data's hash, say); which of them is right is
    not the report's to guess, and summing both would weigh that case twice.

    Raises:
        ReportError: Naming the cases and the fields their runs differ in.
    """
    by_case: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for row in rows:
        by_case.setdefault(tuple(row.get(k) for k in _CASE_FIELDS), []).append(row)
    doubled = {case: runs for case, runs in by_case.items() if len(runs) > 1}
    if not doubled:
        return
    key_fields = {f.name for f in dataclasses.fields(RunSpec)} - {"versions"}
    fields: set[str] = set()
    for runs in doubled.values():
        for name in set().union(*runs):
            in_key = name in key_fields or name.endswith("_version")
            if in_key and len({canonical_json(r.get(name)) for r in runs}) > 1:
                fields.add(name)
    examples = ", ".join(
        "/".join(f"{v:g}" if isinstance(v, float) else str(v) for v in case if v is not None)
        for case in list(doubled)[:3]
    )
    raise ReportError(
        f"the store holds {sum(map(len, doubled.values()))} runs of {len(doubled)} cases "
        f"that differ only in {', '.join(sorted(fields)) or 'their key'} (e.g. {examples}); "
        "a case is counted once, so remove the stale run files (runs/KEY.json, KEY in "
        "cases.csv) or report a fresh store"
    )


def case_table(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One record per stored run with its paired baseline and ``delta_pct``.

    Returns:
        Records with :data:`CASE_COLUMNS`, sorted by dataset, seed, mode, tau.
    """
    by_key = {r["key"]: r for r in rows}
    mode_order = {"none": 0, "oattention": 1, "full-o": 2}
    table = []
    for row in rows:
        base = by_key.get(row.get("baseline_key"))
        rmse, rmse_none = row.get("rmse"), base.get("rmse") if base else None
        delta = None
        if row.get("status") == "ok" and base and base.get("status") == "ok" and rmse_none:
            delta = 100.0 * (rmse - rmse_none) / rmse_none
        record = {c: row.get(c) for c in CASE_COLUMNS}
        # status_none (not a column): the baseline's status, None if it was never stored.
        record.update(rmse_none=rmse_none, delta_pct=delta, status_none=(base or {}).get("status"))
        table.append(record)
    order = {name: i for i, name in enumerate(OFFLINE18_DATASETS)}
    table.sort(
        key=lambda r: (
            order.get(r["dataset"], len(order)),
            str(r["dataset"]),
            int(r["seed"]),
            mode_order.get(r["mode"], 9),
            r["tau"] if r["tau"] is not None else -1.0,
            str(r["support"]),
            r["eps_den"] if r["eps_den"] is not None else -1.0,
        )
    )
    return table


def planned_cases(suite: str) -> list[tuple[str, int]]:
    """The (dataset, seed) cases a suite plans (``eval.paper.datasets.suite_cases``)."""
    return [(c.dataset, c.seed) for c in suite_cases(suite)]


def aggregate(
    table: Sequence[dict[str, Any]], cases: Sequence[tuple[str, int]] | None = None
) -> list[dict[str, Any]]:
    """Per variant (mode, tau, support, eps_den): mean, median, #worse of delta_pct.

    Args:
        table: :func:`case_table` records.
        cases: The planned (dataset, seed) cases (default: those in ``table``).

    Returns:
        One record per retrofit variant: ``n`` paired cases, ``mean_pct``,
        ``median_pct``, ``worse`` (delta > 0), ``better``, ``failed`` (the
        run or its baseline stored with a failure), ``missing`` (the run or
        its baseline never stored; :func:`eval.paper.completeness.pair_counts`),
        ``fit_s`` and ``predict_s`` totals.
    """
    if cases is None:
        cases = [(r["dataset"], r["seed"]) for r in table]
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for rec in table:
        if rec["mode"] == "none":
            continue
        groups.setdefault((rec["mode"], rec["tau"], rec["support"], rec["eps_den"]), []).append(rec)
    out = []
    for (mode, tau, support, eps_den), recs in sorted(
        groups.items(), key=lambda kv: (kv[0][0] != "oattention", kv[0][1], str(kv[0][2]))
    ):
        deltas = [r["delta_pct"] for r in recs if r["delta_pct"] is not None]
        counts = pair_counts(recs, cases, "delta_pct")
        out.append(
            {
                "mode": mode,
                "tau": tau,
                "support": support,
                "eps_den": eps_den,
                "n": len(deltas),
                "mean_pct": statistics.fmean(deltas) if deltas else None,
                "median_pct": statistics.median(deltas) if deltas else None,
                "worse": sum(d > 0 for d in deltas),
                "better": sum(d < 0 for d in deltas),
                "failed": counts["failed"],
                "missing": counts["missing"],
                "fit_s": sum(r["fit_s"] or 0.0 for r in recs),
                "predict_s": sum(r["predict_s"] or 0.0 for r in recs),
            }
        )
    return out


def presence_at(sq_norm: float, tau: float) -> float:
    """Presence of a carrier with squared norm ``sq_norm`` (``patches.presence``)."""
    carrier = torch.tensor([[math.sqrt(sq_norm)]], dtype=torch.float64)
    return float(presence(carrier, tau)[0])


# --------------------------------------------------------------------------- #
# Writers
# --------------------------------------------------------------------------- #


def _csv_text(records: Sequence[dict[str, Any]], columns: Sequence[str]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(columns), lineterminator="\n")
    writer.writeheader()
    for rec in records:
        writer.writerow({c: "" if rec.get(c) is None else rec.get(c) for c in columns})
    return buf.getvalue()


def _save_figure(fig: Any, path: Path) -> None:
    with atomic_path(path, suffix=".png") as tmp:
        fig.savefig(tmp, dpi=130, bbox_inches="tight")


def _fmt(value: Any, spec: str = ".4f") -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "n/a"
    return format(value, spec)


def _pct(value: Any) -> str:
    # Three significant digits, trailing zeros kept (retrofit deltas span 1e-6 % to
    # 1 %): -0.0049951 is "-0.00500 %", never "-0.005 %" beside another's "-0.00499 %".
    return "n/a" if value is None else f"{value:+#.3g} %"


def _quoted_pct(value: Any) -> str:
    # A published figure, as published (the paper gives +0.088, not +0.0880).
    return "n/a" if value is None else f"{value:+.3g} %"


def _plot_deltas(table: Sequence[dict[str, Any]], tau: float, path: Path) -> bool:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cases = list(dict.fromkeys((r["dataset"], r["seed"]) for r in table))
    modes = [m for m in ("oattention", "full-o") if any(r["mode"] == m for r in table)]
    if not cases or not modes:
        return False
    lookup = {
        (r["dataset"], r["seed"], r["mode"]): r["delta_pct"]
        for r in table
        if r["mode"] == "none" or r["tau"] == tau
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
            label=_MODE_LABEL[mode],
        )
        failed = [x for x, v in zip(xs, values, strict=True) if v is None]
        if failed:
            ax.plot(failed, [0.0] * len(failed), "kx", label=f"{_MODE_LABEL[mode]}: no result")
    ax.axhline(0.0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(cases)))
    ax.set_xticklabels([f"{d}/{s}" for d, s in cases], rotation=60, ha="right", fontsize=8)
    ax.set_ylabel("RMSE change vs unpatched (%)")
    ax.set_title(f"Per-case relative RMSE change, tau = {tau:g}")
    ax.legend(fontsize=8)
    _save_figure(fig, path)
    plt.close(fig)
    return True


def _plot_sweep(
    sweep: Sequence[dict[str, Any]], carriers: dict[str, Any] | None, default_tau: float, path: Path
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for mode, color in (("oattention", "tab:blue"), ("full-o", "tab:orange")):
        recs = sorted((r for r in sweep if r["mode"] == mode and r["n"]), key=lambda r: r["tau"])
        if recs:
            taus = [r["tau"] for r in recs]
            label = _MODE_LABEL[mode]
            ax.plot(taus, [r["mean_pct"] for r in recs], "o-", color=color, label=f"{label} mean")
            ax.plot(taus, [r["median_pct"] for r in recs], "x--", color=color, alpha=0.5,
                    label=f"{label} median")  # fmt: skip
    values = [abs(v) for r in sweep for v in (r["mean_pct"], r["median_pct"]) if v]
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


_QUANTILES = {
    "q0": "min",
    "q0.01": "q01",
    "q0.1": "q10",
    "q0.25": "q25",
    "q0.5": "median",
    "q0.75": "q75",
    "q0.9": "q90",
    "q0.99": "q99",
    "q1": "max",
}
"""Stored quantile key of the carrier statistics -> column title."""
_QUANTILE_TITLES = tuple(_QUANTILES.values())


def _quantile_rows(carriers: dict[str, Any]) -> list[list[object]]:
    """One row of squared-norm quantiles for all, train and test carriers (those stored)."""
    rows = []
    for name, label in (("all", "all"), ("train_rows", "train"), ("test_rows", "test")):
        s = carriers.get(name) or {}
        if s:
            rows.append([label, *(_fmt(s.get(k), ".4g") for k in _QUANTILES)])
    return rows


def _presence_rows(median: float, low: float, taus: Sequence[float]) -> list[list[object]]:
    """Presence of the median and the 1st-percentile carrier at each tau."""
    rows = []
    for tau in taus:
        pm = presence_at(median, tau)
        rows.append([f"{tau:g}", f"{pm:.6f}", f"{presence_at(low, tau):.6f}", f"{1 - pm:.3g}"])
    return rows


def _carrier_section(carriers: dict[str, Any] | None, taus: Sequence[float], default_tau: float):
    lines = ["## Carrier scale (what tau means)", ""]
    if not carriers or not carriers.get("all"):
        lines += [
            "No carrier statistics stored for this checkpoint; run "
            "`tabpfn-retrofit eval --sweep` (or `eval --carriers`) to measure them.",
            "",
        ]
        return lines
    q = carriers["all"]
    lines += [
        f"Squared norms ||x||^2 of the carriers entering `model.icl_blocks` (forward pre-hooks, "
        f"unpatched host, {carriers['n_values']} carrier values over "
        f"{len(carriers['cases'])} cases, all blocks, train and test rows):",
        "",
        *markdown_table(("rows", *_QUANTILE_TITLES), _quantile_rows(carriers)),
    ]
    per_block = carriers.get("per_block") or {}
    if per_block:
        medians = ", ".join(
            f"block {b}: {_fmt(s.get('q0.5'), '.4g')}" for b, s in per_block.items()
        )
        lines += ["", f"Median per ICL block: {medians}."]
    median, low = q["q0.5"], q["q0.01"]
    lines += [
        "",
        "Presence p = ||x||^2 / (tau + ||x||^2) of the median and of the 1st-percentile carrier:",
        "",
        *markdown_table(
            ("tau", "p(median)", "p(q01)", "1 - p(median)"),
            _presence_rows(median, low, sorted(set(taus) | {default_tau})),
        ),
    ]
    pm, pl = presence_at(median, default_tau), presence_at(low, default_tau)
    lines += [
        "",
        f"**Default tau = {default_tau:g}.** Any tau > 0 keeps p(0) = 0 exactly, so the null "
        "law does not depend on it; tau only decides how strongly live carriers are gated. "
        f"At tau = {default_tau:g} the median carrier (||x||^2 = {median:.4g}) has presence "
        f"{pm:.6f} and the 1st-percentile carrier ({low:.4g}) {pl:.6f}: tau sits "
        f"{math.log10(median / default_tau):.1f} orders of magnitude below the typical "
        "squared norm, so live tokens are gated by about tau/||x||^2 and the active path "
        "changes little, while a carrier only counts as half-present once its squared norm "
        f"falls to tau. Larger tau (towards the median, {median:.3g}) would begin to treat "
        "ordinary tokens as partly absent; the tau sweep above shows what that costs.",
        "",
    ]
    return lines


def _sessions_section(store: Path, checkpoint: str) -> list[str]:
    sessions = [
        s for s in iter_sessions(store) if str(s.get("checkpoint_sha256", "")) == checkpoint
    ]
    if not sessions:
        return []
    lines = [
        "## Run sessions (wall time of each `eval` command)",
        "",
        *markdown_table(
            ("finished (UTC)", "command", "computed", "skipped", "failed", "wall (s)", "executor"),
            [
                [
                    s.get("finished_at", ""),
                    f"`{s.get('command', '')}`",
                    s.get("computed"),
                    s.get("skipped"),
                    s.get("failed"),
                    _fmt(s.get("wall_s"), ".1f"),
                    s.get("executor", ""),
                ]
                for s in sessions
            ],
        ),
    ]
    return [*lines, ""]


def main_table(
    store: str | Path,
    suite: str,
    *,
    tau: float | None = None,
    checkpoint: str | None = None,
    tabulate: Callable[[list[dict[str, Any]]], Any] = case_table,
    summarise: Callable[..., list[dict[str, Any]]] = aggregate,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The rows a report of ``store`` uses and its summary records at ``tau``.

    ``tabulate`` and ``summarise`` are the suite kind's case table and
    aggregate (the classification report passes its own).

    Returns:
        ``(rows, records)``: the rows of the chosen context, and one
        :func:`aggregate` record per retrofit variant at ``tau``.

    Raises:
        ReportError: If the store has no matching rows, or holds a case twice.
    """
    tau = main_tau(store, suite, checkpoint, tau)
    rows, _ = select_context(load_rows(store), suite, checkpoint, tau=tau)
    one_run_per_case(rows)
    records = summarise(tabulate(rows), planned_cases(suite))
    return rows, [a for a in records if a["tau"] == tau]


def comparison_lines(
    store: str | Path,
    committed: str | Path | None,
    suite: str,
    tau: float,
    checkpoint: str | None = None,
) -> list[str]:
    """The main table of ``store`` beside the committed one, and why their runs differ.

    Args:
        store: The store just reported.
        committed: The committed store (``None``: outside a checkout).
        suite: Suite name.
        tau: The tau of the main table.
        checkpoint: The SHA-256 prefix reported (``report --checkpoint``): its
            table alone, as a chosen checkpoint has no committed counterpart.

    Returns:
        Lines to print: a Markdown table with a column per number for this
        store and the committed table, then one line naming the run-key
        fields (the CPU by name) in which this store's runs differ; without
        a committed table, this store's table alone and why. Both columns of
        a number are printed to the same three significant digits.
    """
    rows, mine = main_table(store, suite, tau=tau, checkpoint=checkpoint)
    alone = [f"tau = {tau:g}: this store ({store})", "",
             *markdown_table(_SUMMARY_HEADER, _summary_rows(mine, tau)), ""]  # fmt: skip
    if checkpoint:
        return [*alone, f"(checkpoint {checkpoint} chosen: not compared with a committed table)"]
    if committed is None:
        return [*alone, "(no committed table to compare with: outside a checkout, or "
                "--committed none)"]  # fmt: skip
    try:
        theirs_rows, theirs = main_table(
            committed, suite, tau=tau, checkpoint=rows[0]["checkpoint_sha256"]
        )
    except ReportError as exc:
        return [*alone, f"(the committed store {committed} has no table to compare with: {exc})"]
    by_variant = {(a["mode"], a["support"], a["eps_den"]): a for a in theirs}
    table = []
    for a in mine:
        b = by_variant.get((a["mode"], a["support"], a["eps_den"]), {})
        table.append(
            [
                _MODE_LABEL[a["mode"]],
                f"{a['n']} / {b.get('n', '-')}",
                _pct(a["mean_pct"]),
                _pct(b.get("mean_pct")),
                _pct(a["median_pct"]),
                _pct(b.get("median_pct")),
                f"{a['worse']} / {b.get('worse', '-')}",
            ]
        )
    header = ("variant", "cases (yours / committed)", "mean (yours)", "mean (committed)",
              "median (yours)", "median (committed)", "#worse (yours / committed)")  # fmt: skip
    lines = [f"tau = {tau:g}: this store ({store}) beside the committed table ({committed})", ""]
    lines += [*markdown_table(header, table), ""]
    mine_ctx, theirs_ctx = dict(_context(rows[0])), dict(_context(theirs_rows[0]))
    differ = [k for k in mine_ctx if mine_ctx[k] != theirs_ctx.get(k)]
    if not differ:
        lines.append("Same run context as the committed table (its runs were reused).")
    else:
        named = ", ".join(
            f"{k} (yours: {_short(mine_ctx[k])!r}; committed: {_short(theirs_ctx.get(k))!r})"
            for k in differ
        )
        lines.append(f"Runs recomputed here because their keys differ in {named}.")
    return lines


def build_report(
    store: str | Path,
    suite: str,
    *,
    out_dir: str | Path | None = None,
    tau: float | None = None,
    checkpoint: str | None = None,
    partial: bool = False,
) -> dict[str, Path]:
    """Build every report file of a suite from its stored results.

    Args:
        store: The suite's results directory (holds ``runs/``).
        suite: Suite name.
        out_dir: Where to write (default: ``store``).
        tau: The tau of the main table and figure (None: :func:`main_tau`).
        checkpoint: SHA-256 prefix to report (default: the latest context).
        partial: Report a store that lacks some of the suite's planned runs
            at ``tau`` (``summary.md`` names them); else such a store is refused.

    Returns:
        Paths written, by name.

    Raises:
        ReportError: If the store has no matching rows, or lacks planned runs
            and ``partial`` is false (nothing is written then).
    """
    store = Path(store)
    out = Path(out_dir) if out_dir is not None else store
    tau = main_tau(store, suite, checkpoint, tau)
    rows, notes = select_context(load_rows(store), suite, checkpoint, tau=tau)
    one_run_per_case(rows)
    table = case_table(rows)
    agg = aggregate(table, planned_cases(suite))
    stored_taus = sorted({a["tau"] for a in agg if a["tau"] is not None})
    if stored_taus and tau not in stored_taus:
        # Without this, an empty table would replace the store's summary.
        raise ReportError(
            f"no stored runs at tau {tau:g}; the store has tau "
            + ", ".join(f"{t:g}" for t in stored_taus)
        )
    state = completeness(suite, rows, tau, planned_taus(rows, tau, store))
    require_complete(state, store, partial=partial)
    first = rows[0]
    ckpt = first["checkpoint_sha256"]
    carriers = load_carriers(store, ckpt)
    main = [a for a in agg if a["tau"] == tau]
    sweep_taus = sorted({a["tau"] for a in agg})
    sweep = [a for a in agg if a["support"] == (main[0]["support"] if main else a["support"])]
    names: list[str] = []
    # The files are one set: a report killed or failing half-way leaves the
    # previous set whole (summary.md always describes the cases.csv beside it).
    with atomic_file_set(out, REPORT_FILES) as staging:
        write_text_atomic(staging / "cases.csv", _csv_text(table, CASE_COLUMNS))
        names.append("cases.csv")
        if len(sweep_taus) > 1:
            cols = ("mode", "tau", "support", "eps_den", "n", "mean_pct", "median_pct", "worse",
                    "better", "failed", "missing", "fit_s", "predict_s")  # fmt: skip
            write_text_atomic(staging / "tau_sweep.csv", _csv_text(sweep, cols))
            _plot_sweep(sweep, carriers, tau, staging / "tau_sweep.png")
            names += ["tau_sweep.csv", "tau_sweep.png"]
        if _plot_deltas(table, tau, staging / "deltas.png"):
            names.append("deltas.png")
        text = _summary_text(
            store, suite, rows, table, agg, main, sweep, sweep_taus, carriers, tau, notes, state
        )
        write_text_atomic(staging / "summary.md", text)
        names.append("summary.md")
    return {name: out / name for name in names}


_MISSING_LISTED = 40
"""How many missing runs summary.md lists by name."""

_SUMMARY_HEADER = ("variant", "cases", "mean delta", "median delta", "#worse", "#failed",
                   "#missing", "paper mean (TabPFN v3 weights)")  # fmt: skip
_PER_CASE_HEADER = ("dataset", "seed", "RMSE unpatched", "RMSE OAttention", "delta OA",
                    "RMSE Full-O", "delta Full-O")  # fmt: skip
_SWEEP_HEADER = ("tau", "OAttention mean", "OAttention median", "OA #worse", "Full-O mean",
                 "Full-O median", "Full-O #worse")  # fmt: skip


def _summary_rows(main: Sequence[dict[str, Any]], tau: float) -> list[list[object]]:
    """One row per retrofit variant at ``tau`` beside the paper's mean; one note row if none."""
    if not main:
        return [[f"(no retrofit runs at tau = {tau:g})", "", "", "", "", "", "", ""]]
    return [
        [
            f"{_MODE_LABEL[a['mode']]} (support={a['support']}, eps_den={a['eps_den']:g})",
            a["n"],
            _pct(a["mean_pct"]),
            _pct(a["median_pct"]),
            f"{a['worse']}/{a['n']}",
            a["failed"],
            a["missing"],
            _quoted_pct(PAPER_MEAN_DELTA_PCT.get(a["mode"])),
        ]
        for a in main
    ]


def _per_case_rows(table: Sequence[dict[str, Any]], tau: float) -> list[list[object]]:
    """One row per (dataset, seed): RMSE of each variant at ``tau`` and the deltas."""
    by_case: dict[tuple[str, int], dict[str, dict[str, Any]]] = {}
    for rec in table:
        if rec["mode"] == "none" or rec["tau"] == tau:
            by_case.setdefault((rec["dataset"], rec["seed"]), {})[rec["mode"]] = rec

    def cell(rec: dict[str, Any]) -> str:
        if not rec:
            return "-"
        return _fmt(rec.get("rmse"), ".5f") if rec.get("status") == "ok" else rec["status"]

    rows = []
    for (dataset, seed), recs in by_case.items():
        none, oa, fo = recs.get("none", {}), recs.get("oattention", {}), recs.get("full-o", {})
        rows.append(
            [dataset, seed, cell(none), cell(oa), _pct(oa.get("delta_pct")), cell(fo),
             _pct(fo.get("delta_pct"))]
        )  # fmt: skip
    return rows


def _time_rows(table: Sequence[dict[str, Any]], tau: float) -> list[list[object]]:
    """Fit and predict seconds summed per variant (the unpatched host, and each mode at tau)."""
    rows = []
    for mode in ("none", "oattention", "full-o"):
        recs = [r for r in table if r["mode"] == mode and (mode == "none" or r["tau"] == tau)]
        if recs:
            fit = sum(r["fit_s"] or 0.0 for r in recs)
            pred = sum(r["predict_s"] or 0.0 for r in recs)
            label = _MODE_LABEL[mode] + ("" if mode == "none" else f" (tau={tau:g})")
            rows.append([label, len(recs), f"{fit:.1f}", f"{pred:.1f}"])
    return rows


def _sweep_rows(sweep: Sequence[dict[str, Any]], taus: Sequence[float]) -> list[list[object]]:
    """Mean, median and #worse of OAttention and Full-O at each tau ("-" where not run)."""

    def cells(mode: str, tau: float) -> list[object]:
        a = next((a for a in sweep if a["mode"] == mode and a["tau"] == tau), None)
        if a is None:
            return ["-", "-", "-"]
        return [_pct(a["mean_pct"]), _pct(a["median_pct"]), f"{a['worse']}/{a['n']}"]

    return [[f"{t:g}", *cells("oattention", t), *cells("full-o", t)] for t in taus]


def _summary_text(
    store: Path,
    suite: str,
    rows: Sequence[dict[str, Any]],
    table: Sequence[dict[str, Any]],
    agg: Sequence[dict[str, Any]],
    main: Sequence[dict[str, Any]],
    sweep: Sequence[dict[str, Any]],
    sweep_taus: Sequence[float],
    carriers: dict[str, Any] | None,
    tau: float,
    notes: Sequence[str],
    state: Completeness,
) -> str:
    first = rows[0]
    statuses = {s: sum(r.get("status") == s for r in rows) for s in ("ok", "failed", "nonfinite")}
    lines = [
        f"# {suite}: retrofit RMSE change vs the unpatched host",
        "",
        "Generated by `tabpfn-retrofit report` from the stored runs in "
        f"`{store.name}/runs/` (never edited by hand).",
        "",
        f"- checkpoint: `{first.get('model', '')}`, SHA-256 `{first['checkpoint_sha256']}`",
        f"- n_estimators: {first['n_estimators']}; dtype: {first['dtype']} "
        f"(resolved: {first.get('resolved_dtype')}, autocast: {first.get('autocast')}); "
        f"device: {first['device']}; fit_mode: {first.get('fit_mode')}",
        f"- versions: tabpfn-retrofit {first.get('tabpfn_retrofit_version')}, "
        f"tabpfn {first.get('tabpfn_version')}, torch {first.get('torch_version')}, "
        f"scikit-learn {first.get('scikit_learn_version')}, numpy {first.get('numpy_version')}",
        f"- runs in this report: {len(rows)} (ok {statuses['ok']}, failed {statuses['failed']}, "
        f"non-finite {statuses['nonfinite']})",
        f"- planned runs {state.where}: {len(state.planned)}; stored "
        f"{len(state.planned) - len(state.missing)} ({len(state.failed)} failed); missing "
        f"(never stored): {len(state.missing)}"
        + (" (**a partial report**)" if state.missing else ""),
        "- protocol: seed s sets the split (train_test_split, test_size=0.25, random_state=s) "
        "and TabPFN's random_state, identical for all variants; "
        "delta = (RMSE_variant - RMSE_none) / RMSE_none",
    ]
    if first.get("max_train_rows") or first.get("max_test_rows"):
        lines.append(
            f"- **row limits**: train {first.get('max_train_rows')}, test "
            f"{first.get('max_test_rows')} (not the full protocol)"
        )
    lines += [f"- note: {n}" for n in notes]
    lines += ["", f"## Summary at tau = {tau:g}", ""]
    lines += markdown_table(_SUMMARY_HEADER, _summary_rows(main, tau))
    lines += [
        "",
        "The paper's numbers were measured on the real TabPFN v3 weights; numbers from "
        "another checkpoint (e.g. the embedded host) are not comparable with them.",
        "",
        f"## Per case (tau = {tau:g})",
        "",
        *markdown_table(_PER_CASE_HEADER, _per_case_rows(table, tau)),
    ]
    if state.missing:
        lines += ["", f"## Missing runs (planned {state.where}, never stored)", ""]
        lines += [f"- {run.label}" for run in state.missing[:_MISSING_LISTED]]
        if len(state.missing) > _MISSING_LISTED:
            lines.append(f"- and {len(state.missing) - _MISSING_LISTED} more")
    failures = [r for r in table if r["status"] != "ok"]
    if failures:
        lines += ["", "## Failures (recorded, not dropped)", ""]
        lines += [
            f"- {r['dataset']}/{r['seed']}/{r['mode']}/tau={r['tau']}: {r['status']}: {r['error']}"
            for r in failures
        ]
    lines += ["", "## Times (sum over runs in this report)", ""]
    if first.get("fit_mode") == "fit_preprocessors":
        lines += [
            "With fit_mode `fit_preprocessors` the forward pass of the model runs at predict, "
            "so predict holds nearly all the model time.",
            "",
        ]
    lines += markdown_table(("variant", "runs", "fit (s)", "predict (s)"), _time_rows(table, tau))
    lines.append("")
    lines += _sessions_section(store, first["checkpoint_sha256"])
    if len(sweep_taus) > 1:
        lines += [
            "## Tau sweep",
            "",
            "Mean and median relative RMSE change over the paired cases, per tau "
            "(`tau_sweep.csv`, `tau_sweep.png`).",
            "",
            *markdown_table(_SWEEP_HEADER, _sweep_rows(sweep, sweep_taus)),
        ]
        lines.append("")
    lines += _carrier_section(carriers, sweep_taus, tau)
    lines += [
        "## Reproduce",
        "",
        "```",
        f"tabpfn-retrofit eval --suite {suite} --model MODEL            # default tau",
        f"tabpfn-retrofit eval --suite {suite} --model MODEL --sweep    # tau sweep + carriers",
        f"tabpfn-retrofit report --suite {suite}",
        "```",
        "",
        "MODEL is `embedded` for the shipped host, `v3` for the real TabPFN v3 weights "
        "(the paper's host) or a checkpoint path; runs already stored are skipped.",
        "",
        "## Files",
        "",
        "- `cases.csv`: one row per case x variant x tau with provenance",
        "- `deltas.png`: per-case deltas at the default tau",
    ]
    if len(sweep_taus) > 1:
        lines.append("- `tau_sweep.csv`, `tau_sweep.png`: the sweep")
    lines.append("- `runs/*.json`: the stored runs (one per case x variant x tau)")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- #
# Command line (`tabpfn-retrofit report`)
# --------------------------------------------------------------------------- #


def report_command(args: Any) -> int:
    """Run ``tabpfn-retrofit report``; returns the exit status.

    Raises:
        ReportError: Nothing to report (the command line makes it one line, exit 2).
        StoreError: A run file is unreadable.
    """
    store = Path(args.store) if args.store else default_output(args.suite)
    tau = main_tau(store, args.suite, args.checkpoint, args.tau)
    written = build_report(
        store,
        args.suite,
        out_dir=args.out,
        tau=tau,
        checkpoint=args.checkpoint,
        partial=getattr(args, "partial", False),
    )
    for path in written.values():
        print(f"wrote {path}")
    rows, notes = select_context(load_rows(store), args.suite, args.checkpoint, tau=tau)
    for note in notes:  # also in summary.md; said here so that nothing is left out unseen
        print(f"note: {note}")
    print(completeness(args.suite, rows, tau, planned_taus(rows, tau, store)).line())
    committed = committed_store(getattr(args, "committed", None), args.suite, store)
    print("\n".join(["", *comparison_lines(store, committed, args.suite, tau, args.checkpoint)]))
    return 0
