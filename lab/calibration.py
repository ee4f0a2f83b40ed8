"""Carrier scale and active-path movement per host class, for the default tau.

``python -m lab calibration`` builds every TabPFN regressor class tabpfn
ships at its published config size with **random weights** (tabpfn's own
initialisation, the zero-initialised projections filled with seeded noise by
:func:`perturb_zero_init`, as the tests do): the published weights need a
download this machine cannot make, so these numbers are the offline stand-in
and say nothing about a trained checkpoint's carriers. On one random
regression table it records

* ``||h||^2`` of every carrier where the patch reads presence: the residual
  stream entering each ICL block (v3, v3.5), or the input of each block's
  between-items attention (v2, v2.5, v2.6; post-norm, so about ``E`` for a
  LayerNorm without affine and about ``||gamma||^2`` for v2.6's RMSNorm);
* the movement of the active path, ``||out_patched - out_host|| / ||out_host||``
  over the output logits (L2 over every test row and bucket), for each mode and
  each candidate tau.

The defaults in :data:`retrofit.settings.DEFAULT_TAU_BY_HOST` were chosen from
this table: the largest power of ten at which both modes move the active path
by at most 0.2 % (relative L2; the values measured at each default are in
``docs/hosts.md``). Nothing is written under ``results/``; the table is
printed (``--json`` for machine-readable output).

Shape letters: B batch, R rows, C features.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Sequence
from typing import Any

import torch
from tabpfn.architectures import ARCHITECTURES
from tabpfn.architectures.tabpfn_v3_5 import TabPFNV3p5
from torch import nn

import retrofit
from retrofit.command_line import OneLineArgumentParser, run_main

__all__ = [
    "CANDIDATE_TAUS",
    "PUBLISHED_CONFIGS",
    "build_random_host",
    "calibrate",
    "main",
    "perturb_zero_init",
]

#: Fields beyond each config class's defaults (the published configs): the head sizes,
#: and for v3 the real regressor's test KV heads (see DESIGN.md section 4).
PUBLISHED_CONFIGS: dict[str, dict[str, Any]] = {
    "tabpfn_v2": {"num_buckets": 5000, "max_num_classes": 0},
    "tabpfn_v2_5": {"num_buckets": 5000, "max_num_classes": 0},
    "tabpfn_v2_6": {"num_buckets": 5000, "max_num_classes": 0},
    "tabpfn_v3": {"num_buckets": 5000, "max_num_classes": -1, "icl_num_kv_heads_test": 1},
    "tabpfn_v3_5": {"num_buckets": 5000, "max_num_classes": 10},
}

#: The taus each host is measured at.
CANDIDATE_TAUS: tuple[float, ...] = (1e-3, 1e-2, 1e-1, 1.0, 10.0)

_QUANTILES = (0.0, 0.01, 0.5, 0.99, 1.0)


def perturb_zero_init(model: nn.Module, seed: int = 0, scale: float = 0.5) -> None:
    """Fills every all-zero weight of ``model`` with seeded noise, in place.

    tabpfn zero-initialises attention output projections, the MLPs' last
    linear and the softmax-scaling query MLP, so a freshly built model's
    blocks are the identity; noise of std ``scale / sqrt(fan_in)`` makes them act.
    """
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for _, param in sorted(model.named_parameters()):
            if param.numel() and not bool(param.any()):
                noise = torch.randn(param.shape, generator=gen, dtype=torch.float64)
                fan_in = param.shape[-1] if param.dim() > 1 else 1
                param.copy_((noise * scale / fan_in**0.5).to(param.dtype))


def build_random_host(name: str, config: dict[str, Any] | None = None, seed: int = 0) -> nn.Module:
    """A random ``name`` model (key of ``ARCHITECTURES``) in eval mode, zero-inits perturbed.

    Args:
        name: ``"tabpfn_v2"``, ``"tabpfn_v2_5"``, ``"tabpfn_v2_6"``, ``"tabpfn_v3"``
            or ``"tabpfn_v3_5"``.
        config: Config fields; :data:`PUBLISHED_CONFIGS` ``[name]`` when None.
        seed: Seed of the initialisation and of the perturbation.
    """
    arch = ARCHITECTURES[name]
    parsed, unused = arch.parse_config(dict(PUBLISHED_CONFIGS[name] if config is None else config))
    if unused:
        raise ValueError(f"unknown {name} config fields: {sorted(unused)}")
    torch.manual_seed(seed)
    model = arch.get_architecture(parsed)
    perturb_zero_init(model, seed)
    return model.eval()


def _presence_points(model: nn.Module) -> list[nn.Module]:
    """The host modules whose first input is the carrier the patch reads presence from."""
    if hasattr(model, "icl_blocks"):
        return list(model.icl_blocks)
    return [block.per_column_attention_between_cells for block in model.blocks]


def _forward(model: nn.Module, x_RBC: torch.Tensor, y_NB: torch.Tensor) -> torch.Tensor:
    kwargs = {"task_type": "regression"} if isinstance(model, TabPFNV3p5) else {}
    with torch.inference_mode():
        return model(x_RBC, y_NB, **kwargs)


def _table(n_train: int, n_test: int, n_features: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    x_RBC = torch.randn(n_train + n_test, 1, n_features, generator=g)
    w_C = torch.randn(n_features, generator=g)
    y_R = x_RBC[:, 0] @ w_C + 0.1 * torch.randn(n_train + n_test, generator=g)
    y_NB = ((y_R - y_R[:n_train].mean()) / y_R[:n_train].std())[:n_train, None]
    return x_RBC, y_NB


def calibrate(
    name: str,
    *,
    taus: Sequence[float] = CANDIDATE_TAUS,
    n_train: int = 200,
    n_test: int = 50,
    n_features: int = 5,
    seed: int = 0,
) -> dict[str, Any]:
    """The carrier scale and the active-path movement of one host class (float32).

    Returns:
        ``{"host", "width", "params", "sq_norm": {quantile: value}, "movement":
        {mode: {tau: relative L2 change}}, "seconds"}``.
    """
    start = time.perf_counter()
    x_RBC, y_NB = _table(n_train, n_test, n_features, seed)
    model = build_random_host(name, seed=seed)
    sq: list[torch.Tensor] = []

    def record(_module: nn.Module, args: tuple[Any, ...]) -> None:
        sq.append(args[0].detach().float().square().sum(-1).flatten())

    handles = [m.register_forward_pre_hook(record) for m in _presence_points(model)]
    try:
        reference = _forward(model, x_RBC, y_NB).float()
    finally:
        for h in handles:
            h.remove()
    sq_all = torch.cat(sq)
    movement: dict[str, dict[str, float]] = {}
    for mode in retrofit.PATCH_MODES:
        movement[mode] = {}
        for tau in taus:
            retrofit.patch(model, mode, tau=tau)
            try:
                out = _forward(model, x_RBC, y_NB).float()
            finally:
                retrofit.unpatch(model)
            change = (out - reference).norm() / reference.norm()
            movement[mode][f"{tau:g}"] = float(change)
    qs = torch.quantile(sq_all[:1_000_000].double(), torch.tensor(_QUANTILES, dtype=torch.float64))
    return {
        "host": type(model).__name__,
        "width": _width(model),
        "params": sum(p.numel() for p in model.parameters()),
        "sq_norm": {f"q{q:g}": float(v) for q, v in zip(_QUANTILES, qs, strict=True)},
        "movement": movement,
        "seconds": round(time.perf_counter() - start, 1),
    }


def _width(model: nn.Module) -> int:
    return int(getattr(model, "icl_emsize", None) or model.emsize)


def _markdown(rows: list[dict[str, Any]], taus: Sequence[float]) -> str:
    head = "| host | width | params | median ||h||^2 (q0.01-q0.99) | mode | "
    head += " | ".join(f"tau={t:g}" for t in taus) + " |"
    lines = [head, "|" + "---|" * (5 + len(taus))]
    for r in rows:
        sq = r["sq_norm"]
        scale = f"{sq['q0.5']:.4g} ({sq['q0.01']:.3g}-{sq['q0.99']:.3g})"
        for mode, moves in r["movement"].items():
            cells = " | ".join(f"{100 * moves[f'{t:g}']:.3g} %" for t in taus)
            lines.append(
                f"| {r['host']} | {r['width']} | {r['params'] / 1e6:.1f}M | {scale} | {mode} | "
                f"{cells} |"
            )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Prints the calibration table for the requested hosts; returns the exit status."""
    return run_main(_parser, _run, argv)


def _parser() -> argparse.ArgumentParser:
    parser = OneLineArgumentParser(prog="python -m lab calibration", description=__doc__)
    parser.add_argument("--hosts", nargs="+", default=list(PUBLISHED_CONFIGS))
    parser.add_argument("--taus", nargs="+", type=float, default=list(CANDIDATE_TAUS))
    parser.add_argument("--train", type=int, default=200, help="train rows")
    parser.add_argument("--test", type=int, default=50, help="test rows")
    parser.add_argument("--features", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", action="store_true", help="print JSON instead of Markdown")
    return parser


def _run(args: argparse.Namespace) -> int:
    torch.set_num_threads(args.threads)
    rows = []
    for name in args.hosts:
        rows.append(
            calibrate(
                name,
                taus=args.taus,
                n_train=args.train,
                n_test=args.test,
                n_features=args.features,
                seed=args.seed,
            )
        )
        print(f"{name}: {rows[-1]['seconds']} s", file=sys.stderr, flush=True)
    print(json.dumps(rows, indent=1) if args.json else _markdown(rows, args.taus))
    return (
        0
        if all(math.isfinite(v) for r in rows for m in r["movement"].values() for v in m.values())
        else 1
    )
