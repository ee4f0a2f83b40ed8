"""The Markdown form of a ``bench`` report (``bench.md``)."""

from __future__ import annotations

from typing import Any

import numpy as np

from eval.markdown import markdown_table
from lab.benchmarks import TARGETS

__all__ = ["part_text", "render_markdown"]


def _fmt_ratio(r: dict[str, float]) -> str:
    return f"{r['ratio']:.3f} [{r['ci_low']:.3f}, {r['ci_high']:.3f}]"


def _mark(met: bool | None) -> str:
    return "—" if met is None else ("yes" if met else "**no**")


def _mib_or_unknown(n_bytes: float | None) -> str:
    """Bytes as MiB with one decimal, or ``unknown`` where the probe read nothing."""
    return "unknown" if n_bytes is None else f"{n_bytes / 2.0**20:.1f}"


def _summary_lines(report: dict[str, Any]) -> list[str]:
    """One line per target: what was measured against it and whether it was met."""
    out = ["## Targets", ""]
    att = report.get("attention")
    if att:
        for group in ("large", "small"):
            rows = [r for r in att["rows"] if r["group"] == group]
            if rows:
                highs = ", ".join(f"{r['ratios']['oattention']['ci_high']:.3f}" for r in rows)
                met = all(r.get("met") for r in rows)
                out.append(
                    f"- attention, {group} shapes: upper CI bounds {highs} vs target "
                    f"<= {TARGETS[group]}: {_mark(met)}"
                )
        one = att.get("one_thread")
        passes = ((att["rows"], "all threads"), (one["rows"] if one else [], "1 thread"))
        for rows, threads in passes:
            for key, what in (
                ("block_vs_kernel_with_bias", "as the patched blocks call it (`nulls_are_zero`)"),
                ("oattention_vs_kernel_with_bias", "checked entry"),
            ):
                medians = [r[key]["ratio"] for r in rows if key in r]
                if medians:
                    listed = ", ".join(f"{m:.3f}" for m in medians)
                    out.append(
                        f"- OAttention over its kernel+bias, {what}, {threads}: medians {listed} "
                        f"vs target <= {TARGETS['own_work']} at every shape: "
                        f"{_mark(max(medians) <= TARGETS['own_work'])}"
                    )
    mem = report.get("memory")
    if mem and "ratio" in mem and mem["ratio"] is not None:
        out.append(
            f"- peak memory: OAttention / SDPA {mem['ratio']:.3f} vs target <= "
            f"{mem['target']}: {_mark(mem['met'])}"
        )
    est = report.get("estimator")
    if est and "pooled" in est:
        for m, r in est["pooled"].items():
            out.append(
                f"- fit+predict, {m} / none: {_fmt_ratio(r)} vs target <= {est['target']} "
                f"(upper CI): {_mark(est['met'][m])}"
            )
    return [*out, ""] if len(out) > 2 else []


_ATTENTION_HEADER = (
    "shape (B,H,L,S,D)",
    "case",
    "SDPA ms",
    "OAttention ms",
    "ratio [95% CI]",
    "trusted ratio",
    "block ratio",
    "kernel+bias ratio",
    "OAttention / kernel+bias",
    "block / kernel+bias",
    "target",
    "met",
)


def _attention_rows(rows: list[dict[str, Any]]) -> list[list[object]]:
    """One table row per attention shape: medians, ratios to SDPA, target and verdict."""
    out = []
    for row in rows:
        kb = row["ratios"].get("kernel_with_bias")
        own = row.get("oattention_vs_kernel_with_bias")
        block = row["ratios"].get("oattention_block")
        block_own = row.get("block_vs_kernel_with_bias")
        out.append(
            [
                tuple(row["shape"]),
                f"{row['group']} {row['label']}",
                f"{row['median_ms']['sdpa']:.2f}",
                f"{row['median_ms']['oattention']:.2f}",
                _fmt_ratio(row["ratios"]["oattention"]),
                _fmt_ratio(row["ratios"]["oattention_trusted"]),
                _fmt_ratio(block) if block else "—",
                _fmt_ratio(kb) if kb else "—",
                _fmt_ratio(own) if own else "—",
                _fmt_ratio(block_own) if block_own else "—",
                row["target"] if row["target"] is not None else "—",
                _mark(row.get("met")),
            ]
        )
    return out


def _own_work_rows(rows: list[dict[str, Any]]) -> list[list[object]]:
    """One table row per shape of the one-thread pass: the kernel's time and OAttention's ratios."""
    return [
        [
            tuple(row["shape"]),
            f"{row['group']} {row['label']}",
            f"{row['median_ms']['kernel_with_bias']:.2f}",
            _fmt_ratio(row["oattention_vs_kernel_with_bias"]),
            _fmt_ratio(row["block_vs_kernel_with_bias"]),
            _mark(row["block_vs_kernel_with_bias"]["ratio"] <= TARGETS["own_work"]),
        ]
        for row in rows
    ]


