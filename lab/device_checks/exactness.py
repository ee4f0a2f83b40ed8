"""Part 1 of the GPU check: OAttention's exactness and contracts per dtype on the device.

:func:`patches.oattention` in fp32, bf16 and fp16 (and fp64, which takes the
portable sink route) against a direct float64 evaluation of the formula on the
same (rounded) inputs, and against a direct evaluation in the input dtype; the
contracts (null receivers exactly 0, empty support 0 and finite, null-source
insertion within rounding). The paper's claim for GPU fp32 is
L-inf <= 8.94e-8; it is reported, not assumed.

Shape letters: B batch, H query heads, Hkv key/value heads, L queries,
S sources, D head dimension.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from patches.oattention import (
    oattention,
    oattention_direct,
    oattention_reference,
    oattention_route,
)

__all__ = ["PAPER_FP32_LINF", "exactness"]

PAPER_FP32_LINF = 8.94e-8
"""The paper's GPU operator-exactness bound (L-inf, against direct evaluation)."""


def _case_inputs(
    B: int, H: int, Hkv: int, L: int, S: int, D: int, *, device: str, seed: int
) -> dict[str, Any]:
    """Unit-scale float64 inputs with ~5 % null receivers and sources."""
    g = torch.Generator().manual_seed(seed)

    def pres(n: int) -> torch.Tensor:
        sq = torch.rand(B, n, generator=g, dtype=torch.float64) * 4
        p = sq / (1 + sq)
        p[torch.rand(B, n, generator=g) < 0.05] = 0.0
        return p

    x = {
        "q": torch.randn(B, H, L, D, generator=g, dtype=torch.float64),
        "k": torch.randn(B, Hkv, S, D, generator=g, dtype=torch.float64),
        "v": torch.randn(B, Hkv, S, D, generator=g, dtype=torch.float64),
        "p_q": pres(L),
        "p_k": pres(S),
    }
    return {name: t.to(device) for name, t in x.items()}


