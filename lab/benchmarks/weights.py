"""Benchmark of row weights (``python -m lab bench --weights``): bootstrap and weighted fits.

Two parts, on the same estimator (the host patched in Full-O, float32, CPU):

* ``bootstrap``: ``R`` bootstrap replicates of ``N`` train rows predicting
  ``Q`` test rows, two ways: ``refits`` refits one estimator on each resample
  (the rows repeated per their multinomial counts) and predicts with it;
  ``bootstrap_predict`` is :func:`retrofit.bootstrap_predict`, every replicate
  a weighted context of one ragged batch (the same counts, from the same
  seed). Its predictions are compared with the refits' (largest difference,
  and whether it is within :data:`BOUND_FLOAT32_ULPS` float32 ulps of
  ``max(1, max|refit prediction|)``, the whole-forward bound of the project's
  exactness tests). Target: at most :data:`TARGETS` ``["bootstrap"]`` of the
  refits' CPU time.
* ``bootstrap_fresh_processes`` (``--weights-fresh-processes``): the same two
  peers, each call in a fresh process of its own
  (:mod:`lab.benchmarks.weights_child`: a warm-up on a small table, one untimed
  call like the timed one, then the timed call). In the interleaved rounds
  the peers share one process's allocator, and what one call leaves decides
  how many pages the next maps afresh; here nothing ran before but the call's
  own kind, as when a user runs one of them alone.
* ``weighted_fit``: ``fit + predict`` of ``N`` rows with integer weights 1..3
  (every row in the context, weighted) against the same without weights.
  Target: at most :data:`TARGETS` ``["weighted_fit"]``.

Each case times its peers interleaved, in a fresh random order each round,
and reports per peer the median CPU seconds of the process over rounds
(:func:`lab.benchmarks.timing.timed_with_peak`: every thread counts, other
jobs on a shared machine do not) and the per-round ratio to the baseline with
a bootstrap interval. Beside them, the median minor page faults of a call
(``getrusage``): the kernel time of mapping fresh pages counts in the CPU
time, and how many a call takes depends on what the allocator kept from the
calls before, which is most of the rounds' spread. No test asserts a time.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from eval.locations import DEFAULT_OUTPUT_ROOT, default_output
from eval.paper.estimators import cpu_float32_estimator
from eval.provenance import provenance_dict
from lab.benchmarks.batched import ragged_datasets
from lab.benchmarks.child import run_child
from lab.benchmarks.machine import environment
from lab.benchmarks.timing import paired_ratio, process_rounds
from retrofit import OTabPFNRegressor, bootstrap_predict
from retrofit.files import write_json_atomic, write_text_atomic
from retrofit.leave_out.bootstrap import bootstrap_counts

__all__ = [
    "BOOTSTRAP_PEERS",
    "BOUND_FLOAT32_ULPS",
    "TARGETS",
    "bench_table",
    "bench_weights",
    "bench_weights_command",
    "bootstrap_peers",
    "estimator_factory",
    "render_weights_markdown",
    "warm_up",
]

#: Upper bounds on the median per-round ratio to each part's baseline.
TARGETS: dict[str, float] = {"bootstrap": 0.6, "weighted_fit": 1.05}

#: The bootstrap's peers, the baseline first.
BOOTSTRAP_PEERS: tuple[str, ...] = ("refits", "bootstrap_predict")
#: Seconds a fresh-process measurement may take (imports, a warm-up, two calls).
CHILD_TIMEOUT_S = 900.0

#: How far a replicate may be from its refit: float32 ulps of ``max(1, max|refit|)``
#: (tests/helpers/exactness.py's ``MODEL_ULPS[float32]``, a whole forward's rounding).
BOUND_FLOAT32_ULPS = 256


def bench_table(n_rows: int, n_test: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``X, y, X_test`` of one synthetic table (``ragged_datasets``: asked one row more, cut)."""
    X, y, _ = ragged_datasets(
        1, min_rows=n_rows + n_test + 1, max_rows=n_rows + n_test + 1, seed=seed
    )[0]
    return X[:n_rows], y[:n_rows], X[n_rows : n_rows + n_test]


def estimator_factory(
    model_path: str, n_estimators: int | str, seed: int
) -> Callable[[], OTabPFNRegressor]:
    """A new estimator of the bench for every call: the host patched in Full-O, float32, CPU."""

    def make() -> OTabPFNRegressor:
        return cpu_float32_estimator("regression", model_path, n_estimators=n_estimators, seed=seed)

    return make


def warm_up(make: Callable[[], OTabPFNRegressor], seed: int) -> None:
    """One untimed round on a small table: thread pools, kernel tables, the load."""
    X0, y0, Xt0 = bench_table(30, 5, seed)
    make().fit(X0, y0, sample_weight=np.arange(1.0, 31.0)).predict(Xt0)
    bootstrap_predict(make(), X0, y0, Xt0, n_replicates=2, random_state=seed)


