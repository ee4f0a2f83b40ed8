"""Benchmark of ragged batched prediction (``python -m lab bench --batched``).

For each size ``N`` it draws ``N`` synthetic regression datasets of random
shapes (train rows log-uniform in ``[min_rows, max_rows]``, a quarter as many
test rows, 2 to 10 features) and times, interleaved in a fresh random order
each round (so load drift on a shared machine hits every peer alike):

* ``batched``: :func:`retrofit.batching.regression.predict_batched` on the patched host
  (per-dataset stages before ICL, null-padded ICL forwards per length bucket)
  at the device's default padded-share bound;
* ``batched_wide``: the same at the accelerator's bound (25 %), where the
  device's default is another (a CPU's, 5 %): what padding more costs there;
* ``loop``: ``fit`` + ``predict`` per dataset with tabpfn's regressor sharing
  the same patched model object (no reload: the strongest loop baseline);
* ``tabpfn_loop`` (when ``loops`` is set): plain tabpfn's loop, a
  ``TabPFNRegressor`` on the host's checkpoint file refitted per dataset, the
  way a user without the retrofit writes it;
* ``ours_loop`` (when ``loops`` is set): the same loop with
  :class:`retrofit.OTabPFNRegressor` (Full-O), the drop-in's own loop.

Where shapes match, a second set of ``N`` datasets of one shape adds
``tabpfn_same_shape`` (tabpfn's own ``predict_batched``) and ``padded_same_shape``
(the padded path forced on the same input). Reported per peer: median seconds
per dataset over rounds, the paired per-round ratio to the loop with a
bootstrap interval (CPU time of the process: other jobs on a shared machine
do not count), the median peak resident memory a call adds (``VmHWM``
after a reset through ``/proc/self/clear_refs``; Linux only), and for the
padded path the buckets and the padded fraction of rows and of attention
cells. Results go to ``bench_batched.json`` and ``bench_batched.md`` with
provenance; no test asserts a time. The default rows (50 to 500) are sized
for a small shared CPU; give ``--batched-rows 50 2000`` on a larger machine
or with ``--device cuda``.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from sklearn.base import clone
from tabpfn import TabPFNRegressor

from eval.locations import DEFAULT_OUTPUT_ROOT, default_output
from eval.provenance import provenance_dict
from lab.benchmarks import DEFAULT_BATCHED_SIZES
from lab.benchmarks.machine import environment
from lab.benchmarks.timing import paired_ratio, timed_with_peak
from retrofit import OTabPFNRegressor
from retrofit.batching.bounds import DEFAULT_MAX_PADDED_FRACTION, default_max_padded_fraction
from retrofit.batching.regression import predict_batched
from retrofit.files import write_json_atomic, write_text_atomic
from retrofit.models.loading import resolve_model

__all__ = [
    "DEFAULT_SIZES",
    "LOOP_PEERS",
    "PADDED_PEERS",
    "bench_batched",
    "bench_batched_command",
    "bench_case",
    "ragged_datasets",
    "render_batched_markdown",
]

DEFAULT_SIZES = DEFAULT_BATCHED_SIZES
Datasets = list[tuple[np.ndarray, np.ndarray, np.ndarray]]


def ragged_datasets(
    n: int,
    *,
    min_rows: int = 50,
    max_rows: int = 2000,
    seed: int = 0,
    same_shape: bool = False,
) -> Datasets:
    """``n`` synthetic regression datasets ``(X_train, y_train, X_test)``.

    Train rows are log-uniform in ``[min_rows, max_rows]`` (one draw for all
    when ``same_shape``), test rows a quarter of them (at least 5), features
    2 to 10 (one draw when ``same_shape``); targets a random linear function
    plus a sine and noise.
    """
    rng = np.random.default_rng(seed)
    out = []
    fixed = None
    for _ in range(n):
        if fixed is None or not same_shape:
            n_train = int(np.exp(rng.uniform(np.log(min_rows), np.log(max_rows))))
            fixed = (n_train, max(5, n_train // 4), int(rng.integers(2, 11)))
        n_train, n_test, n_feat = fixed
        X = rng.normal(size=(n_train + n_test, n_feat))
        w = rng.normal(size=n_feat)
        y = X @ w + np.sin(2 * X[:, 0]) + 0.1 * rng.normal(size=len(X))
        out.append((X[:n_train], y[:n_train], X[n_train:]))
    return out


#: The peers that run the padded path (their padding is reported).
PADDED_PEERS = ("batched", "batched_wide", "padded_same_shape")


#: The loop peers a padded peer is compared with (``ratio_to``), when present.
LOOP_PEERS = ("loop", "tabpfn_loop", "ours_loop")


def _loop_peers(
    loops: dict[str, Callable[[], Any]] | None, datasets: Datasets
) -> dict[str, Callable[[], Any]]:
    """``fit`` + ``predict`` per dataset with one estimator made by each factory."""

    def looped(make: Callable[[], Any]) -> Callable[[], None]:
        def run() -> None:
            estimator = make()
            for X, y, Xt in datasets:
                estimator.fit(X, y)
                estimator.predict(Xt)

        return run

    return {name: looped(make) for name, make in (loops or {}).items()}


def _peers(
    template: Any,
    datasets: Datasets,
    same_shape: bool,
    device: Any,
    loops: dict[str, Callable[[], Any]] | None = None,
) -> tuple[dict[str, Callable[[], Any]], dict[str, Any]]:
    X_tr, y_tr, X_te = ([d[k] for d in datasets] for k in range(3))
    last: dict[str, Any] = {}

    def loop() -> None:
        for X, y, Xt in datasets:
            worker = TabPFNRegressor(**template.get_params(deep=False))
            worker.fit(X, y)
            worker.predict(Xt)

    def padded(name: str, bound: float | None = None) -> Callable[[], None]:
        def run() -> None:
            last[name] = predict_batched(
                template, X_tr, y_tr, X_te, padded=True, max_padded_fraction=bound
            )

        return run

    peers: dict[str, Callable[[], Any]] = {"loop": loop, **_loop_peers(loops, datasets)}
    if same_shape:
        peers["padded_same_shape"] = padded("padded_same_shape")
        peers["tabpfn_same_shape"] = lambda: predict_batched(
            template, X_tr, y_tr, X_te, padded=False
        )
    else:
        peers["batched"] = padded("batched")
        if default_max_padded_fraction(device) != DEFAULT_MAX_PADDED_FRACTION:
            # What the accelerator's bound would do here: the cost of padding more.
            peers["batched_wide"] = padded("batched_wide", DEFAULT_MAX_PADDED_FRACTION)
    return peers, last


def bench_case(
    template: Any,
    datasets: Datasets,
    *,
    same_shape: bool,
    device: Any,
    repeats: int,
    seed: int,
    warmup: bool,
    progress: Callable[[str], None] | None,
    loops: dict[str, Callable[[], Any]] | None = None,
) -> dict[str, Any]:
    """Times the peers on one set of datasets, interleaved; the case's report entry.

    Args:
        template: The ``TabPFNRegressor`` over the patched model (``batched_host()``).
        datasets: ``(X_train, y_train, X_test)`` per dataset.
        same_shape: Whether the datasets share one shape (adds tabpfn's own peer).
        device: The estimator's resolved device (its default padded-share bound).
        repeats: Timed rounds.
        seed: Seed of the round orders and the bootstrap.
        warmup: Whether to run every peer once before the rounds.
        progress: Receives one line per round.
        loops: Extra loop peers, name to a factory of the estimator the loop
            refits (``tabpfn_loop``, ``ours_loop``); every peer also gets its
            ratio to each loop present (``ratio_to``).
    """
    peers, last = _peers(template, datasets, same_shape, device, loops)
    names = list(peers)
    if warmup:  # one-time costs (thread pools, kernel tables) outside the rounds
        for name in names:
            peers[name]()
    rng = random.Random(seed)
    times: dict[str, list[float]] = {name: [] for name in names}
    memory: dict[str, list[int | None]] = {name: [] for name in names}
    for r in range(repeats):
        order = names[:]
        rng.shuffle(order)
        for name in order:
            seconds, peak = timed_with_peak(peers[name])
            times[name].append(seconds / len(datasets))
            memory[name].append(peak)
        if progress:
            progress(
                f"  round {r + 1}/{repeats}: "
                + ", ".join(f"{n} {times[n][-1] * 1e3:.1f} ms/dataset" for n in names)
            )
    rows = {
        name: {
            "median_s_per_dataset": float(np.median(t)),
            "s_per_dataset": t,
            "ratio_to_loop": paired_ratio(t, times["loop"], seed=seed) if name != "loop" else None,
            "ratio_to": {
                loop: paired_ratio(t, times[loop], seed=seed)
                for loop in LOOP_PEERS
                if loop in times and loop != name
            },
            "peak_extra_bytes": _median_or_none(memory[name]),
        }
        for name, t in times.items()
    }
    shapes = [(len(X), len(Xt), X.shape[1]) for X, _, Xt in datasets]
    return {
        "n_datasets": len(datasets),
        "same_shape": same_shape,
        "train_rows": [s[0] for s in shapes],
        "test_rows": [s[1] for s in shapes],
        "features": [s[2] for s in shapes],
        "peers": rows,
        "padding": {
            name: {**last[name].stats.to_dict(), "n_buckets": len(last[name].buckets)}
            for name in names
            if name in PADDED_PEERS
        },
    }


def _median_or_none(values: list[int | None]) -> float | None:
    known = [v for v in values if v is not None]
    return float(np.median(known)) if known else None


def bench_batched(
    out_dir: str | os.PathLike[str] = DEFAULT_OUTPUT_ROOT / "bench_batched",
    *,
    sizes: Sequence[int] = DEFAULT_SIZES,
    min_rows: int = 50,
    max_rows: int = 500,
    repeats: int = 3,
    model_path: str = "embedded",
    device: str = "cpu",
    n_estimators: int | str = "auto",
    threads: int | None = None,
    seed: int = 0,
    same_shape_up_to: int = 32,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Runs the batched benchmark and writes ``bench_batched.{json,md}`` to ``out_dir``.

    Args:
        out_dir: Output directory.
        sizes: Numbers of datasets.
        min_rows: Fewest train rows of a dataset.
        max_rows: Most train rows of a dataset.
        repeats: Timed rounds per size.
        model_path: The host (patched in Full-O).
        device: Torch device of the estimator.
        n_estimators: Ensemble size (``"auto"``: the checkpoint's).
        threads: torch threads (default: keep).
        seed: Seed of the datasets and the round orders.
        same_shape_up_to: Also compare with tabpfn's same-shape ``predict_batched``
            on sizes up to this many datasets (0: never).
        progress: Receives one line per finished measurement.

    Returns:
        The report written to ``bench_batched.json``.
    """
    if threads:
        torch.set_num_threads(threads)
    env_start = environment()
    first = ragged_datasets(1, min_rows=min_rows, max_rows=min_rows, seed=seed)[0]
    estimator = OTabPFNRegressor(
        model_path=model_path,
        device=device,
        n_estimators=n_estimators,
        inference_precision=torch.float32,
        ignore_pretraining_limits=True,
        random_state=seed,
    ).fit(first[0], first[1])
    template = estimator.batched_host()
    plain = {k: v for k, v in template.get_params(deep=False).items() if k != "model_path"}
    # Plain tabpfn's loop loads what the patched estimator loaded: the one resolver turns
    # "embedded", an alias or a saved directory into the checkpoint tabpfn reads.
    host_file = resolve_model(model_path).tabpfn_model_path("regressor")
    loops = {
        "tabpfn_loop": lambda: TabPFNRegressor(model_path=host_file, **plain),
        "ours_loop": lambda: clone(estimator),
    }
    report: dict[str, Any] = {
        "model_path": model_path,
        "device": device,
        "dtype": "float32",
        "n_estimators": int(estimator.n_estimators_),
        "mode": estimator.settings_["mode"],
        "rows": [min_rows, max_rows],
        "repeats": repeats,
        "threads": torch.get_num_threads(),
        "clock": "time.process_time (CPU time of every thread of the process)",
        "cases": [],
    }
    for n in sizes:
        for shared in (False, True) if n <= same_shape_up_to else (False,):
            data = ragged_datasets(
                n, min_rows=min_rows, max_rows=max_rows, seed=seed + n, same_shape=shared
            )
            if progress:
                kind = "same-shape" if shared else "ragged"
                progress(f"{n} {kind} datasets, {sum(len(d[0]) for d in data)} train rows")
            case = bench_case(
                template,
                data,
                same_shape=shared,
                device=estimator.devices_[0],
                repeats=repeats,
                seed=seed,
                warmup=not report["cases"],
                progress=progress,
                loops=loops,
            )
            report["cases"].append(case)
    report["environment"] = {"start": env_start, "end": environment()}
    report["provenance"] = provenance_dict(
        benchmark="lab.benchmarks.batched", seed=seed, sizes=list(sizes)
    )
    out = Path(out_dir)
    write_json_atomic(out / "bench_batched.json", report)
    write_text_atomic(out / "bench_batched.md", render_batched_markdown(report))
    return report


def _mib(b: int | None) -> str:
    return "n/a" if b is None else f"{b / 2**20:.0f}"


def render_batched_markdown(report: dict[str, Any]) -> str:
    """The report as a Markdown table, one row per case and peer."""
    lines = [
        "# Ragged batched prediction: null-padded ICL vs a loop of fit/predict",
        "",
        f"Host `{report['model_path']}` ({report['mode']}, {report['n_estimators']} estimators), "
        f"{report['device']}, {report['dtype']}, {report['threads']} torch threads; "
        f"train rows {report['rows'][0]}-{report['rows'][1]}; medians of "
        f"{report['repeats']} interleaved rounds; clock: "
        f"{report.get('clock', 'time.perf_counter (wall)')}. Ratio: per-round time / loop "
        "time (median, 95% bootstrap interval); below 1 is faster than the loop. `loop` "
        "refits tabpfn's regressor on the patched model object (no reload), "
        "`tabpfn_loop` is plain tabpfn on the host's file, `ours_loop` OTabPFNRegressor.",
        "",
        "| datasets | shapes | peer | ms / dataset | ratio to loop | to tabpfn's loop "
        "| to our loop | peak MiB | buckets | padded rows | padded cells |",
        "|---:|---|---|---:|---|---|---|---:|---:|---:|---:|",
    ]
    for case in report["cases"]:
        for name, row in case["peers"].items():
            r = row["ratio_to_loop"]
            ratio = (
                "1" if r is None else f"{r['ratio']:.2f} [{r['ci_low']:.2f}, {r['ci_high']:.2f}]"
            )
            padding = ["", "", ""]
            if name in case["padding"]:
                pad = case["padding"][name]
                padding = [
                    str(pad["n_buckets"]),
                    f"{pad['padded_row_fraction']:.1%}",
                    f"{pad['padded_cell_fraction']:.1%}",
                ]
            shapes = "same" if case["same_shape"] else "ragged"
            to = row.get("ratio_to", {})
            others = [
                f"{to[k]['ratio']:.2f} [{to[k]['ci_low']:.2f}, {to[k]['ci_high']:.2f}]"
                if k in to
                else ("1" if k == name else "")
                for k in ("tabpfn_loop", "ours_loop")
            ]
            lines.append(
                f"| {case['n_datasets']} | {shapes} | {name} "
                f"| {row['median_s_per_dataset'] * 1e3:.1f} | {ratio} | "
                + " | ".join(others)
                + f" | {_mib(row['peak_extra_bytes'])} | "
                + " | ".join(padding)
                + " |"
            )
    return "\n".join(lines) + "\n"


def bench_batched_command(args: Any) -> int:
    """``python -m lab bench --batched``."""
    out = args.out or str(default_output("bench_batched", quick=args.quick))
    sizes = [2, 3] if args.quick else args.batched_sizes
    rows = [20, 60] if args.quick else args.batched_rows
    bench_batched(
        out,
        sizes=sizes,
        min_rows=rows[0],
        max_rows=rows[1],
        repeats=1 if args.quick else args.batched_repeats,
        model_path=args.model,
        device=args.device,
        n_estimators=1 if args.quick else "auto",
        threads=args.threads,
        seed=args.seed,
        progress=lambda line: print(line, flush=True),
    )
    print(f"wrote {out}/bench_batched.json and bench_batched.md")
    return 0
