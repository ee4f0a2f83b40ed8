"""What one training step costs each host class on this CPU: the measurement behind a host's choice.

On two cores, tables per second decide what a run can reach (DESIGN.md,
section 7), and the host classes differ in where they spend it: tabpfn's v3
attends over rows after folding each row's features into a few tokens, v2.6
(the speedrun's kind: a token per cell or feature group, thinking rows)
attends over rows and over feature groups in every layer. This command times
one forward and backward pass of each named size on the recipe's batch (two
regression tables of ``--rows`` rows, 128 of them query rows, ``--features``
features), the sizes interleaved, ``--repeats`` times after a warm-up pass,
and reports the median CPU seconds of a step (``time.process_time``, so the
ratio holds on a shared machine) with each size's parameter count.

``python -m lab step-cost --threads 1 --out results/host_step_cost.json``
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from tabpfn.architectures import tabpfn_v2_6

from eval.provenance import provenance_dict
from hosttraining.common.loop import DEFAULT_MODEL_CONFIG, build_model
from retrofit.command_line import OneLineArgumentParser, run_main
from retrofit.files import write_text_atomic

__all__ = ["SIZES", "build_size", "main", "step_seconds"]

QUERY_ROWS = 128
"""Query rows of each table in the recipe's batch."""

SIZES: dict[str, dict[str, Any]] = {
    "v3-w32-l8": {"arch": "v3", "embed_dim": 32, "nlayers": 8},
    "v3-w64-l8": {"arch": "v3", "embed_dim": 64, "nlayers": 8},
    "v2.6-e64-l5": {"arch": "v2.6", "emsize": 64, "nlayers": 5, "nhead": 4},
    "v2.6-e128-l5": {"arch": "v2.6", "emsize": 128, "nlayers": 5, "nhead": 4},
    "v2.6-e256-l5": {"arch": "v2.6", "emsize": 256, "nlayers": 5, "nhead": 4},
}
"""The sizes measured: the runs' v3 hosts, and v2.6 up to the speedrun's width and depth.

v2.6 keeps tabpfn's feature groups of 3 and 64 thinking rows; ``e256-l5`` is the
speedrun's embedding width and depth (its model, about 3.9M parameters, is
close to this class).
"""


def build_size(spec: dict[str, Any], seed: int = 0) -> torch.nn.Module:
    """A freshly initialised regressor of one of :data:`SIZES`, in training mode."""
    fields = {k: v for k, v in spec.items() if k != "arch"}
    if spec["arch"] == "v3":
        return build_model({**DEFAULT_MODEL_CONFIG, **fields}, seed=seed)
    config, unused = tabpfn_v2_6.parse_config(
        {"num_buckets": DEFAULT_MODEL_CONFIG["num_buckets"], "max_num_classes": -1, **fields}
    )
    if unused:
        raise ValueError(f"Unknown TabPFNV2p6Config fields: {sorted(unused)}")
    torch.manual_seed(seed)
    return tabpfn_v2_6.get_architecture(config).train()


def _one_step(model: torch.nn.Module, x_RBC: torch.Tensor, y_NB: torch.Tensor) -> float:
    """CPU seconds of one forward and backward pass (a stand-in loss of the same graph)."""
    model.zero_grad(set_to_none=True)
    start = time.process_time()
    logits_TBK = model(x_RBC, y_NB)
    torch.log_softmax(logits_TBK.float(), dim=-1)[..., 0].mean().backward()
    return time.process_time() - start


def step_seconds(
    sizes: Sequence[str],
    *,
    rows: int = 1152,
    features: int = 40,
    tables: int = 2,
    repeats: int = 3,
    log: Callable[[str], None] = print,
) -> dict[str, dict[str, float]]:
    """Median CPU seconds of a training step of each size, measured interleaved.

    Args:
        sizes: Names in :data:`SIZES`.
        rows: Rows of each table, :data:`QUERY_ROWS` of them query rows.
        features: Features of each table.
        tables: Tables in a step's batch.
        repeats: Timed passes of each size, after one untimed warm-up pass.
        log: Progress sink.

    Returns:
        ``{size: {"params": n, "seconds": median, "runs": [...]}}``.
    """
    unknown = [s for s in sizes if s not in SIZES]
    if unknown:
        raise ValueError(f"unknown sizes {unknown}; known: {sorted(SIZES)}")
    if rows <= QUERY_ROWS:
        raise ValueError(f"rows must exceed the {QUERY_ROWS} query rows, got {rows}")
    generator = torch.Generator().manual_seed(0)
    x_RBC = torch.randn(rows, tables, features, generator=generator)
    y_NB = torch.randn(rows - QUERY_ROWS, tables, generator=generator)
    models = {name: build_size(SIZES[name]) for name in sizes}
    runs: dict[str, list[float]] = {name: [] for name in sizes}
    for model in models.values():  # warm-up: first-call allocations and kernel choices
        _one_step(model, x_RBC, y_NB)
    for repeat in range(repeats):
        for name, model in models.items():
            runs[name].append(_one_step(model, x_RBC, y_NB))
            log(f"repeat {repeat + 1}/{repeats} {name}: {runs[name][-1]:.2f} CPU s")
    return {
        name: {
            "params": sum(p.numel() for p in models[name].parameters()),
            "seconds": statistics.median(runs[name]),
            "runs": runs[name],
        }
        for name in sizes
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Time a training step of each host size (see the module docstring)."""
    return run_main(_parser, _run, argv)


def _parser() -> argparse.ArgumentParser:
    p = OneLineArgumentParser(
        prog="python -m lab step-cost",
        description="CPU seconds of a training step of each host class and size.",
    )
    p.add_argument("--sizes", nargs="+", choices=sorted(SIZES), default=list(SIZES))
    p.add_argument("--rows", type=int, default=1152, help="rows of each table (128 query rows)")
    p.add_argument("--features", type=int, default=40)
    p.add_argument("--tables", type=int, default=2, help="tables in a step's batch")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=1, help="torch threads")
    p.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    return p


def _run(args: argparse.Namespace) -> int:
    torch.set_num_threads(args.threads)
    result = {
        "provenance": provenance_dict(
            include_dirty_paths=False,
            command=" ".join(["python -m lab", *sys.argv[1:]]),
            # Process time holds on a shared machine; the load says how shared it was.
            load_average_1min=os.getloadavg()[0],
        ),
        "shape": {"rows": args.rows, "features": args.features, "tables": args.tables},
        "threads": args.threads,
        "sizes": step_seconds(
            args.sizes,
            rows=args.rows,
            features=args.features,
            tables=args.tables,
            repeats=args.repeats,
        ),
    }
    text = json.dumps(result, indent=2) + "\n"
    if args.out is not None:
        write_text_atomic(args.out, text)
    print(text, end="")
    return 0