def _exactness_cases(quick: bool) -> list[dict[str, Any]]:
    if quick:
        B, H, L, S, D = 2, 4, 96, 80, 16
    else:
        B, H, L, S, D = 2, 8, 1024, 768, 64
    return [
        {"name": "base", "dims": (B, H, H, L, S, D), "mask": None, "eps_den": 1e-6},
        {"name": "gqa", "dims": (B, H, H // 4, L, S, D), "mask": None, "eps_den": 1e-6},
        {"name": "key_mask", "dims": (B, H, H, L, S, D), "mask": "key", "eps_den": 1e-6},
        {"name": "full_mask", "dims": (B, H, H, L, S, D), "mask": "full", "eps_den": 1e-6},
        {"name": "eps0_empty_batch", "dims": (B, H, H, L, S, D), "mask": None, "eps_den": 0.0},
        {"name": "odd_lengths", "dims": (1, 2, 2, 77, 33, 32), "mask": None, "eps_den": 1e-6},
    ]


def _mask_for(kind: str | None, x: dict[str, Any], seed: int) -> Any:
    if kind is None:
        return None
    g = torch.Generator().manual_seed(seed + 99)
    B, H, L, S = x["q"].shape[0], x["q"].shape[1], x["q"].shape[2], x["k"].shape[2]
    if kind == "key":
        m = torch.rand(B, 1, 1, S, generator=g) > 0.3
    else:
        m = torch.rand(B, H, L, S, generator=g) > 0.3
        m[:, :, :5] = False  # some rows see nothing
    return m.to(x["q"].device)


def exactness(device: str, quick: bool, progress: Callable[[str], None]) -> dict[str, Any]:
    """Operator exactness and contracts per dtype (see the module docstring)."""
    # The vectorised oracle agrees with the per-row float64 reference.
    small = _case_inputs(2, 2, 1, 9, 7, 8, device="cpu", seed=5)
    small_mask = torch.rand(2, 2, 9, 7, generator=torch.Generator().manual_seed(3)) > 0.4
    ref = oattention_reference(**small, mask=small_mask)
    direct = oattention_direct(**small, mask=small_mask, dtype=torch.float64)
    oracle_gap = float((ref - direct).abs().max())

    dtypes = [torch.float32, torch.bfloat16, torch.float16, torch.float64]
    rows = []
    for ci, case in enumerate(_exactness_cases(quick)):
        B, H, Hkv, L, S, D = case["dims"]
        x64 = _case_inputs(B, H, Hkv, L, S, D, device=device, seed=ci)
        if case["name"] == "eps0_empty_batch":
            x64["p_k"][1] = 0.0  # batch element 1 has no live source
        mask = _mask_for(case["mask"], x64, ci)
        for dt in dtypes:
            x = {n: (t.to(dt) if n in ("q", "k", "v") else t.float()) for n, t in x64.items()}
            if dt == torch.float64:
                x = {n: t.double() for n, t in x.items()}
            eps = case["eps_den"]
            with torch.inference_mode():
                out = oattention(**x, mask=mask, eps_den=eps)
                ref64 = oattention_direct(**x, mask=mask, eps_den=eps, dtype=torch.float64)
                same = oattention_direct(**x, mask=mask, eps_den=eps, dtype=dt)
                null_rows = x["p_q"] == 0  # (B, L)
                out_n = out.double()
                null_zero = bool((out_n.transpose(1, 2)[null_rows] == 0).all())
                empty_rows = ref64.abs().amax(dim=-1) == 0  # rows the oracle sets to 0
                empty_zero = bool((out_n.abs().amax(dim=-1)[empty_rows] == 0).all())
                # Null-source insertion: 8 null keys with random K/V at random places.
                ins = _insert_null_sources(x, mask, n_new=8, seed=ci)
                out_ins = oattention(**ins["x"], mask=ins["mask"], eps_den=eps)
                ins_diff = float((out_ins.double() - out_n).abs().max())
            scale = float(ref64.abs().max())
            rows.append(
                {
                    "case": case["name"],
                    "dims_B_H_Hkv_L_S_D": list(case["dims"]),
                    "mask": case["mask"],
                    "eps_den": eps,
                    "dtype": str(dt).replace("torch.", ""),
                    "route": oattention_route(x["q"]),
                    "linf_vs_float64": float((out_n - ref64).abs().max()),
                    "rel_linf_vs_float64": float((out_n - ref64).abs().max()) / max(scale, 1e-300),
                    "linf_vs_same_dtype_direct": float((out_n - same.double()).abs().max()),
                    "linf_same_dtype_direct_vs_float64": float((same.double() - ref64).abs().max()),
                    "max_abs_output": scale,
                    "finite": bool(torch.isfinite(out_n).all()),
                    "null_receivers_exactly_zero": null_zero,
                    "empty_support_rows_exactly_zero": empty_zero,
                    "n_empty_rows": int(empty_rows.sum()),
                    "null_source_insertion_linf": ins_diff,
                    "null_source_insertion_bit_identical": ins_diff == 0.0,
                }
            )
        progress(f"exactness {case['name']}: done")
    fp32 = [r for r in rows if r["dtype"] == "float32"]
    worst_fp32 = max(r["linf_vs_float64"] for r in fp32)
    return {
        "device": device,
        "oracle_check_linf_direct_vs_reference": oracle_gap,
        "rows": rows,
        "worst_fp32_linf_vs_float64": worst_fp32,
        "paper_fp32_linf": PAPER_FP32_LINF,
        "meets_paper_fp32_claim": worst_fp32 <= PAPER_FP32_LINF,
        "all_contracts": all(
            r["finite"]
            and r["null_receivers_exactly_zero"]
            and r["empty_support_rows_exactly_zero"]
            for r in rows
        ),
    }


def _insert_null_sources(x: dict[str, Any], mask: Any, *, n_new: int, seed: int) -> dict[str, Any]:
    """Adds ``n_new`` sources with presence 0 (random K/V) at random positions."""
    S = x["k"].shape[2]
    g = torch.Generator().manual_seed(seed + 7)
    pos = torch.randperm(S + n_new, generator=g)[:n_new].sort().values
    keep = torch.ones(S + n_new, dtype=torch.bool)
    keep[pos] = False
    old_idx = keep.nonzero().flatten().to(x["k"].device)
    new_idx = pos.to(x["k"].device)

    def widen(t: Any, dim: int, fill: Any) -> Any:
        shape = list(t.shape)
        shape[dim] = S + n_new
        out = fill(shape, t)
        out.index_copy_(dim, old_idx, t)
        return out

    def rand_like(shape: list[int], t: Any) -> Any:
        return torch.randn(shape, generator=g).to(device=t.device, dtype=t.dtype)

    def zeros_like(shape: list[int], t: Any) -> Any:
        return torch.zeros(shape, device=t.device, dtype=t.dtype)

    y = dict(x)
    y["k"] = widen(x["k"], 2, rand_like)
    y["v"] = widen(x["v"], 2, rand_like)
    y["p_k"] = widen(x["p_k"], 1, zeros_like)
    new_mask = None
    if mask is not None:
        m = mask.expand(*mask.shape[:-1], S)
        new_mask = torch.ones(*m.shape[:-1], S + n_new, dtype=torch.bool, device=m.device)
        new_mask.index_copy_(m.dim() - 1, old_idx, m)
    del new_idx
    return {"x": y, "mask": new_mask}