def _memory_rows(peers: dict[str, dict[str, Any]]) -> list[list[object]]:
    """One table row per peer: median and per-run extra peak, output and input sizes (MiB)."""
    mib = 2.0**20
    return [
        [
            peer,
            _mib_or_unknown(m["median_extra_peak_bytes"]),
            ", ".join(_mib_or_unknown(b) for b in m["extra_peak_bytes"]),
            f"{m['output_bytes'] / mib:.1f}",
            f"{m['input_bytes'] / mib:.1f}",
        ]
        for peer, m in peers.items()
    ]


_ESTIMATOR_HEADER = (
    "dataset",
    "seed",
    "train/test rows",
    "none s",
    "oattention ratio",
    "full-o ratio",
)


def _estimator_rows(cases: list[dict[str, Any]]) -> list[list[object]]:
    """One table row per (dataset, seed): seconds of mode='none' and each mode's ratio to it."""
    return [
        [
            c["dataset"],
            c["seed"],
            f"{c['n_train']}/{c['n_test']}",
            f"{c['median_s']['none']:.2f}",
            *(
                _fmt_ratio(c["ratios"][m]) if m in c["ratios"] else "—"
                for m in ("oattention", "full-o")
            ),
        ]
        for c in cases
    ]


def _memory_lines(mem: dict[str, Any] | None) -> list[str]:
    """The ``memory`` part: each peer's extra peak memory of one call."""
    if not mem:
        return []
    lines = ["## Peak memory of one call (fresh process each)", ""]
    if "error" in mem:
        return [*lines, f"Not measured: {mem['error']}", ""]
    ratio = mem["ratio"]
    shown = "unknown (a probe read nothing)" if ratio is None else f"{ratio:.3f}"
    return [
        *lines,
        f"Shape {tuple(mem['shape'])}, {mem['runs']} runs per peer; {mem['method']}.",
        "",
        *markdown_table(
            ("peer", "extra peak MiB (median)", "runs (MiB)", "output MiB", "inputs MiB"),
            _memory_rows(mem["peers"]),
            align="lrlrr",
        ),
        "",
        f"OAttention / SDPA extra peak: {shown} (target <= {mem['target']}: {_mark(mem['met'])}).",
        "",
    ]


def _fit_loop_lines(loop: dict[str, Any] | None) -> list[str]:
    """The ``fit_loop`` part: each peer's loop against plain tabpfn's."""
    if not loop:
        return []
    lines = ["## A loop of fit + predict over small datasets vs plain tabpfn's loop", ""]
    if "skipped" in loop:
        return [*lines, f"Not measured: {loop['skipped']}", ""]
    setup = loop["setup"]
    lines += [
        f"{setup['datasets']} datasets of {setup['train_rows'][0]}-{setup['train_rows'][1]} "
        f"train rows, host `{setup['host']}`, {setup['torch_threads']} torch thread, "
        f"{setup['inference_precision']}, {setup['rounds']} rounds ({setup['interleaved']}); "
        f"clock: {setup['clock']}. Plain tabpfn's loop: {loop['median_s']['tabpfn']:.2f} s.",
        "",
        *markdown_table(
            ("peer", "median s", "ratio to tabpfn [95% CI]", "target", "met"),
            [
                [
                    name,
                    f"{loop['median_s'][name]:.2f}",
                    _fmt_ratio(r),
                    f"<= {loop['targets'][name]}",
                    _mark(loop["met"][name]),
                ]
                for name, r in loop["ratios"].items()
            ],
            align="lrlrl",
        ),
        "",
    ]
    return lines


def _chunk_lines(chunks: dict[str, Any] | None) -> list[str]:
    """The ``chunks`` part: cache-sized stage 0-2 chunks against tabpfn's default."""
    if not chunks:
        return []
    lines = ["## Cache-sized chunks vs tabpfn's default chunks (predict, CPU, float32)", ""]
    if "skipped" in chunks:
        return [*lines, f"Not measured: {chunks['skipped']}", ""]
    setup = chunks["setup"]
    same = chunks["bit_identical"]
    lines += [
        f"Host `{setup['host']}` ({setup['mode']}), train rows {setup['train_rows']}, test rows "
        f"{setup['test_rows']}; {setup['cache_sized_cells']} cells a chunk against "
        f"{setup['default_cells']}; {setup['rounds']} interleaved rounds; clock: "
        f"{setup['clock']}. Bit-identical predictions: {sum(same)} of {len(same)} datasets"
        + (
            f"; largest difference {max(chunks['ulps']):.2g} float32 ulps of the scale."
            if chunks.get("ulps")
            else "."
        ),
        "",
        *markdown_table(
            (
                "torch threads",
                "default CPU s",
                "cache-sized CPU s",
                "CPU ratio [95% CI]",
                "wall ratio [95% CI]",
            ),
            [
                [
                    str(row["threads"]),
                    f"{float(np.median(row['seconds']['default'])):.2f}",
                    f"{float(np.median(row['seconds']['cache_sized'])):.2f}",
                    _fmt_ratio(row["ratio"]),
                    _fmt_ratio(row["wall_ratio"]) if "wall_ratio" in row else "—",
                ]
                for row in chunks["by_threads"]
            ],
            align="rrrll",
        ),
        "",
    ]
    return lines


