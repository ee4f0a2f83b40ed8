"""Two-block null-token ablation: ``python -m eval ablation``.

Two pre-norm blocks (``nn.TransformerEncoderLayer(norm_first=True,
batch_first=True)``: affine LayerNorm with bias, FFN with biases, non-zero
attention in/out projections and biases) are run as three hosts that share
the same weights:

* ``standard``: the layers themselves;
* ``oa-only``: ``OTransformerBlock.from_module(layer, mode="oattention")``:
  OAttention with presence from the residual carrier, host norm and FFN;
* ``otransformer``: ``OTransformerBlock.from_module(layer, mode="full-o")``.

One null token (the zero carrier) is inserted (mid-sequence and appended);
we report the L-inf drift of the old tokens' final states and the null
token's final Euclidean norm, over seeds and weight scales, in float64 and
float32. In float64 OAttention is evaluated two ways: with the float64
reference oracle (per-row direct evaluation over live sources: its attention
is bit-exact under insertion, but the projections, norms and FFN around it run
on a sequence one row longer, which a BLAS may block differently, so the old
tokens agree to float64 rounding) and with the fused fast path (a different
kernel shape after insertion, so rounding-level differences); float32 uses the
fast path.

Shape letters: B batch, S tokens, E embedding.
"""

from __future__ import annotations

import copy
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn

from eval.locations import DEFAULT_OUTPUT_ROOT
from eval.markdown import markdown_table
from eval.provenance import cpu_capability_text, provenance_dict
from patches import OTransformerBlock
from retrofit.files import write_json_atomic, write_text_atomic

__all__ = ["CONFIG", "build_layers", "drift", "run"]

CONFIG: dict[str, Any] = {
    "d_model": 32,
    "nhead": 4,
    "dim_feedforward": 64,
    "activation": "gelu",
    "n_blocks": 2,
    "B": 4,
    "S": 16,
    "tokens": "x ~ N(0, 1) per coordinate (||x||^2 ~ E, presence ~ 0.97 at tau = 1)",
    "tau": 1.0,
    "eps_den": 1e-6,
    "sigmas": [0.05, 0.1, 0.3, 1.0],
    "quick_sigmas": [0.1, 1.0],
    "n_seeds": 5,
    "quick_n_seeds": 2,
    "weights": "every attention/FFN matrix and bias ~ N(0, sigma^2); LayerNorm weight "
    "~ 1 + N(0, sigma^2), LayerNorm bias ~ N(0, sigma^2); drawn in float64, the "
    "float32 hosts use the same weights rounded",
    "insert_positions": {"mid": "S // 2", "append": "S"},
    "dropout": 0.0,
}

HOSTS = ("standard", "oa-only", "otransformer")


def build_layers(sigma: float, seed: int) -> nn.ModuleList:
    """Two float64 pre-norm encoder layers with every parameter re-drawn."""
    gen = torch.Generator().manual_seed(seed)
    layers = nn.ModuleList(
        nn.TransformerEncoderLayer(
            CONFIG["d_model"],
            CONFIG["nhead"],
            CONFIG["dim_feedforward"],
            dropout=CONFIG["dropout"],
            activation=CONFIG["activation"],
            batch_first=True,
            norm_first=True,
            dtype=torch.float64,
        )
        for _ in range(CONFIG["n_blocks"])
    )
    with torch.no_grad():
        for name, prm in layers.named_parameters():
            draw = torch.randn(prm.shape, generator=gen, dtype=torch.float64) * sigma
            if ".norm" in name and name.endswith("weight"):
                draw = draw + 1.0
            prm.copy_(draw)
    return layers.eval()


def _hosts(layers: nn.ModuleList, kernel: str) -> dict[str, nn.ModuleList]:
    """The three hosts on shared weights; ``kernel`` is OAttention's ("fast" or "reference")."""
    tau, eps = CONFIG["tau"], CONFIG["eps_den"]
    return {
        "standard": layers,
        **{
            host: nn.ModuleList(
                OTransformerBlock.from_module(layer, mode=mode, tau=tau, eps_den=eps, kernel=kernel)
                for layer in layers
            )
            for host, mode in (("oa-only", "oattention"), ("otransformer", "full-o"))
        },
    }


