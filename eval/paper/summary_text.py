"""The regression report's text: ``summary.md`` and the tables ``report`` prints.

Prose and formatting only: every number comes from the report's data
(:mod:`eval.paper.tables`, the carrier statistics, the session records) and
every table is rendered by :func:`eval.markdown.markdown_table`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from eval.markdown import markdown_table
from eval.paper.completeness import Completeness
from eval.paper.protocol import PAPER_MEAN_DELTA_PCT
from eval.paper.record import RunRecord, SessionRecord
from eval.paper.tables import MODE_LABEL, CaseRow, VariantSummary, per_case_at, variant_label
from patches.presence import presence

__all__ = [
    "SUMMARY_HEADER",
    "SummaryInputs",
    "beside_lines",
    "fmt",
    "pct",
    "presence_at",
    "summary_lines",
    "summary_text",
]

_MISSING_LISTED = 40
"""How many missing runs summary.md lists by name."""

SUMMARY_HEADER = ("variant", "cases", "mean delta", "median delta", "#worse", "#failed",
                  "#missing", "paper mean (TabPFN v3 weights)")  # fmt: skip
"""The summary table's columns."""
_PER_CASE_HEADER = ("dataset", "seed", "RMSE unpatched", "RMSE OAttention", "delta OA",
                    "RMSE Full-O", "delta Full-O")  # fmt: skip
_SWEEP_HEADER = ("tau", "OAttention mean", "OAttention median", "OA #worse", "Full-O mean",
                 "Full-O median", "Full-O #worse")  # fmt: skip
_BESIDE_HEADER = ("variant", "cases (yours / committed)", "mean (yours)", "mean (committed)",
                  "median (yours)", "median (committed)", "#worse (yours / committed)")  # fmt: skip


def fmt(value: Any, spec: str = ".4f") -> str:
    """``format(value, spec)``; ``"n/a"`` for ``None`` and non-finite floats."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "n/a"
    return format(value, spec)


def pct(value: Any) -> str:
    """A change in percent to three significant digits, trailing zeros kept.

    Retrofit deltas span 1e-6 % to 1 %: -0.0049951 is "-0.00500 %", never
    "-0.005 %" beside another's "-0.00499 %".
    """
    return "n/a" if value is None else f"{value:+#.3g} %"


def _quoted_pct(value: Any) -> str:
    # A published figure, as published (the paper gives +0.088, not +0.0880).
    return "n/a" if value is None else f"{value:+.3g} %"


def presence_at(sq_norm: float, tau: float) -> float:
    """Presence of a carrier with squared norm ``sq_norm`` (``patches.presence``)."""
    carrier = torch.tensor([[math.sqrt(sq_norm)]], dtype=torch.float64)
    return float(presence(carrier, tau)[0])


def _summary_rows(main: Sequence[VariantSummary], tau: float) -> list[list[object]]:
    """One row per retrofit variant at ``tau`` beside the paper's mean; one note row if none."""
    if not main:
        return [[f"(no retrofit runs at tau = {tau:g})", "", "", "", "", "", "", ""]]
    return [
        [
            variant_label(s),
            s.n,
            pct(s.mean_pct),
            pct(s.median_pct),
            f"{s.worse}/{s.n}",
            s.failed,
            s.missing,
            _quoted_pct(PAPER_MEAN_DELTA_PCT.get(s.mode)),
        ]
        for s in main
    ]


def summary_lines(main: Sequence[VariantSummary], tau: float) -> list[str]:
    """The summary table at ``tau`` (as in ``summary.md``), the lines ``report`` prints."""
    return markdown_table(SUMMARY_HEADER, _summary_rows(main, tau))


def beside_lines(mine: Sequence[VariantSummary], theirs: Sequence[VariantSummary]) -> list[str]:
    """This store's summary numbers beside the committed table's, both to the same digits."""
    by_variant = {(s.mode, s.support, s.eps_den): s for s in theirs}
    rows = []
    for a in mine:
        b = by_variant.get((a.mode, a.support, a.eps_den))
        rows.append(
            [
                MODE_LABEL[a.mode],
                f"{a.n} / {b.n if b else '-'}",
                pct(a.mean_pct),
                pct(b.mean_pct if b else None),
                pct(a.median_pct),
                pct(b.median_pct if b else None),
                f"{a.worse} / {b.worse if b else '-'}",
            ]
        )
    return markdown_table(_BESIDE_HEADER, rows)