_PART_LINES = {"memory": _memory_lines, "fit_loop": _fit_loop_lines, "chunks": _chunk_lines}


def part_text(part: str, result: dict[str, Any]) -> str:
    """The section of ``bench.md`` for one finished part, as ``bench`` prints it.

    Args:
        part: ``"memory"``, ``"fit_loop"`` or ``"chunks"`` (the parts measured
            as a whole; the others print a line per shape or case).
        result: The part's entry of the report.
    """
    return "\n".join(_PART_LINES[part](result)).rstrip()


def render_markdown(report: dict[str, Any]) -> str:
    """The Markdown form of a benchmark report."""
    prov = report["provenance"]
    lines = [
        "# OAttention vs plain attention: benchmark",
        "",
        f"Date {prov['date_utc']}, commit `{prov['git_commit']}`"
        + (" (dirty tree)" if prov.get("git_dirty") else "")
        + f", torch {prov['packages']['torch']}, tabpfn {prov['packages']['tabpfn']}, "
        f"{prov['cpu_model']}, {prov['threads']} torch threads"
        + (", quick smoke run" if report["quick"] else "")
        + ".",
        "",
        "Ratios are the median over interleaved rounds of `t_peer / t_sdpa`, with a 95 % "
        "percentile bootstrap CI over rounds; a target is met when the upper CI bound is at "
        "most the target. `oattention_trusted` is the `validate=False` entry; `block` is the "
        "call the patched blocks make (`validate=False, nulls_are_zero=True`, on inputs whose "
        "null tokens' q, k and v are zero, as those blocks guarantee).",
        "",
    ]
    lines += _summary_lines(report)
    att = report.get("attention")
    if att:
        lines += [
            "## Attention (CPU, fp32 unless stated)",
            "",
            *markdown_table(_ATTENTION_HEADER, _attention_rows(att["rows"]), align="llrrllllllrl"),
        ]
        lines += [
            "",
            "`kernel+bias` is the CPU flash kernel OAttention calls, given the same "
            "`(B, 1, 1, S)` log-presence bias and nothing else: the gap between it and SDPA is "
            "the kernel's masked path (an extra pass adding the bias to each score block), "
            "the gap between OAttention and it is OAttention's own work (presence check, "
            "`log p`, the gate pass over the output).",
            "",
            f"Rounds per shape: {att['repeats']}; ICL shapes from {att['icl_source']}.",
            "",
        ]
        one = att.get("one_thread")
        if one:
            lines += [
                "### OAttention's own work at one torch thread",
                "",
                "The same inputs and rounds, only OAttention and its kernel+bias timed, "
                "interleaved; `met` compares the block call's median with "
                f"{TARGETS['own_work']}.",
                "",
                *markdown_table(
                    (
                        "shape (B,H,L,S,D)",
                        "case",
                        "kernel+bias ms",
                        "OAttention / kernel+bias",
                        "block / kernel+bias",
                        "met",
                    ),
                    _own_work_rows(one["rows"]),
                    align="llrlll",
                ),
                "",
            ]
    lines += _memory_lines(report.get("memory"))
    est = report.get("estimator")
    if est:
        lines += ["## OTabPFNRegressor fit + predict vs mode='none' (CPU, float32)", ""]
        if "skipped" in est:
            lines += [f"Not measured: {est['skipped']}", ""]
        else:
            lines += [
                f"Host `{est['model_path']}`, n_estimators {est['n_estimators']}, "
                f"{est['rounds_per_case']} interleaved rounds per case.",
                "",
                *markdown_table(_ESTIMATOR_HEADER, _estimator_rows(est["cases"]), align="lrlrll"),
            ]
            lines += ["", "Pooled over all rounds:", ""]
            for m, r in est["pooled"].items():
                lines.append(
                    f"- {m}: {_fmt_ratio(r)} (target <= {est['target']}: upper CI "
                    f"{_mark(est['met'][m])}, point {_mark(est['met_point'][m])})"
                )
            lines.append("")
    lines += _fit_loop_lines(report.get("fit_loop"))
    lines += _chunk_lines(report.get("chunks"))
    env = report["environment"]
    lines += [
        "## Environment",
        "",
        f"Load average (1, 5, 15 min) at start: {env['start']['loadavg_1_5_15']}, "
        f"at end: {env['end']['loadavg_1_5_15']}. Thread variables: "
        f"{env['start']['thread_env']}.",
        "",
        "Other busy processes (CPU % over 1 s) at start and end:",
        "",
    ]
    for when in ("start", "end"):
        procs = env[when]["busy_processes"] or [{"cpu_percent": 0, "command": "none"}]
        for p in procs:
            lines.append(f"- {when}: {p['cpu_percent']} % `{p['command']}`")
    lines.append("")
    return "\n".join(lines)
