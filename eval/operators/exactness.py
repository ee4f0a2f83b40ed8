"""Operator exactness report: ``python -m eval exactness``.

For each dtype (fp32, bf16, fp16) and sequence length, random attention
inputs are drawn (in float32, then rounded once to the dtype, so every
comparison sees the same rounded inputs) and the fast :func:`patches.oattention`
is compared with

* the float64 reference :func:`patches.oattention_reference` evaluated on the
  rounded inputs (the true value of the formula on those inputs);
* a *same-dtype direct evaluation*: the same formula evaluated naively in the
  input dtype (scores, masked exp with max shift, sums, division, gate);

beside the error of plain ``torch.nn.functional.scaled_dot_product_attention``
against float64 on the same inputs with presence 1 and ``eps_den = 0`` (where
OAttention and softmax attention compute the same thing). The contract checks
(null receiver, null-source insertion, self-insertion, empty support) run on
both the fast path and the reference, per dtype.

Errors: ``linf_abs = max |a - b|``; ``linf_rel = linf_abs / max |b|`` (relative
to the largest reference magnitude, not element-wise).

Shape letters: B batch, H query heads (as many key/value heads here), L queries,
S sources, D head dimension.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from eval.locations import DEFAULT_OUTPUT_ROOT
from eval.markdown import markdown_table
from eval.operators.sequence_edits import drop_at, insert_at
from eval.provenance import cpu_capability_text, provenance_dict
from patches import oattention, oattention_direct, oattention_reference
from retrofit.files import write_json_atomic, write_text_atomic

__all__ = ["CONFIG", "contract_checks", "insertion_ulps", "run"]

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}

CONFIG: dict[str, Any] = {
    "lengths": [128, 256, 512, 1024, 2048],
    "quick_lengths": [32, 64],
    "B": 1,
    "H": 4,
    "D": 64,
    "inputs": "q, k, v ~ N(0, 1) i.i.d., drawn in float32 then rounded to the dtype",
    "score_scale": "1/sqrt(D) (default), so scores s_ij ~ N(0, 1) approximately",
    "presence": "p ~ U(0.05, 1); every 10th token null (p = 0); the same p for "
    "receivers and sources (self-attention tokens)",
    "eps_den": 1e-6,
    "mask": "none for the accuracy table; the contract checks also use masks",
    "reference_rows": 256,
    "reference_rows_note": "the float64 reference is a per-row loop; when B*H*L exceeds "
    "reference_rows rows, it is evaluated on that many rows drawn at random "
    "(without replacement, same rows for every comparison against float64); "
    "the same-dtype direct evaluation covers every row",
    "contract_shape": {"B": 2, "H": 2, "L": 40, "S": 40, "D": 32},
    # Contract tolerance on the fast path (insertion_ulps): insertion changes the
    # kernel's blocking over the keys, so the other outputs are the same sums in
    # another order.
    "fast_insertion_tol": "insertion_ulps(dtype, S + 1) * finfo(dtype).eps * max(1, max|out|): "
    "S + 1 ulps in fp32 and fp64, 2 in bf16 and fp16",
}


def _linf(a: torch.Tensor, b: torch.Tensor) -> tuple[float, float]:
    """(absolute, relative-to-max|b|) L-inf error of ``a`` against ``b``."""
    diff = (a.double() - b.double()).abs().max().item()
    scale = b.double().abs().max().item()
    return diff, (diff / scale if scale > 0 else (0.0 if diff == 0 else math.inf))


def _inputs(B, H, L, S, D, dtype, gen):
    q = torch.randn(B, H, L, D, generator=gen).to(dtype)
    k = torch.randn(B, H, S, D, generator=gen).to(dtype)
    v = torch.randn(B, H, S, D, generator=gen).to(dtype)
    return q, k, v


def _presence(B, S, gen):
    p = torch.rand(B, S, generator=gen) * 0.95 + 0.05
    p[:, ::10] = 0.0
    return p


def _rows_subset(B, H, L, n, gen):
    """Flat (b, h, i) indices of the rows the float64 reference evaluates."""
    total = B * H * L
    if total <= n:
        return torch.arange(total)
    return torch.randperm(total, generator=gen)[:n].sort().values


def _reference_rows(q, k, v, p_q, p_k, rows, **kw):
    """float64 reference on selected flat rows; returns (rows, Dv) in float64.

    Each reference row depends only on its own query and the sources, so
    evaluating a row alone gives the same numbers as inside the full call.
    """
    _, H, L, _ = q.shape
    out = []
    for r in rows.tolist():
        b, rem = divmod(r, H * L)
        h, i = divmod(rem, L)
        # float64 inputs (exact upcasts of the rounded inputs): the reference
        # returns its input dtype, and the comparison needs the float64 value.
        o = oattention_reference(
            q[b : b + 1, h : h + 1, i : i + 1].double(),
            k[b : b + 1, h : h + 1].double(),
            v[b : b + 1, h : h + 1].double(),
            p_q[b : b + 1, i : i + 1].double(),
            p_k[b : b + 1].double(),
            **kw,
        )
        out.append(o.double().reshape(-1))
    return torch.stack(out)


def _flat(x, rows):
    B, H, L, Dv = x.shape
    return x.reshape(B * H * L, Dv)[rows]


def _timeit(fn, reps=5):
    fn()
    best = math.inf
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def accuracy_row(name: str, dtype: torch.dtype, L: int, seed: int) -> dict[str, Any]:
    """All accuracy comparisons for one (dtype, length)."""
    B, H, D = CONFIG["B"], CONFIG["H"], CONFIG["D"]
    eps = CONFIG["eps_den"]
    gen = torch.Generator().manual_seed(seed * 1_000_003 + L)
    q, k, v = _inputs(B, H, L, L, D, dtype, gen)
    p = _presence(B, L, gen)
    one = torch.ones(B, L)
    rows = _rows_subset(B, H, L, CONFIG["reference_rows"], gen)

    fast = oattention(q, k, v, p, p, eps_den=eps)
    direct = oattention_direct(q, k, v, p, p, eps_den=eps)  # same dtype, no widening
    ref = _reference_rows(q, k, v, p, p, rows, eps_den=eps)
    fast1 = oattention(q, k, v, one, one, eps_den=0.0)
    sdpa = F.scaled_dot_product_attention(q, k, v)
    ref1 = _reference_rows(q, k, v, one, one, rows, eps_den=0.0)

    row: dict[str, Any] = {"dtype": name, "L": L, "S": L, "B": B, "H": H, "D": D}
    row["reference_rows_evaluated"] = int(rows.numel())
    row["reference_rows_total"] = B * H * L
    row["nulls"] = int((p == 0).sum())
    pairs = {
        "fast_vs_float64": (_flat(fast, rows), ref),
        "fast_vs_direct_same_dtype": (fast, direct),
        "direct_same_dtype_vs_float64": (_flat(direct, rows), ref),
        "sdpa_vs_float64": (_flat(sdpa, rows), ref1),
        "fast_p1_eps0_vs_float64": (_flat(fast1, rows), ref1),
    }
    for key, (a, b) in pairs.items():
        abs_, rel = _linf(a, b)
        row[key] = {"linf_abs": abs_, "linf_rel": rel}
    sd = row["sdpa_vs_float64"]["linf_abs"]
    row["ratio_fast_to_sdpa_error"] = row["fast_vs_float64"]["linf_abs"] / sd if sd > 0 else None
    row["ratio_fast_p1_to_sdpa_error"] = (
        row["fast_p1_eps0_vs_float64"]["linf_abs"] / sd if sd > 0 else None
    )
    row["any_nan"] = bool(torch.isnan(fast).any())
    row["time_fast_ms"] = 1e3 * _timeit(lambda: oattention(q, k, v, p, p, eps_den=eps))
    row["time_sdpa_ms"] = 1e3 * _timeit(lambda: F.scaled_dot_product_attention(q, k, v))
    return row


def insertion_ulps(dtype: torch.dtype, n_keys: int) -> int:
    """How many ulps of ``max(1, max|out|)`` a null-source insertion may move an output.

    The insertion regroups each output's sums over the keys (a BLAS and a flash
    kernel block over them by the sequence's length). Two orders of an
    ``n``-term sum differ by at most ``2 * gamma_n * sum|terms|``, ``gamma_n ~
    n * eps / 2`` (the bound tests/helpers/exactness.py states): with softmax
    weights summing to at most 1, ``n_keys`` ulps of ``max|v|`` in a dtype that
    accumulates in its own precision (fp32, fp64). bf16 and fp16 accumulate in
    fp32 and round the stored output once: the two sides' fp32 values, within
    ``n_keys`` fp32 ulps, round at most one dtype ulp apart each, so 2. A
    measured constant does not hold: fp32 null-source-mid insertion measured
    1.9 ulps (AVX-512) and 6.1 (ATen and MKL on AVX2) at S = 40, seeds 0-7.
    """
    if dtype in (torch.float32, torch.float64):
        return n_keys
    return 2


def contract_checks(dtype: torch.dtype, seed: int) -> dict[str, dict[str, Any]]:
    """Null receiver, null-source insertion (append, mid), self-insertion, empty support.

    Run on the fast path and on the float64 reference; the reference must be
    bit-identical (deviation exactly 0), the fast path within
    ``CONFIG["fast_insertion_tol"]``. Each entry: ``max_dev``, ``tol``, ``pass``.
    """
    shp = CONFIG["contract_shape"]
    B, H, L, S, D = shp["B"], shp["H"], shp["L"], shp["S"], shp["D"]
    gen = torch.Generator().manual_seed(seed * 7919 + 17)
    q, k, v = _inputs(B, H, L, S, D, dtype, gen)
    p_q = torch.rand(B, L, generator=gen) * 0.95 + 0.05
    p_k = torch.rand(B, S, generator=gen) * 0.95 + 0.05
    key_mask = torch.rand(B, 1, 1, S, generator=gen) > 0.2
    eps_f = torch.finfo(dtype).eps
    results: dict[str, dict[str, Any]] = {}

    for path, fn in (("fast", oattention), ("reference", oattention_reference)):

        def tol(out, path=path):
            if path == "reference":
                return 0.0
            return insertion_ulps(dtype, S + 1) * eps_f * max(1.0, out.abs().max().item())

        for mname, mask in (("no_mask", None), ("key_mask", key_mask)):
            base = fn(q, k, v, p_q, p_k, mask=mask)
            # null receiver
            pq0 = p_q.clone()
            pq0[:, 3] = 0.0
            out = fn(q, k, v, pq0, p_k, mask=mask)
            dev = out[:, :, 3].abs().max().item()
            results[f"{path}/{mname}/null_receiver"] = {
                "max_dev": dev,
                "tol": 0.0,
                "pass": dev == 0.0,
            }
            # null-source insertion, append and mid
            for where, pos in (("append", S), ("mid", S // 2)):
                k2 = insert_at(k, pos, torch.randn(B, H, 1, D, generator=gen).to(dtype), 2)
                v2 = insert_at(v, pos, torch.randn(B, H, 1, D, generator=gen).to(dtype), 2)
                pk2 = insert_at(p_k, pos, torch.zeros(B, 1), 1)
                m2 = (
                    None
                    if mask is None
                    else insert_at(mask, pos, torch.ones(B, 1, 1, 1, dtype=torch.bool), 3)
                )
                out = fn(q, k2, v2, p_q, pk2, mask=m2)
                dev = (out.double() - base.double()).abs().max().item()
                t = tol(base)
                results[f"{path}/{mname}/null_source_{where}"] = {
                    "max_dev": dev,
                    "tol": t,
                    "pass": dev <= t,
                }
            # self-insertion: null token as query and source (self-attention, S == L)
            pos = L // 3
            nq = torch.randn(B, H, 1, D, generator=gen).to(dtype)
            nk = torch.randn(B, H, 1, D, generator=gen).to(dtype)
            nv = torch.randn(B, H, 1, D, generator=gen).to(dtype)
            q3, k3, v3 = (
                insert_at(q, pos, nq, 2),
                insert_at(k, pos, nk, 2),
                insert_at(v, pos, nv, 2),
            )
            pq3 = insert_at(p_q, pos, torch.zeros(B, 1), 1)
            pk3 = insert_at(p_k, pos, torch.zeros(B, 1), 1)
            m3 = None
            if mask is not None:
                m3 = insert_at(mask, pos, torch.ones(B, 1, 1, 1, dtype=torch.bool), 3)
            out = fn(q3, k3, v3, pq3, pk3, mask=m3)
            own = out[:, :, pos].abs().max().item()
            dev = (drop_at(out, pos, 2).double() - base.double()).abs().max().item()
            t = tol(base)
            results[f"{path}/{mname}/self_insertion"] = {
                "max_dev": max(dev, own),
                "own_output_max": own,
                "others_max_dev": dev,
                "tol": t,
                "pass": own == 0.0 and dev <= t,
            }
        # empty support: all masked, all null; eps 0 and default
        for eps in (0.0, 1e-6):
            for ename, kw in (
                ("all_masked", {"mask": torch.zeros(B, H, L, S, dtype=torch.bool)}),
                ("all_null", {"p_k_zero": True}),
            ):
                pk = torch.zeros_like(p_k) if kw.get("p_k_zero") else p_k
                out = fn(q, k, v, p_q, pk, mask=kw.get("mask"), eps_den=eps)
                nan = bool(torch.isnan(out).any())
                dev = out.double().abs().max().item()
                results[f"{path}/empty_support/{ename}/eps{eps:g}"] = {
                    "max_dev": dev,
                    "nan": nan,
                    "tol": 0.0,
                    "pass": (not nan) and dev == 0.0,
                }
    return results


def _fmt(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:.3g}" if x != 0 else "0"


_ACCURACY_HEADER = (
    "dtype",
    "L",
    "fast vs float64 (abs / rel)",
    "fast vs same-dtype direct (abs / rel)",
    "same-dtype direct vs float64",
    "SDPA vs float64 (p=1, eps=0)",
    "fast vs float64 (p=1, eps=0)",
    "fast/SDPA error",
    "ref rows",
    "fast ms",
    "SDPA ms",
)


def _accuracy_rows(accuracy: list[dict[str, Any]]) -> list[list[object]]:
    """One table row per (dtype, L) accuracy record."""

    def ar(r: dict[str, Any], key: str) -> str:
        return f"{_fmt(r[key]['linf_abs'])} / {_fmt(r[key]['linf_rel'])}"

    return [
        [
            r["dtype"],
            r["L"],
            ar(r, "fast_vs_float64"),
            ar(r, "fast_vs_direct_same_dtype"),
            ar(r, "direct_same_dtype_vs_float64"),
            ar(r, "sdpa_vs_float64"),
            ar(r, "fast_p1_eps0_vs_float64"),
            _fmt(r["ratio_fast_to_sdpa_error"]),
            f"{r['reference_rows_evaluated']}/{r['reference_rows_total']}",
            f"{r['time_fast_ms']:.2f}",
            f"{r['time_sdpa_ms']:.2f}",
        ]
        for r in accuracy
    ]


def _contract_rows(contracts: dict[str, dict[str, Any]]) -> list[list[object]]:
    """One table row per (dtype, contract) check."""
    return [
        [dname, cname, _fmt(c["max_dev"]), _fmt(c["tol"]), "pass" if c["pass"] else "FAIL"]
        for dname, checks in contracts.items()
        for cname, c in checks.items()
    ]


def _markdown(report: dict[str, Any]) -> str:
    cfg = report["config"]
    prov = report["provenance"]
    lines = [
        "# OAttention operator exactness",
        "",
        f"Written by `python -m eval exactness` on {prov['date_utc']} "
        f"(commit `{prov['git_commit']}`, torch {prov['packages']['torch']}, "
        f"tabpfn {prov['packages']['tabpfn']}, numpy {prov['packages']['numpy']}, "
        f"tabpfn-retrofit {prov['packages']['tabpfn-retrofit']}; device {prov['device']}, "
        f"CPU {prov['cpu_model']} ({cpu_capability_text(prov)}), "
        f"{prov['threads']} threads, seed {report['seed']}).",
        "",
        "## Setup",
        "",
        f"- B = {cfg['B']}, H = {cfg['H']}, D = {cfg['D']}, S = L (self-attention shapes); "
        f"lengths {report['lengths']}.",
        f"- Inputs: {cfg['inputs']}. Score scale: {cfg['score_scale']}.",
        f"- Presence: {cfg['presence']}. eps_den = {cfg['eps_den']:g}. Mask: {cfg['mask']}.",
        f"- float64 reference rows: {cfg['reference_rows_note']} "
        f"(reference_rows = {cfg['reference_rows']}).",
        "- `linf_abs = max|a - b|`, `linf_rel = linf_abs / max|b|`.",
        "- Fast path: the CPU flash kernel with a (B,1,1,S) log-presence bias; eps_den and "
        "the receiver gate folded in from the kernel's log-sum-exp.",
        "",
        "## Accuracy",
        "",
        *markdown_table(_ACCURACY_HEADER, _accuracy_rows(report["accuracy"])),
    ]
    s = report["summary"]
    lines += [
        "",
        "## Summary",
        "",
        f"- fp32: max fast-vs-float64 L-inf {_fmt(s['fp32_fast_vs_float64_max'])}; "
        f"max over lengths of fast error / SDPA error = {_fmt(s['fp32_max_ratio_to_sdpa'])} "
        f"(target <= {s['fp32_ratio_target']:g}: "
        f"{'met' if s['fp32_within_target'] else 'NOT met'}).",
        f"- fp32 with presence 1 and eps_den 0 (the done criterion's setting): fast error / "
        f"SDPA error = {_fmt(s['fp32_max_ratio_p1_to_sdpa'])} at every length (the same CPU "
        "flash kernel; the log-presence bias is 0 and the gate is 1).",
        f"- fp32: max fast vs same-dtype direct evaluation {_fmt(s['fp32_fast_vs_direct_max'])}; "
        f"the same-dtype direct evaluation's own error against float64 is up to "
        f"{_fmt(s['fp32_direct_vs_float64_max'])}, so two fp32 evaluations of the formula "
        "differ by the sum of their roundings (a few ulp at |out| < 1).",
        f"- No NaN in any output: {not s['any_nan']}.",
        "- Timings (best of 5 after a warm-up) are indicative only: a shared, loaded "
        "2-core machine; the accuracy figures do not depend on them.",
        "",
        "**Which comparison matches the paper's.** The paper reports L-inf <= 8.94e-8 "
        '"against direct evaluation" (GPU; FP32, BF16, FP16). 8.94e-8 is 0.75 fp32 ulp at 1, '
        "so it is an fp32-precision comparison: our column *fast vs same-dtype direct* in "
        "fp32 is the like-for-like comparison (both sides fp32, the same formula, different "
        "evaluation order). Ours is larger than 8.94e-8 (see the summary: 1-4 ulp at "
        "|out| ~ 0.1-1 on CPU, where both sides round); we do not reproduce the paper's "
        "figure on this hardware, and our fast path's error against float64 is at plain "
        "SDPA's level, which is the property that matters. In bf16/fp16 an output "
        "stored in that dtype cannot be within "
        "8.94e-8 of anything but itself (bf16 rounding is 7.8e-3 near 1, fp16 9.8e-4), so "
        "the paper's half-precision figures must compare computations done internally in "
        "fp32; our bf16/fp16 rows report both comparisons honestly and the errors are at "
        "the dtype's own rounding, as plain SDPA's are. Our *fast vs float64* column is the "
        "stricter test (true value of the formula on the same rounded inputs).",
        "",
        "## Contracts",
        "",
        f"Shape {cfg['contract_shape']}, masks none and key-only (B,1,1,S); "
        "reference must be bit-identical (tolerance 0); fast-path tolerance "
        f"{cfg['fast_insertion_tol']} (insertion changes the kernel's matmul shape).",
        "",
        *markdown_table(
            ("dtype", "check", "max deviation", "tolerance", "pass"),
            _contract_rows(report["contracts"]),
        ),
    ]
    lines += [
        "",
        f"All contracts pass: **{report['all_contracts_pass']}**.",
        "",
    ]
    return "\n".join(lines)


def run(
    out_dir: str | Path = DEFAULT_OUTPUT_ROOT / "exactness",
    *,
    seed: int = 0,
    quick: bool = False,
    lengths: list[int] | None = None,
    threads: int | None = None,
) -> dict[str, Any]:
    """Builds the report, writes ``exactness.json`` and ``exactness.md``; returns the report."""
    if threads is not None:
        torch.set_num_threads(threads)
    torch.manual_seed(seed)
    lengths = list(lengths or (CONFIG["quick_lengths"] if quick else CONFIG["lengths"]))
    t0 = time.perf_counter()
    accuracy = []
    for name, dtype in DTYPES.items():
        for L in lengths:
            accuracy.append(accuracy_row(name, dtype, L, seed))
    contracts = {}
    for name, dtype in {**DTYPES, "fp64": torch.float64}.items():
        contracts[name] = contract_checks(dtype, seed)
    fp32 = [r for r in accuracy if r["dtype"] == "fp32"]
    ratios = [r["ratio_fast_to_sdpa_error"] for r in fp32 if r["ratio_fast_to_sdpa_error"]]
    max_ratio = max(ratios) if ratios else None
    ratios_p1 = [r["ratio_fast_p1_to_sdpa_error"] for r in fp32 if r["ratio_fast_p1_to_sdpa_error"]]
    summary = {
        "fp32_max_ratio_p1_to_sdpa": max(ratios_p1) if ratios_p1 else None,
        "fp32_direct_vs_float64_max": max(
            r["direct_same_dtype_vs_float64"]["linf_abs"] for r in fp32
        ),
        "fp32_fast_vs_float64_max": max(r["fast_vs_float64"]["linf_abs"] for r in fp32),
        "fp32_fast_vs_direct_max": max(r["fast_vs_direct_same_dtype"]["linf_abs"] for r in fp32),
        "fp32_max_ratio_to_sdpa": max_ratio,
        "fp32_ratio_target": 2.0,
        # The criterion: presence 1, eps 0 (both compute softmax attention); the
        # realistic setting (presence with nulls, eps 1e-6) is held to it too.
        "fp32_within_target": max_ratio is not None
        and max_ratio <= 2.0
        and bool(ratios_p1)
        and max(ratios_p1) <= 2.0,
        "any_nan": any(r["any_nan"] for r in accuracy),
    }
    all_pass = all(c["pass"] for checks in contracts.values() for c in checks.values())
    report = {
        "report": "exactness",
        "seed": seed,
        "quick": quick,
        "lengths": lengths,
        "config": CONFIG,
        "accuracy": accuracy,
        "contracts": contracts,
        "summary": summary,
        "all_contracts_pass": all_pass,
        "runtime_s": time.perf_counter() - t0,
    }
    report["provenance"] = provenance_dict(
        dtypes=list(DTYPES), seeds=[seed], report="exactness", quick=quick
    )
    out_dir = Path(out_dir)
    write_json_atomic(out_dir / "exactness.json", report)
    write_text_atomic(out_dir / "exactness.md", _markdown(report))
    return report