def _per_case_rows(table: Sequence[CaseRow], tau: float) -> list[list[object]]:
    """One row per (dataset, seed): RMSE of each variant at ``tau`` and the deltas."""

    def cell(row: CaseRow | None) -> str:
        if row is None:
            return "-"
        return fmt(row.run.rmse, ".5f") if row.run.ok else row.run.status

    def delta(row: CaseRow | None) -> str:
        return pct(row.delta_pct if row else None)

    rows = []
    for (dataset, seed), by_mode in per_case_at(table, tau).items():
        none, oa, fo = (by_mode.get(m) for m in ("none", "oattention", "full-o"))
        rows.append([dataset, seed, cell(none), cell(oa), delta(oa), cell(fo), delta(fo)])
    return rows


def _time_rows(table: Sequence[CaseRow], tau: float) -> list[list[object]]:
    """Fit and predict seconds summed per variant (the unpatched host, and each mode at tau)."""
    rows = []
    for mode in ("none", "oattention", "full-o"):
        runs = [r.run for r in table if r.run.mode == mode and (mode == "none" or r.run.tau == tau)]
        if runs:
            fit = sum(r.fit_s or 0.0 for r in runs)
            pred = sum(r.predict_s or 0.0 for r in runs)
            label = MODE_LABEL[mode] + ("" if mode == "none" else f" (tau={tau:g})")
            rows.append([label, len(runs), f"{fit:.1f}", f"{pred:.1f}"])
    return rows


def _sweep_rows(sweep: Sequence[VariantSummary], taus: Sequence[float]) -> list[list[object]]:
    """Mean, median and #worse of OAttention and Full-O at each tau ("-" where not run)."""

    def cells(mode: str, tau: float) -> list[object]:
        s = next((s for s in sweep if s.mode == mode and s.tau == tau), None)
        if s is None:
            return ["-", "-", "-"]
        return [pct(s.mean_pct), pct(s.median_pct), f"{s.worse}/{s.n}"]

    return [[f"{t:g}", *cells("oattention", t), *cells("full-o", t)] for t in taus]


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
            rows.append([label, *(fmt(s.get(k), ".4g") for k in _QUANTILES)])
    return rows


def _presence_rows(median: float, low: float, taus: Sequence[float]) -> list[list[object]]:
    """Presence of the median and the 1st-percentile carrier at each tau."""
    rows = []
    for tau in taus:
        pm = presence_at(median, tau)
        rows.append([f"{tau:g}", f"{pm:.6f}", f"{presence_at(low, tau):.6f}", f"{1 - pm:.3g}"])
    return rows


def _carrier_section(
    carriers: dict[str, Any] | None, taus: Sequence[float], default_tau: float
) -> list[str]:
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
        medians = ", ".join(f"block {b}: {fmt(s.get('q0.5'), '.4g')}" for b, s in per_block.items())
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


def _sessions_section(sessions: Sequence[SessionRecord]) -> list[str]:
    """The wall time and counts of each eval session (a ``reused`` column once one reused)."""
    if not sessions:
        return []
    reused = any(s.reused_committed for s in sessions)
    header = ("finished (UTC)", "command", "computed", *(("reused",) if reused else ()),
              "skipped", "failed", "wall (s)", "executor")  # fmt: skip
    rows = [
        [
            s.finished_at or "",
            f"`{s.command or ''}`",
            s.computed,
            *((s.reused_committed,) if reused else ()),
            s.skipped,
            s.failed,
            fmt(s.wall_s, ".1f"),
            s.executor or "",
        ]
        for s in sessions
    ]
    return ["## Run sessions (wall time of each `eval` command)", "",
            *markdown_table(header, rows), ""]  # fmt: skip


@dataclass(frozen=True)
class SummaryInputs:
    """Everything ``summary.md`` is written from.

    Attributes:
        store: The store reported.
        suite: Suite name.
        runs: The runs of the chosen context.
        table: Their case table.
        main: The variant summaries at ``tau``.
        sweep: The variant summaries of the sweep (the main variant's support).
        sweep_taus: Every tau summarised, ascending.
        carriers: The checkpoint's carrier statistics (``None``: not measured).
        tau: The main table's tau.
        notes: What the selection left out.
        state: The planned runs and which are missing.
        sessions: The store's eval sessions of the checkpoint, oldest first.
    """

    store: Path
    suite: str
    runs: Sequence[RunRecord]
    table: Sequence[CaseRow]
    main: Sequence[VariantSummary]
    sweep: Sequence[VariantSummary]
    sweep_taus: Sequence[float]
    carriers: dict[str, Any] | None
    tau: float
    notes: Sequence[str]
    state: Completeness
    sessions: Sequence[SessionRecord]