def _timed(
    peers: dict[str, Callable[[], None]],
    baseline: str,
    *,
    repeats: int,
    seed: int,
    progress: Callable[[str], None] | None,
) -> dict[str, dict[str, Any]]:
    """Interleaved rounds in this process; per peer its seconds, faults, medians and ratio."""
    rounds = process_rounds(peers, repeats=repeats, rng=random.Random(seed), progress=progress)
    return _summary(rounds, baseline, seed)


def _summary(
    rounds: dict[str, dict[str, list]], baseline: str, seed: int
) -> dict[str, dict[str, Any]]:
    """Per peer: its seconds and faults of each round, their medians, its ratio to ``baseline``."""
    return {
        name: {
            "median_s": float(np.median(got["s"])),
            "s": got["s"],
            "median_minor_faults": int(np.median(got["faults"])),
            "minor_faults": got["faults"],
            f"ratio_to_{baseline}": None
            if name == baseline
            else paired_ratio(got["s"], rounds[baseline]["s"], seed=seed),
        }
        for name, got in rounds.items()
    }


def bootstrap_peers(
    make: Callable[[], OTabPFNRegressor],
    X: np.ndarray,
    y: np.ndarray,
    X_test: np.ndarray,
    counts_RN: np.ndarray,
    seed: int,
    last: dict[str, np.ndarray],
) -> dict[str, Callable[[], None]]:
    """The bootstrap's two peers over the same counts; each keeps its output in ``last``."""
    rows_N = np.arange(len(X))

    def refits() -> None:
        # One estimator refitted R times: its patched host is kept between fits.
        estimator, predictions = make(), []
        for counts_N in counts_RN:
            rows = np.repeat(rows_N, counts_N)
            predictions.append(estimator.fit(X[rows], y[rows]).predict(X_test))
        last["refits"] = np.stack(predictions)

    def batched() -> None:
        last["bootstrap_predict"] = bootstrap_predict(
            make(), X, y, X_test, n_replicates=len(counts_RN), random_state=seed
        )

    return {"refits": refits, "bootstrap_predict": batched}


def _bootstrap_case(
    make: Callable[[], OTabPFNRegressor],
    n_rows: int,
    n_test: int,
    replicates: int,
    *,
    repeats: int,
    seed: int,
    progress: Callable[[str], None] | None,
) -> dict[str, Any]:
    X, y, X_test = bench_table(n_rows, n_test, seed)
    counts_RN = bootstrap_counts(n_rows, replicates, seed)
    last: dict[str, np.ndarray] = {}
    peers = bootstrap_peers(make, X, y, X_test, counts_RN, seed, last)
    timed = _timed(peers, "refits", repeats=repeats, seed=seed, progress=progress)
    difference = float(np.max(np.abs(last["bootstrap_predict"] - last["refits"])))
    scale = max(1.0, float(np.max(np.abs(last["refits"]))))
    bound = BOUND_FLOAT32_ULPS * float(np.finfo(np.float32).eps) * scale
    return {
        "rows": n_rows,
        "test_rows": n_test,
        "features": X.shape[1],
        "replicates": replicates,
        "distinct_rows_per_replicate": float(np.mean((counts_RN > 0).sum(axis=1))),
        "peers": timed,
        "max_abs_diff_to_refits": difference,
        "bound": bound,
        "within_bound": difference <= bound,
        "target": TARGETS["bootstrap"],
    }


def _fresh_process_case(
    arguments: dict[str, Any],
    *,
    repeats: int,
    seed: int,
    progress: Callable[[str], None] | None,
) -> dict[str, Any]:
    """The bootstrap's peers, each call in a fresh process of its own (:mod:`.weights_child`)."""

    def in_a_fresh_process(peer: str) -> Callable[[], dict[str, Any]]:
        def call() -> dict[str, Any]:
            return run_child(
                "lab.benchmarks.weights_child",
                {**arguments, "peer": peer},
                timeout_s=CHILD_TIMEOUT_S,
                what=f"bench --weights' process for {peer}",
            )

        return call

    def as_reported(call: Callable[[], dict[str, Any]]) -> tuple[float, None, int]:
        got = call()  # the child timed itself; this process's clock saw only the wait
        return got["s"], None, got["faults"]

    rounds = process_rounds(
        {peer: in_a_fresh_process(peer) for peer in BOOTSTRAP_PEERS},
        repeats=repeats,
        rng=random.Random(seed),
        progress=progress,
        measure=as_reported,
    )
    return {
        "rows": arguments["rows"],
        "test_rows": arguments["test_rows"],
        "replicates": arguments["replicates"],
        "peers": _summary(rounds, "refits", seed),
        "target": TARGETS["bootstrap"],
    }