def _forward(host: nn.ModuleList, x: torch.Tensor) -> torch.Tensor:
    for block in host:
        x = block(x)
    return x


def drift(host: nn.ModuleList, x_BSE: torch.Tensor, pos: int) -> dict[str, float]:
    """Insert a null token at ``pos``; L-inf drift of old tokens, null token's final norm."""
    B, _, E = x_BSE.shape
    null = x_BSE.new_zeros(B, 1, E)
    x_ins = torch.cat([x_BSE[:, :pos], null, x_BSE[:, pos:]], dim=1)
    with torch.no_grad():
        y = _forward(host, x_BSE)
        y_ins = _forward(host, x_ins)
    old = torch.cat([y_ins[:, :pos], y_ins[:, pos + 1 :]], dim=1)
    return {
        "old_tokens_linf_drift": (old - y).abs().max().item(),
        "null_final_norm": y_ins[:, pos].norm(dim=-1).max().item(),
        "old_tokens_max_abs": y.abs().max().item(),
        "finite": bool(torch.isfinite(y_ins).all() and torch.isfinite(y).all()),
    }


def _aggregate(rows: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    keys = sorted({(r["dtype"], r["path"], r["host"], r["sigma"]) for r in rows})
    for dt, path, host, sigma in keys:
        sel = [
            r
            for r in rows
            if (r["dtype"], r["path"], r["host"], r["sigma"]) == (dt, path, host, sigma)
        ]
        drifts = [r["old_tokens_linf_drift"] for r in sel]
        rel = [r["old_tokens_linf_drift"] / max(r["old_tokens_max_abs"], 1e-300) for r in sel]
        norms = [r["null_final_norm"] for r in sel]
        out.setdefault(f"{dt}/{path}", {}).setdefault(host, {})[f"{sigma:g}"] = {
            "drift_max": max(drifts),
            "drift_mean": sum(drifts) / len(drifts),
            "drift_min": min(drifts),
            "drift_rel_max": max(rel),
            "old_state_max_abs": max(r["old_tokens_max_abs"] for r in sel),
            "null_norm_max": max(norms),
            "null_norm_min": min(norms),
            "n": len(sel),
        }
    return out


def _fmt(x: float) -> str:
    return "0" if x == 0 else f"{x:.3g}"


_DRIFT_HEADER = (
    "dtype/path",
    "host",
    "sigma",
    "drift max",
    "drift min",
    "drift max / max abs state",
    "max abs old state",
    "null norm max",
)


def _drift_rows(aggregate: dict[str, Any]) -> list[list[object]]:
    """One table row per (dtype/path, host, sigma) aggregate, hosts in ``HOSTS`` order."""
    return [
        [
            dp,
            host,
            sigma,
            _fmt(a["drift_max"]),
            _fmt(a["drift_min"]),
            _fmt(a["drift_rel_max"]),
            _fmt(a["old_state_max_abs"]),
            _fmt(a["null_norm_max"]),
        ]
        for dp, hosts in aggregate.items()
        for host in HOSTS
        for sigma, a in hosts.get(host, {}).items()
    ]


def _markdown(report: dict[str, Any]) -> str:
    cfg, prov, s = report["config"], report["provenance"], report["summary"]
    lines = [
        "# Two-block null-token ablation",
        "",
        f"Written by `python -m eval ablation` on {prov['date_utc']} "
        f"(commit `{prov['git_commit']}`, torch {prov['packages']['torch']}, "
        f"tabpfn {prov['packages']['tabpfn']}, numpy {prov['packages']['numpy']}, "
        f"tabpfn-retrofit {prov['packages']['tabpfn-retrofit']}; device {prov['device']}, "
        f"CPU {prov['cpu_model']} ({cpu_capability_text(prov)}), "
        f"{prov['threads']} threads).",
        "",
        "## Setup",
        "",
        f"- {cfg['n_blocks']} x `nn.TransformerEncoderLayer(d_model={cfg['d_model']}, "
        f"nhead={cfg['nhead']}, dim_feedforward={cfg['dim_feedforward']}, "
        f"activation={cfg['activation']!r}, dropout=0, norm_first=True, batch_first=True)`, "
        "eval mode.",
        f"- Weights: {cfg['weights']}; sigma in {report['sigmas']}; seeds {report['seeds']}.",
        f"- Tokens: B = {cfg['B']}, S = {cfg['S']}, {cfg['tokens']}.",
        f"- OAttention: tau = {cfg['tau']:g}, eps_den = {cfg['eps_den']:g}.",
        "- One null token (all zeros) inserted mid-sequence (S // 2) and appended (S); "
        "drift = max over old tokens, batch, features, seeds and both positions of "
        "|final state with null - final state without|; null norm = max over the batch "
        "of the null token's final Euclidean norm.",
        "- Hosts share one set of weights: `standard` (the layers), `oa-only` "
        '(`OTransformerBlock.from_module(layer, mode="oattention")`), '
        '`otransformer` (`mode="full-o"`).',
        "- Paths: `float64/reference` evaluates OAttention with the float64 oracle "
        "(per-row direct evaluation over live sources), `float64/fast` and `float32/fast` "
        "with the fused CPU kernel.",
        "",
        "## Drift of old tokens (L-inf, max over seeds) and null token's final norm",
        "",
        *markdown_table(_DRIFT_HEADER, _drift_rows(report["aggregate"])),
    ]
    lines += [
        "",
        "## Headline",
        "",
        f"- OTransformer, float64 (reference oracle): drift max "
        f"{_fmt(s['otransformer_float64_reference_drift_max'])} "
        f"({_fmt(s['otransformer_float64_reference_drift_ulps'])} ulps of the largest old "
        "state: the old tokens' projections see one more row, so their rounding follows "
        "the BLAS blocking of this CPU; exactly 0 here: "
        f"{s['otransformer_float64_exact_zero']}), null norm max "
        f"{_fmt(s['otransformer_float64_reference_null_norm_max'])}.",
        f"- OTransformer, float64 fast path: drift max "
        f"{_fmt(s['otransformer_float64_fast_drift_max'])}; float32 fast path: "
        f"{_fmt(s['otransformer_float32_fast_drift_max'])} (kernel rounding after "
        "insertion changes its shape; the null token itself stays exactly 0: "
        f"null norm max {_fmt(s['otransformer_null_norm_max_all'])}).",
        f"- OA-only, float64: drift min {_fmt(s['oa_only_float64_drift_min'])}, "
        f"max {_fmt(s['oa_only_float64_drift_max'])} (non-zero in every case: "
        f"{s['oa_only_float64_all_nonzero']}); the null token is revived by the "
        "LayerNorm bias and the FFN biases of block 1 and then acts as a source in block 2.",
        f"- Standard host, float64: drift max {_fmt(s['standard_float64_drift_max'])}.",
        "",
        "The paper reports OA-only about 7.98 and OTransformer about 0. Our OA-only "
        "magnitude depends on the weight scale (table above); its magnitude is not "
        "comparable to the paper's (different widths, weights and data), the qualitative "
        "result (OA-only clearly non-zero; OTransformer's null token exactly 0 and its old "
        "tokens unchanged up to float64 rounding) is.",
        "",
    ]
    return "\n".join(lines)


def run(
    out_dir: str | Path = DEFAULT_OUTPUT_ROOT / "ablation",
    *,
    seed: int = 0,
    quick: bool = False,
    threads: int | None = None,
) -> dict[str, Any]:
    """Builds the ablation report, writes ``ablation.json`` and ``ablation.md``."""
    if threads is not None:
        torch.set_num_threads(threads)
    t0 = time.perf_counter()
    sigmas = CONFIG["quick_sigmas"] if quick else CONFIG["sigmas"]
    n_seeds = CONFIG["quick_n_seeds"] if quick else CONFIG["n_seeds"]
    seeds = [seed + i for i in range(n_seeds)]
    B, S, E = CONFIG["B"], CONFIG["S"], CONFIG["d_model"]
    rows: list[dict[str, Any]] = []
    for sigma in sigmas:
        for sd in seeds:
            layers64 = build_layers(sigma, sd)
            layers32 = copy.deepcopy(layers64).float()
            gen = torch.Generator().manual_seed(10_000 + sd)
            x64 = torch.randn(B, S, E, generator=gen, dtype=torch.float64)
            for dt, layers, x, paths in (
                ("float64", layers64, x64, ("reference", "fast")),
                ("float32", layers32, x64.float(), ("fast",)),
            ):
                for path in paths:
                    hosts = _hosts(layers, path)
                    for host in HOSTS:  # standard has no OAttention: same on both paths
                        for pname, pos in (("mid", S // 2), ("append", S)):
                            d = drift(hosts[host], x, pos)
                            rows.append(
                                {
                                    "dtype": dt,
                                    "path": path,
                                    "host": host,
                                    "sigma": sigma,
                                    "seed": sd,
                                    "position": pname,
                                    **d,
                                }
                            )
    agg = _aggregate(rows)

    def pick(dp, host, key, fn):
        return fn(v[key] for v in agg[dp][host].values())

    summary = {
        "otransformer_float64_reference_drift_max": pick(
            "float64/reference", "otransformer", "drift_max", max
        ),
        "otransformer_float64_reference_null_norm_max": pick(
            "float64/reference", "otransformer", "null_norm_max", max
        ),
        "otransformer_float64_fast_drift_max": pick(
            "float64/fast", "otransformer", "drift_max", max
        ),
        "otransformer_float32_fast_drift_max": pick(
            "float32/fast", "otransformer", "drift_max", max
        ),
        "otransformer_null_norm_max_all": max(
            r["null_final_norm"] for r in rows if r["host"] == "otransformer"
        ),
        "oa_only_float64_drift_min": pick("float64/reference", "oa-only", "drift_min", min),
        "oa_only_float64_drift_max": pick("float64/reference", "oa-only", "drift_max", max),
        "standard_float64_drift_max": pick("float64/reference", "standard", "drift_max", max),
        "all_finite": all(r["finite"] for r in rows),
    }
    # Old tokens pass through projections one row longer, which a BLAS may block
    # differently (it does on AVX2): bit-identity is not promised there, rounding is.
    summary["otransformer_float64_reference_drift_ulps"] = (
        pick("float64/reference", "otransformer", "drift_rel_max", max)
        / torch.finfo(torch.float64).eps
    )
    summary["otransformer_null_exact_zero"] = summary["otransformer_null_norm_max_all"] == 0.0
    summary["otransformer_float64_exact_zero"] = (
        summary["otransformer_float64_reference_drift_max"] == 0.0
        and summary["otransformer_float64_reference_null_norm_max"] == 0.0
    )
    summary["oa_only_float64_all_nonzero"] = summary["oa_only_float64_drift_min"] > 0.0
    report = {
        "report": "ablation",
        "seed": seed,
        "seeds": seeds,
        "sigmas": sigmas,
        "quick": quick,
        "config": CONFIG,
        "rows": rows,
        "aggregate": agg,
        "summary": summary,
        "runtime_s": time.perf_counter() - t0,
    }
    report["provenance"] = provenance_dict(
        dtypes=["float64", "float32"], seeds=seeds, report="ablation", quick=quick
    )
    out_dir = Path(out_dir)
    write_json_atomic(out_dir / "ablation.json", report)
    write_text_atomic(out_dir / "ablation.md", _markdown(report))
    return report