def _header_lines(x: SummaryInputs) -> list[str]:
    first, state = x.runs[0], x.state
    statuses = {s: sum(r.status == s for r in x.runs) for s in ("ok", "failed", "nonfinite")}
    version = first.version
    lines = [
        f"# {x.suite}: retrofit RMSE change vs the unpatched host",
        "",
        "Generated by `tabpfn-retrofit report` from the stored runs in "
        f"`{x.store.name}/runs/` (never edited by hand).",
        "",
        f"- checkpoint: `{first.model or ''}`, SHA-256 `{first.checkpoint_sha256}`",
        f"- n_estimators: {first.n_estimators}; dtype: {first.dtype} "
        f"(resolved: {first.resolved_dtype}, autocast: {first.autocast}); "
        f"device: {first.device}; fit_mode: {first.fit_mode}",
        f"- versions: tabpfn-retrofit {version('tabpfn_retrofit')}, "
        f"tabpfn {version('tabpfn')}, torch {version('torch')}, "
        f"scikit-learn {version('scikit_learn')}, numpy {version('numpy')}",
        f"- runs in this report: {len(x.runs)} (ok {statuses['ok']}, failed "
        f"{statuses['failed']}, non-finite {statuses['nonfinite']})",
        f"- planned runs {state.where}: {len(state.planned)}; stored "
        f"{len(state.planned) - len(state.missing)} ({len(state.failed)} failed); missing "
        f"(never stored): {len(state.missing)}"
        + (" (**a partial report**)" if state.missing else ""),
        "- protocol: seed s sets the split (train_test_split, test_size=0.25, random_state=s) "
        "and TabPFN's random_state, identical for all variants; "
        "delta = (RMSE_variant - RMSE_none) / RMSE_none",
    ]
    if first.max_train_rows or first.max_test_rows:
        lines.append(
            f"- **row limits**: train {first.max_train_rows}, test "
            f"{first.max_test_rows} (not the full protocol)"
        )
    return lines + [f"- note: {n}" for n in x.notes]


def _missing_and_failures(x: SummaryInputs) -> list[str]:
    lines: list[str] = []
    state = x.state
    if state.missing:
        lines += ["", f"## Missing runs (planned {state.where}, never stored)", ""]
        lines += [f"- {run.label}" for run in state.missing[:_MISSING_LISTED]]
        if len(state.missing) > _MISSING_LISTED:
            lines.append(f"- and {len(state.missing) - _MISSING_LISTED} more")
    failures = [r.run for r in x.table if not r.run.ok]
    if failures:
        lines += ["", "## Failures (recorded, not dropped)", ""]
        lines += [
            f"- {r.dataset}/{r.seed}/{r.mode}/tau={r.tau}: {r.status}: {r.error}" for r in failures
        ]
    return lines


def _reproduce_lines(suite: str, sweep: bool) -> list[str]:
    lines = [
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
    if sweep:
        lines.append("- `tau_sweep.csv`, `tau_sweep.png`: the sweep")
    lines.append("- `runs/*.json`: the stored runs (one per case x variant x tau)")
    return lines


def summary_text(x: SummaryInputs) -> str:
    """The text of ``summary.md``."""
    first, tau = x.runs[0], x.tau
    lines = _header_lines(x)
    lines += ["", f"## Summary at tau = {tau:g}", ""]
    lines += summary_lines(x.main, tau)
    lines += [
        "",
        "The paper's numbers were measured on the real TabPFN v3 weights; numbers from "
        "another checkpoint (e.g. the embedded host) are not comparable with them.",
        "",
        f"## Per case (tau = {tau:g})",
        "",
        *markdown_table(_PER_CASE_HEADER, _per_case_rows(x.table, tau)),
    ]
    lines += _missing_and_failures(x)
    lines += ["", "## Times (sum over runs in this report)", ""]
    if first.fit_mode == "fit_preprocessors":
        lines += [
            "With fit_mode `fit_preprocessors` the forward pass of the model runs at predict, "
            "so predict holds nearly all the model time.",
            "",
        ]
    lines += markdown_table(("variant", "runs", "fit (s)", "predict (s)"), _time_rows(x.table, tau))
    lines.append("")
    lines += _sessions_section(x.sessions)
    swept = len(x.sweep_taus) > 1
    if swept:
        lines += [
            "## Tau sweep",
            "",
            "Mean and median relative RMSE change over the paired cases, per tau "
            "(`tau_sweep.csv`, `tau_sweep.png`).",
            "",
            *markdown_table(_SWEEP_HEADER, _sweep_rows(x.sweep, x.sweep_taus)),
            "",
        ]
    lines += _carrier_section(x.carriers, x.sweep_taus, tau)
    lines += _reproduce_lines(x.suite, swept)
    return "\n".join(lines) + "\n"
