"""Benchmark: OAttention at the cost of plain attention (``python -m eval bench``).

Three parts, each in its own module, written together to ``bench.json`` and
``bench.md`` with provenance:

* ``attention``: :func:`patches.oattention` (its checked entry, its
  ``validate=False`` entry, and the call the patched blocks make, with
  ``nulls_are_zero`` on inputs whose null tokens are zero) against
  ``torch.nn.functional.scaled_dot_product_attention`` without a bias, and on
  CPU against the flash kernel it calls given only its bias, on the same
  inputs, at fixed shapes and at the ICL shapes of the embedded host on the
  offline suite; with more than one torch thread, OAttention's own work over
  its kernel is timed again at one thread. Peers are timed interleaved in
  one process, in a fresh random order each round, so load drift hits every
  peer alike; each measurement repeats a call until it lasts ``min_time_s``
  (scheduler ticks on a loaded machine are several ms). The ratio is the
  median over rounds of the per-round ratio ``t_peer / t_sdpa``, with a
  percentile bootstrap confidence interval over rounds.
* ``memory``: the peak resident memory a single call adds, each peer in its
  own fresh process (inputs allocated first; the peak is reset through
  ``/proc/self/clear_refs`` where Linux allows it, else read as the growth
  of ``ru_maxrss``).
* ``estimator``: ``fit`` + ``predict`` of :class:`retrofit.OTabPFNRegressor`
  per mode against ``mode="none"`` on a few offline datasets and seeds,
  interleaved the same way.
* ``fit_loop``: a loop of ``fit`` + ``predict`` over 24 small datasets with
  ``mode="none"`` and ``"full-o"`` against plain tabpfn's loop, one torch
  thread (:mod:`lab.benchmarks.fit_loop`).
* ``chunks``: ``predict`` at 1,000-3,000 train rows with the CPU's cache-sized
  stage 0-2 chunks against tabpfn's default chunks, at one thread and at all
  threads, with bit-identity recorded (:mod:`lab.benchmarks.chunks`).

Ragged batches against both loops are ``bench --batched``
(:mod:`lab.benchmarks.batched`).

Speed is a property of the machine at the time of the run: the report records
the CPU, threads, load average and the other busy processes, and no test
asserts a time.

Shape letters: B batch, H query heads, Hkv key/value heads, L queries,
S sources, D head dimension (the layout of ``scaled_dot_product_attention``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from eval.locations import DEFAULT_OUTPUT_ROOT, default_output
from eval.provenance import provenance_dict
from lab.benchmarks import BENCH_PARTS, TARGETS
from lab.benchmarks.attention import OWN_WORK_PEERS, bench_attention
from lab.benchmarks.chunks import bench_chunks
from lab.benchmarks.estimator import DEFAULT_ESTIMATOR_CASES, bench_estimator
from lab.benchmarks.fit_loop import bench_fit_loop
from lab.benchmarks.machine import environment
from lab.benchmarks.memory import bench_memory
from lab.benchmarks.shapes import (
    LARGE_SHAPES,
    MEMORY_SHAPE,
    QUICK_MEMORY_SHAPE,
    QUICK_SHAPES,
    SMALL_SHAPES,
    icl_shapes,
)
from lab.benchmarks.speed_markdown import part_text, render_markdown
from retrofit.files import write_json_atomic, write_text_atomic

__all__ = ["PARTS", "bench_command", "run", "unmeasured_parts"]

PARTS = BENCH_PARTS


def run(
    out_dir: str | os.PathLike[str] = DEFAULT_OUTPUT_ROOT / "bench",
    *,
    quick: bool = False,
    repeats: int | None = None,
    threads: int | None = None,
    parts: Sequence[str] = PARTS,
    model_path: str = "embedded",
    estimator_repeats: int | None = None,
    seed: int = 0,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Runs the benchmark and writes ``bench.json`` and ``bench.md`` to ``out_dir``.

    Args:
        out_dir: Output directory.
        quick: Tiny shapes and few rounds (smoke runs and tests; not a measurement).
        repeats: Timed rounds per attention shape (default 25; 5 when quick).
        threads: torch threads (default: keep the current setting).
        parts: Any of :data:`PARTS`.
        model_path: Host of the ICL shapes and the estimator part.
        estimator_repeats: Rounds per estimator case (default 5; 2 when quick).
        seed: Seed of the inputs and round orders.
        progress: Receives one line per finished measurement.

    Returns:
        The report written to ``bench.json``.
    """
    if threads:
        torch.set_num_threads(threads)
    unknown = set(parts) - set(PARTS)
    if unknown:
        raise ValueError(f"unknown benchmark parts: {sorted(unknown)}")
    repeats = repeats or (5 if quick else 25)
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    report: dict[str, Any] = {"quick": quick}
    env_start = environment()
    if "attention" in parts:
        if quick:
            shapes, source = list(QUICK_SHAPES), {"architecture": "quick shapes"}
        else:
            icl, source = icl_shapes(model_path)
            shapes = [*LARGE_SHAPES, *SMALL_SHAPES, *icl]
        rows = bench_attention(
            shapes,
            repeats=repeats,
            min_time_s=0.005 if quick else 0.05,
            seed=seed,
            progress=progress,
        )
        report["attention"] = {
            "device": "cpu",
            "dtype": "float32",
            "repeats": repeats,
            "peers": [
                "sdpa",
                "oattention",
                "oattention_trusted",
                "oattention_block",
                "kernel_with_bias",
            ],
            "icl_source": source,
            "shapes": [asdict(s) for s in shapes],
            "rows": rows,
        }
        all_threads = torch.get_num_threads()
        if all_threads > 1:
            # OAttention's own work at one thread as well: the gate pass runs
            # serially either way, while the kernel scales with threads.
            torch.set_num_threads(1)
            try:
                report["attention"]["one_thread"] = {
                    "threads": 1,
                    "peers": list(OWN_WORK_PEERS),
                    "rows": bench_attention(
                        shapes,
                        repeats=repeats,
                        min_time_s=0.005 if quick else 0.05,
                        seed=seed,
                        progress=progress,
                        only=OWN_WORK_PEERS,
                    ),
                }
            finally:
                torch.set_num_threads(all_threads)
    if "memory" in parts:
        shape = QUICK_MEMORY_SHAPE if quick else MEMORY_SHAPE
        try:
            report["memory"] = bench_memory(shape, runs=1 if quick else 3, threads=threads)
        except (RuntimeError, subprocess.SubprocessError) as err:
            report["memory"] = {"shape": list(shape.dims()), "error": str(err)}
        if progress:
            progress(part_text("memory", report["memory"]))
    if "estimator" in parts:
        cases = [("qsar_fish", 0)] if quick else list(DEFAULT_ESTIMATOR_CASES)
        try:
            report["estimator"] = bench_estimator(
                cases,
                repeats=estimator_repeats or (2 if quick else 5),
                model_path=model_path,
                n_estimators=1 if quick else "auto",
                max_train=120 if quick else None,
                progress=progress,
            )
        except Exception as err:  # a missing host or retrofit is reported, not fatal
            report["estimator"] = {
                "model_path": model_path,
                "skipped": f"{type(err).__name__}: {str(err)[:300]}",
            }
    if "fit_loop" in parts:
        report["fit_loop"] = _reported(
            lambda: bench_fit_loop(
                n_datasets=3 if quick else 24,
                max_rows=60 if quick else 200,
                rounds=1 if quick else 7,
                warmup=0 if quick else 1,
                n_estimators=1 if quick else "auto",
                seed=seed,
            )
        )
        if progress:
            progress(part_text("fit_loop", report["fit_loop"]))
    if "chunks" in parts:
        report["chunks"] = _reported(
            lambda: bench_chunks(
                n_datasets=1 if quick else 3,
                min_rows=100 if quick else 1000,
                max_rows=200 if quick else 3000,
                rounds=1 if quick else 3,
                model_path=model_path,
                seed=seed,
            )
        )
        if progress:
            progress(part_text("chunks", report["chunks"]))
    report["environment"] = {"start": env_start, "end": environment()}
    report["provenance"] = provenance_dict(
        benchmark="lab.benchmarks.speed", parts=list(parts), seed=seed, targets=TARGETS
    )
    # Rendered before either file is written: a report that cannot be rendered
    # leaves no bench.json without its bench.md.
    markdown = render_markdown(report)
    out = Path(out_dir)
    write_json_atomic(out / "bench.json", report)
    write_text_atomic(out / "bench.md", markdown)
    return report