def _weighted_fit_case(
    make: Callable[[], OTabPFNRegressor],
    n_rows: int,
    n_test: int,
    *,
    repeats: int,
    seed: int,
    progress: Callable[[str], None] | None,
) -> dict[str, Any]:
    X, y, X_test = bench_table(n_rows, n_test, seed)
    w_N = np.random.default_rng(seed).integers(1, 4, size=n_rows).astype(np.float64)

    def unweighted() -> None:
        make().fit(X, y).predict(X_test)

    def weighted() -> None:
        make().fit(X, y, sample_weight=w_N).predict(X_test)

    peers = {"unweighted": unweighted, "weighted": weighted}
    return {
        "rows": n_rows,
        "test_rows": n_test,
        "features": X.shape[1],
        "weights": "integers 1..3",
        "peers": _timed(peers, "unweighted", repeats=repeats, seed=seed, progress=progress),
        "target": TARGETS["weighted_fit"],
    }


def bench_weights(
    out_dir: str | os.PathLike[str] = DEFAULT_OUTPUT_ROOT / "bench_weights",
    *,
    rows: Sequence[int] = (500,),
    replicates: int = 16,
    test_rows: int = 100,
    fit_rows: Sequence[int] = (200, 500),
    repeats: int = 5,
    model_path: str = "embedded",
    n_estimators: int | str = "auto",
    threads: int | None = None,
    seed: int = 0,
    fresh_processes: bool = False,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Runs both parts and writes ``bench_weights.{json,md}`` to ``out_dir``.

    Args:
        out_dir: Output directory.
        rows: Train rows of the bootstrap cases.
        replicates: Bootstrap replicates ``R`` per case.
        test_rows: Test rows every case predicts.
        fit_rows: Train rows of the weighted-fit cases.
        repeats: Timed rounds per case.
        model_path: The host (patched in Full-O).
        n_estimators: Ensemble size (``"auto"``: the checkpoint's).
        threads: torch threads (default: keep).
        seed: Seed of the data, the resamples, the weights and the round orders.
        fresh_processes: Also time the bootstrap's peers with each call in a
            fresh process of its own (module docstring).
        progress: Receives one line per case and round.

    Returns:
        The report written to ``bench_weights.json``.
    """
    if threads:
        torch.set_num_threads(threads)
    env_start = environment()
    make = estimator_factory(model_path, n_estimators, seed)
    warm_up(make, seed)
    X0, y0, _ = bench_table(30, 5, seed)
    report: dict[str, Any] = {
        "model_path": model_path,
        "device": "cpu",
        "dtype": "float32",
        "mode": "full-o",
        "n_estimators": int(make().fit(X0, y0).n_estimators_),
        "repeats": repeats,
        "threads": torch.get_num_threads(),
        "clock": "time.process_time (CPU time of every thread of the process)",
        "bootstrap": [],
        "bootstrap_fresh_processes": [],
        "weighted_fit": [],
    }
    for n in rows:
        if progress:
            progress(f"bootstrap: {replicates} replicates of {n} rows, {test_rows} test rows")
        report["bootstrap"].append(
            _bootstrap_case(
                make, n, test_rows, replicates, repeats=repeats, seed=seed, progress=progress
            )
        )
        if fresh_processes:
            if progress:
                progress(f"bootstrap, each call in a fresh process: {n} rows")
            arguments = {
                "rows": n,
                "test_rows": test_rows,
                "replicates": replicates,
                "model_path": model_path,
                "n_estimators": n_estimators,
                "threads": torch.get_num_threads(),
                "seed": seed,
            }
            report["bootstrap_fresh_processes"].append(
                _fresh_process_case(arguments, repeats=repeats, seed=seed, progress=progress)
            )
    for n in fit_rows:
        if progress:
            progress(f"weighted fit: {n} rows, {test_rows} test rows")
        report["weighted_fit"].append(
            _weighted_fit_case(make, n, test_rows, repeats=repeats, seed=seed, progress=progress)
        )
    report["environment"] = {"start": env_start, "end": environment()}
    report["provenance"] = provenance_dict(
        benchmark="lab.benchmarks.weights",
        seed=seed,
        rows=list(rows),
        replicates=replicates,
        test_rows=test_rows,
        fit_rows=list(fit_rows),
    )
    out = Path(out_dir)
    write_json_atomic(out / "bench_weights.json", report)
    write_text_atomic(out / "bench_weights.md", render_weights_markdown(report))
    return report


def _ratio(row: dict[str, Any], baseline: str) -> str:
    r = row[f"ratio_to_{baseline}"]
    return "1" if r is None else f"{r['ratio']:.2f} [{r['ci_low']:.2f}, {r['ci_high']:.2f}]"


def _allocator(report: dict[str, Any]) -> str:
    """The allocator variables the run was started with, or glibc's defaults."""
    start = report.get("environment", {}).get("start", {})
    given = {k: v for k, v in start.get("allocator_env", {}).items() if v is not None}
    return ", ".join(f"`{k}={v}`" for k, v in given.items()) or "the C library's defaults"


def render_weights_markdown(report: dict[str, Any]) -> str:
    """The report as two Markdown tables, one row per case and peer."""
    lines = [
        "# Row weights: bootstrap replicates from one batch, and the cost of a weighted fit",
        "",
        f"Host `{report['model_path']}` ({report['mode']}, {report['n_estimators']} estimators), "
        f"{report['device']}, {report['dtype']}, {report['threads']} torch threads; medians of "
        f"{report['repeats']} interleaved rounds; clock: {report['clock']}. Ratio: per-round "
        "time / the baseline's (median, 95% bootstrap interval); below 1 is faster. Synthetic "
        "tables (`lab.benchmarks.batched.ragged_datasets`). Allocator: "
        f"{_allocator(report)} (page faults: minor faults of a call, median; docs/cpu_chunks.md).",
        "",
        "## Bootstrap: `retrofit.bootstrap_predict` against R refits on the resampled rows",
        "",
        f"Target: ratio at most {TARGETS['bootstrap']}; predictions within "
        f"{BOUND_FLOAT32_ULPS} float32 ulps of max(1, max|refit|).",
        "",
        "| rows | test rows | R | distinct rows | peer | s | ratio to refits | page faults "
        "| max abs diff to refits | bound | within |",
        "|---:|---:|---:|---:|---|---:|---|---:|---:|---:|---|",
    ]
    for case in report["bootstrap"]:
        for name, row in case["peers"].items():
            lines.append(
                f"| {case['rows']} | {case['test_rows']} | {case['replicates']} "
                f"| {case['distinct_rows_per_replicate']:.1f} | {name} | {row['median_s']:.2f} "
                f"| {_ratio(row, 'refits')} | {row['median_minor_faults']} "
                f"| {case['max_abs_diff_to_refits']:.3g} "
                f"| {case['bound']:.3g} | {'yes' if case['within_bound'] else 'no'} |"
            )
    if report.get("bootstrap_fresh_processes"):
        lines += [
            "",
            "### The same, each call in a fresh process of its own",
            "",
            "Per round and peer one process: a warm-up on a small table, one untimed call "
            "like the timed one, then the timed call; nothing else runs in it, so its page "
            "faults are what that process's allocator makes of the call.",
            "",
            "| rows | test rows | R | peer | s | ratio to refits | page faults |",
            "|---:|---:|---:|---|---:|---|---:|",
        ]
        lines += _peer_lines(
            report["bootstrap_fresh_processes"], ("rows", "test_rows", "replicates"), "refits"
        )
    lines += [
        "",
        "## Weighted fit + predict against the unweighted one (the same rows)",
        "",
        f"Target: ratio at most {TARGETS['weighted_fit']}.",
        "",
        "| rows | test rows | weights | peer | s | ratio to unweighted | page faults |",
        "|---:|---:|---|---|---:|---|---:|",
    ]
    lines += _peer_lines(report["weighted_fit"], ("rows", "test_rows", "weights"), "unweighted")
    return "\n".join(lines) + "\n"


def _peer_lines(cases: list[dict[str, Any]], columns: tuple[str, ...], baseline: str) -> list[str]:
    """One table line per case and peer: the case's ``columns``, then the peer's figures."""
    return [
        "| "
        + " | ".join(str(case[c]) for c in columns)
        + f" | {name} | {row['median_s']:.2f} | {_ratio(row, baseline)} "
        + f"| {row['median_minor_faults']} |"
        for case in cases
        for name, row in case["peers"].items()
    ]


def bench_weights_command(args: Any) -> int:
    """``python -m lab bench --weights``."""
    out = args.out or str(default_output("bench_weights", quick=args.quick))
    bench_weights(
        out,
        rows=[40] if args.quick else args.weights_rows,
        replicates=3 if args.quick else args.weights_replicates,
        test_rows=8 if args.quick else args.weights_test_rows,
        fit_rows=[30] if args.quick else args.weights_fit_rows,
        repeats=1 if args.quick else args.weights_repeats,
        model_path=args.model,
        n_estimators=1 if args.quick else "auto",
        threads=args.threads,
        seed=args.seed,
        fresh_processes=args.weights_fresh_processes,
        progress=lambda line: print(line, flush=True),
    )
    print(f"wrote {out}/bench_weights.json and bench_weights.md")
    return 0
