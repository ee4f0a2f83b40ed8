"""The Markdown form of a GPU check report (``gpu_check.md``)."""

from __future__ import annotations

from typing import Any

from eval.markdown import markdown_table
from lab.device_checks import PARTS

__all__ = ["render_markdown"]


_EXACTNESS_HEADER = (
    "case",
    "dtype",
    "route",
    "L-inf vs f64",
    "vs same-dtype direct",
    "same-dtype floor",
    "null rows 0",
    "empty rows 0",
    "null-source insertion L-inf",
)
_HOST_HEADER = (
    "dtype",
    "mode",
    "null row",
    "old rows rel. drift",
    "tolerance",
    "null row final max",
    "holds",
)


def _exactness_rows(rows: list[dict[str, Any]]) -> list[list[object]]:
    """One table row per (case, dtype): errors against float64 and the contracts."""
    return [
        [
            r["case"],
            r["dtype"],
            r["route"],
            f"{r['linf_vs_float64']:.3g}",
            f"{r['linf_vs_same_dtype_direct']:.3g}",
            f"{r['linf_same_dtype_direct_vs_float64']:.3g}",
            r["null_receivers_exactly_zero"],
            f"{r['empty_support_rows_exactly_zero']} ({r['n_empty_rows']})",
            f"{r['null_source_insertion_linf']:.3g}",
        ]
        for r in rows
    ]


def _host_rows(rows: list[dict[str, Any]]) -> list[list[object]]:
    """One table row per (dtype, mode, null row): drift of the old rows and the verdict."""
    return [
        [
            r["dtype"],
            r["mode"],
            r["null_row"],
            f"{r['old_rows_rel_drift']:.3g}",
            f"{r['tolerance_rel']:.3g}",
            f"{r['null_row_final_max_abs']:.3g}",
            r.get("holds", "control"),
        ]
        for r in rows
    ]


def _speed_rows(rows: list[dict[str, Any]]) -> list[list[object]]:
    """One table row per benchmarked (dtype, shape): SDPA ms and each peer's ratio to it."""

    def cell(r: dict[str, Any], name: str) -> str:
        x = r["ratios_vs_sdpa"].get(name)
        return "—" if x is None else f"{x['ratio']:.3f} [{x['ci_low']:.3f}, {x['ci_high']:.3f}]"

    return [
        [
            r["dtype"],
            tuple(r["shape"]),
            f"{r['group']} {r['label']}",
            f"{r['median_ms']['sdpa']:.3f}",
            cell(r, "oattention"),
            cell(r, "oattention_trusted"),
            cell(r, "sdpa_efficient"),
        ]
        for r in rows
    ]


def render_markdown(report: dict[str, Any]) -> str:
    """The Markdown form of a GPU check report: one section per part that ran."""
    lines = [
        "# GPU check: OAttention on the device",
        "",
        f"Device `{report['device_name']}`, torch {report['torch']} (CUDA {report['cuda']}), "
        f"commit `{report['provenance'].get('git_commit')}`, {report['provenance']['date_utc']}"
        + (", quick dry run" if report["quick"] else "")
        + f"; {report['wall_s']:.0f} s in all.",
        "",
    ]
    ex = report.get("exactness")
    if ex and "error" not in ex:
        lines += [
            "## Operator exactness",
            "",
            "Worst fp32 L-inf vs float64 direct evaluation: "
            f"{ex['worst_fp32_linf_vs_float64']:.3g} "
            f"(paper: <= {ex['paper_fp32_linf']:.3g}; met: {ex['meets_paper_fp32_claim']}). "
            f"All contracts: {ex['all_contracts']}. Vectorised oracle vs per-row reference: "
            f"{ex['oracle_check_linf_direct_vs_reference']:.3g}.",
            "",
            *markdown_table(_EXACTNESS_HEADER, _exactness_rows(ex["rows"]), align="lllrrrllr"),
            "",
        ]
    host = report.get("host")
    if host and "error" not in host:
        lines += [
            "## Patched host: zero row inserted at ICL block 0",
            "",
            f"Host: {host['host']}. Criterion: {host['criterion']}. All hold: {host['all_hold']}.",
            "",
            *markdown_table(_HOST_HEADER, _host_rows(host["rows"]), align="lllrrrl"),
            "",
        ]
    b = report.get("bench")
    if b and "error" not in b:
        lines += [
            "## Speed (interleaved, median ratio to SDPA [95% CI])",
            "",
            *markdown_table(
                ("dtype", "shape", "case", "SDPA ms", "OAttention", "trusted", "SDPA efficient"),
                _speed_rows(b["rows"]),
                align="lllrlll",
            ),
            "",
        ]
        mem = b["memory"]
        if "skipped" in mem:
            lines += [f"Peak memory: not measured ({mem['skipped']}).", ""]
        else:
            lines += [f"Peak device memory one call adds, shape {tuple(mem['shape'])}:", ""]
            for dt, m in mem["dtypes"].items():
                per = ", ".join(
                    f"{n} {v / 2**20:.1f} MiB" for n, v in m["extra_peak_bytes"].items()
                )
                ratio = m["ratio_oattention_vs_sdpa"]
                lines.append(
                    f"- {dt}: {per}; OAttention / SDPA "
                    + (f"{ratio:.3f}" if ratio is not None else "—")
                )
            lines.append("")
    rb = report.get("batched")
    if rb and "error" not in rb:
        lines += [
            "## Ragged batches: null-padded predict_batched vs per-dataset predict",
            "",
            f"{rb['n_datasets']} datasets of {rb['rows'][0]}-{rb['rows'][1]} train rows; "
            f"max log-probability gap to predict {rb['max_logprob_gap']:.3g} (relative to "
            f"max(1, |log p|)); padded cells {rb['padding']['padded_cell_fraction']:.1%} "
            f"in {rb['padding']['forwards']} forwards.",
            "",
            *markdown_table(
                ("peer", "ms / dataset", "ratio to loop"),
                [
                    [
                        name,
                        f"{row['median_s_per_dataset'] * 1e3:.1f}",
                        "1"
                        if row["ratio_to_loop"] is None
                        else f"{row['ratio_to_loop']['ratio']:.2f} "
                        f"[{row['ratio_to_loop']['ci_low']:.2f}, "
                        f"{row['ratio_to_loop']['ci_high']:.2f}]",
                    ]
                    for name, row in rb["case"]["peers"].items()
                ],
                align="lrl",
            ),
            "",
        ]
    for part in PARTS:
        if report.get(part, {}).get("warnings"):
            lines += [f"Warnings in {part}:", ""]
            lines += [f"- {w}" for w in report[part]["warnings"][:20]]
            lines.append("")
        if report.get(part, {}).get("error"):
            lines += [f"## {part}: failed", "", "```", report[part]["error"], "```", ""]
    return "\n".join(lines)