def _reported(measure: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """A part's result, or what stopped it (a missing host is reported, not fatal)."""
    try:
        return measure()
    except Exception as err:
        return {"skipped": f"{type(err).__name__}: {str(err)[:300]}"}


def unmeasured_parts(report: dict[str, Any]) -> dict[str, str]:
    """The parts of a :func:`run` report that were asked for and not measured, with why."""
    parts = report.get("provenance", {}).get("parts", PARTS)
    found = {}
    for part in parts:
        result = report.get(part)
        if not isinstance(result, dict):
            found[part] = "no result"
        elif "skipped" in result or "error" in result:
            found[part] = str(result.get("skipped", result.get("error")))
    return found


def bench_command(args: Any) -> int:
    """``python -m eval bench``: runs :func:`run` and prints one line per measurement.

    Returns:
        0, or 1 when a part asked for was not measured (``bench.md`` says why;
        so does one line on stderr).
    """
    if args.out is None:
        args.out = str(default_output("bench", quick=args.quick))
    report = run(
        out_dir=args.out,
        quick=args.quick,
        repeats=args.repeats,
        threads=args.threads,
        parts=args.parts,
        model_path=args.model,
        estimator_repeats=args.estimator_repeats,
        seed=args.seed,
        progress=lambda line: print(line, flush=True),
    )
    print(f"wrote {args.out}/bench.json and bench.md")
    unmeasured = unmeasured_parts(report)
    if unmeasured:
        why = "; ".join(f"{part} ({reason})" for part, reason in unmeasured.items())
        print(
            f"python -m lab bench: not measured: {why}; see {args.out}/bench.md, fix the cause and "
            "run again (or leave the part out with --parts)",
            file=sys.stderr,
        )
        return 1
    return 0
