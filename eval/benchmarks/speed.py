"""Benchmark: OAttention at the cost of plain attention (``python -m eval bench``).

Three parts, each written to ``bench.json`` and ``bench.md`` with provenance:

* ``attention``: :func:`patches.oattention` (and its ``validate=False`` entry
  for trusted callers) against ``torch.nn.functional.scaled_dot_product_attention``
  without a bias, on the same inputs, at fixed shapes and at the ICL shapes
  of the embedded host on the offline suite. Peers are timed interleaved in
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

Speed is a property of the machine at the time of the run: the report records
the CPU, threads, load average and the other busy processes, and no test
asserts a time.

Shape letters: B batch, H query heads, L queries, S sources (keys), D head
dimension; ``q_BHLD`` etc. follow ``scaled_dot_product_attention``'s layout.
"""

from __future__ import annotations

import functools
import json
import math
import os
import random
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from eval.markdown import markdown_table
from eval.paper.datasets import load_dataset
from retrofit.loading import load_host
from retrofit.settings import MODES

__all__ = [
    "ICL_DATASETS",
    "LARGE_SHAPES",
    "MEMORY_SHAPE",
    "SMALL_SHAPES",
    "TARGETS",
    "Shape",
    "attention_inputs",
    "bench_attention",
    "bench_command",
    "bench_estimator",
    "bench_memory",
    "icl_shapes",
    "paired_ratio",
    "run",
    "time_interleaved",
]


@dataclass(frozen=True)
class Shape:
    """An attention problem size and the target group it belongs to."""

    B: int
    H: int
    L: int
    S: int
    D: int
    group: str = "large"  # "large", "small", "icl" or "quick"
    label: str = ""

    def dims(self) -> tuple[int, int, int, int, int]:
        """``(B, H, L, S, D)``."""
        return (self.B, self.H, self.L, self.S, self.D)


LARGE_SHAPES: tuple[Shape, ...] = (
    Shape(1, 8, 4096, 2048, 64, "large"),
    Shape(4, 8, 2048, 1024, 32, "large"),
)
SMALL_SHAPES: tuple[Shape, ...] = (
    Shape(1, 8, 1024, 512, 64, "small"),
    Shape(8, 4, 512, 256, 16, "small"),
)
MEMORY_SHAPE = Shape(1, 8, 8192, 4096, 32, "memory")
QUICK_SHAPES: tuple[Shape, ...] = (
    Shape(1, 2, 256, 128, 16, "quick"),
    Shape(2, 2, 128, 64, 8, "quick"),
)
QUICK_MEMORY_SHAPE = Shape(1, 2, 512, 256, 16, "memory")

ICL_DATASETS: dict[str, int] = {
    "qsar_fish": 908,
    "concrete": 1030,
    "airfoil": 1503,
    "red_wine": 1599,
    "abalone": 4177,
    "white_wine": 4898,
}
"""Rows of the six offline datasets (fallback when the suite cannot be read)."""

TARGETS: dict[str, float] = {"large": 1.05, "small": 1.25, "memory": 1.05, "estimator": 1.10}
"""Upper bounds on the ratio to the baseline (upper CI bound for timings)."""

DEFAULT_ESTIMATOR_CASES: tuple[tuple[str, int], ...] = (
    ("qsar_fish", 0),
    ("airfoil", 0),
    ("red_wine", 1),
    ("abalone", 2),
)


# --------------------------------------------------------------------------- #
# Timing and statistics
# --------------------------------------------------------------------------- #


def time_interleaved(
    peers: dict[str, Callable[[], Any]],
    *,
    repeats: int,
    warmup: int = 2,
    min_time_s: float = 0.05,
    sync: Callable[[], None] | None = None,
    seed: int = 0,
) -> tuple[dict[str, list[float]], int]:
    """Times peers interleaved: each round runs every peer once, in a random order.

    Args:
        peers: Name to a zero-argument callable.
        repeats: Number of timed rounds.
        warmup: Untimed rounds first (kernel selection, allocator warm-up).
        min_time_s: Each measurement repeats a call ``n`` times, ``n`` chosen
            once so that the fastest peer's measurement lasts about this long.
        sync: Called before and after each measurement (``torch.cuda.synchronize``
            on a GPU).
        seed: Seed of the round orders.

    Returns:
        ``(seconds per call per round for each peer, n calls per measurement)``.
    """
    sync = sync or (lambda: None)
    names = list(peers)
    for _ in range(warmup):
        for name in names:
            peers[name]()
    sync()
    fastest = math.inf
    for name in names:
        t0 = time.perf_counter()
        peers[name]()
        sync()
        fastest = min(fastest, time.perf_counter() - t0)
    inner = max(1, math.ceil(min_time_s / max(fastest, 1e-9)))
    rng = random.Random(seed)
    times: dict[str, list[float]] = {name: [] for name in names}
    for _ in range(repeats):
        order = names[:]
        rng.shuffle(order)
        for name in order:
            fn = peers[name]
            sync()
            t0 = time.perf_counter()
            for _ in range(inner):
                fn()
            sync()
            times[name].append((time.perf_counter() - t0) / inner)
    return times, inner


def paired_ratio(
    num: Sequence[float],
    den: Sequence[float],
    *,
    n_boot: int = 2000,
    level: float = 0.95,
    seed: int = 0,
) -> dict[str, float]:
    """Median of per-round ratios ``num / den`` with a percentile bootstrap CI.

    Rounds are resampled with replacement (pairs stay together), so load that
    hits both peers of a round cancels.

    Args:
        num: Times of the peer, one per round.
        den: Times of the baseline, same rounds.
        n_boot: Bootstrap resamples.
        level: Confidence level of the interval.
        seed: Seed of the resampling.

    Returns:
        ``{"ratio", "ci_low", "ci_high", "ratio_of_medians"}``.
    """
    a, b = np.asarray(num, dtype=float), np.asarray(den, dtype=float)
    if a.shape != b.shape or a.size == 0:
        raise ValueError(f"need equal, non-empty samples, got {a.shape} and {b.shape}")
    r = a / b
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, r.size, size=(n_boot, r.size))
    boot = np.median(r[idx], axis=1)
    lo, hi = np.quantile(boot, [(1 - level) / 2, 1 - (1 - level) / 2])
    return {
        "ratio": float(np.median(r)),
        "ci_low": float(lo),
        "ci_high": float(hi),
        "ratio_of_medians": float(np.median(a) / np.median(b)),
    }


# --------------------------------------------------------------------------- #
# Attention
# --------------------------------------------------------------------------- #


def attention_inputs(
    shape: Shape, *, device: str = "cpu", dtype: Any = None, seed: int = 0
) -> dict[str, Any]:
    """Random ``q, k, v`` and presence for one shape.

    Presence is that of random carriers (``||h||^2 / (1 + ||h||^2)``) with
    about 2 % null tokens, so the bias holds ``-inf`` entries as in real use.

    Returns:
        ``{"q": (B,H,L,D), "k": (B,H,S,D), "v": (B,H,S,D), "p_q": (B,L), "p_k": (B,S)}``.
    """
    import torch

    dtype = dtype or torch.float32
    g = torch.Generator().manual_seed(seed)
    B, H, L, S, D = shape.dims()

    def rnd(*size: int) -> torch.Tensor:
        return torch.randn(*size, generator=g).to(device=device, dtype=dtype)

    def pres(n: int) -> torch.Tensor:
        sq = torch.rand(B, n, generator=g) * 4.0
        p = sq / (1.0 + sq)
        p[torch.rand(B, n, generator=g) < 0.02] = 0.0
        return p.to(device)

    return {
        "q": rnd(B, H, L, D),
        "k": rnd(B, H, S, D),
        "v": rnd(B, H, S, D),
        "p_q": pres(L),
        "p_k": pres(S),
    }


def _attention_peers(x: dict[str, Any]) -> dict[str, Callable[[], Any]]:
    import torch.nn.functional as F

    from patches.oattention import oattention

    q, k, v, p_q, p_k = x["q"], x["k"], x["v"], x["p_q"], x["p_k"]
    peers = {
        "sdpa": lambda: F.scaled_dot_product_attention(q, k, v),
        "oattention": lambda: oattention(q, k, v, p_q, p_k),
        "oattention_trusted": lambda: oattention(q, k, v, p_q, p_k, validate=False),
    }
    if q.device.type == "cpu":
        # The kernel OAttention calls, with the same bias and nothing else: the
        # floor its own post-processing sits on.
        import torch

        bias = torch.xlogy(1.0, p_k).view(p_k.shape[0], 1, 1, p_k.shape[1])
        kernel = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
        peers["kernel_with_bias"] = lambda: kernel(q, k, v, attn_mask=bias)
    return peers


def icl_shapes(model_path: str = "embedded") -> tuple[list[Shape], dict[str, Any]]:
    """ICL attention shapes of a host on the offline suite.

    Queries are all rows (train and test), keys the training rows of the
    75/25 split; heads and head dimension come from the checkpoint's config
    (``icl_num_heads``; ``embed_dim * feat_agg_num_cls_tokens / icl_num_heads``).

    Returns:
        ``(shapes, source)``: one :class:`Shape` per dataset, and where the
        architecture and row counts were read from.
    """
    # No fallback: a missing checkpoint or dataset raises its typed error
    # (WeightsUnavailableError, CheckpointNotFoundError, DatasetUnavailableError)
    # rather than benchmarking shapes of a model or data the user did not ask for.
    cfg = load_host(model_path).architecture_config
    heads = int(cfg.icl_num_heads)
    width = int(cfg.embed_dim) * int(cfg.feat_agg_num_cls_tokens)
    rows = {name: int(load_dataset(name).X.shape[0]) for name in ICL_DATASETS}
    source: dict[str, Any] = {
        "architecture": f"checkpoint {model_path!r}",
        "rows": "eval.paper.datasets.load_dataset",
    }
    shapes = []
    for name, n in rows.items():
        n_test = math.ceil(0.25 * n)
        shapes.append(Shape(1, heads, n, n - n_test, width // heads, "icl", name))
    source["icl_width"] = width
    return shapes, source


def bench_attention(
    shapes: Sequence[Shape],
    *,
    repeats: int,
    min_time_s: float,
    device: str = "cpu",
    dtype: Any = None,
    seed: int = 0,
    progress: Callable[[str], None] | None = None,
) -> list[dict[str, Any]]:
    """Times SDPA and OAttention interleaved at each shape.

    Returns:
        One row per shape: shape, median ms per peer, ratios with CIs, target.
    """
    import torch

    sync = torch.cuda.synchronize if device.startswith("cuda") else None
    rows = []
    for i, shape in enumerate(shapes):
        x = attention_inputs(shape, device=device, dtype=dtype, seed=seed + i)
        with torch.inference_mode():
            times, inner = time_interleaved(
                _attention_peers(x), repeats=repeats, min_time_s=min_time_s, sync=sync, seed=i
            )
        del x
        row: dict[str, Any] = {
            "shape": list(shape.dims()),
            "group": shape.group,
            "label": shape.label,
            "calls_per_measurement": inner,
            "rounds": repeats,
            "median_ms": {n: 1e3 * float(np.median(t)) for n, t in times.items()},
            "ratios": {
                n: paired_ratio(t, times["sdpa"], seed=i) for n, t in times.items() if n != "sdpa"
            },
        }
        if "kernel_with_bias" in times:
            # OAttention's own work on top of the kernel it calls.
            row["oattention_vs_kernel_with_bias"] = paired_ratio(
                times["oattention"], times["kernel_with_bias"], seed=i
            )
        target = TARGETS.get(shape.group)
        row["target"] = target
        if target is not None:
            row["met"] = row["ratios"]["oattention"]["ci_high"] <= target
        rows.append(row)
        if progress:
            r = row["ratios"]["oattention"]
            progress(
                f"attention {shape.dims()} {shape.label}: sdpa {row['median_ms']['sdpa']:.2f} ms, "
                f"oattention x{r['ratio']:.3f} [{r['ci_low']:.3f}, {r['ci_high']:.3f}]"
            )
    return rows


# --------------------------------------------------------------------------- #
# Memory (one fresh process per measurement)
# --------------------------------------------------------------------------- #


def _status_kib(field: str) -> int | None:
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def _known_growth(n_bytes: int | None) -> int | None:
    """A probe's reading, or None where it read nothing.

    No growth at all means the probe saw nothing (the allocator reused freed
    pages, or the counter did not move), never that the call adds 0 bytes.
    """
    return n_bytes if n_bytes is not None and n_bytes > 0 else None


def _memory_child(peer: str, dims: list[int], threads: int | None, seed: int) -> dict[str, Any]:
    """Runs one call of ``peer`` in this (fresh) process and reports its peak growth."""
    import resource

    import torch

    if threads:
        torch.set_num_threads(threads)
    shape = Shape(*dims, group="memory")
    with torch.inference_mode():
        fn = _attention_peers(attention_inputs(Shape(1, 2, 64, 32, 8), seed=seed))[peer]
        fn()  # one-time costs (thread pool, kernel tables) outside the measurement
        x = attention_inputs(shape, seed=seed)
        fn = _attention_peers(x)[peer]
        rss_before = _status_kib("VmRSS")
        try:  # "5" resets the peak RSS (VmHWM) to the current RSS
            with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
                f.write("5")
            method = "VmHWM after /proc/self/clear_refs minus VmRSS before"
            base = rss_before
        except OSError:
            method = "ru_maxrss growth"
            base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        out = fn()
        if method.startswith("VmHWM"):
            peak = _status_kib("VmHWM")
        else:
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        out_bytes = out.numel() * out.element_size()
        input_bytes = sum(t.numel() * t.element_size() for t in x.values())
    return {
        "peer": peer,
        "extra_peak_bytes": _known_growth(
            (peak - base) * 1024 if peak is not None and base else None
        ),
        "rss_before_bytes": rss_before * 1024 if rss_before else None,
        "output_bytes": out_bytes,
        "input_bytes": input_bytes,
        "method": method,
    }


def _memory_child_main() -> None:
    """Entry point of the measuring subprocess: JSON arguments in, JSON line out."""
    args = json.loads(sys.argv[1])
    print(json.dumps(_memory_child(**args)))


def bench_memory(
    shape: Shape,
    *,
    runs: int = 3,
    threads: int | None = None,
    seed: int = 0,
    timeout_s: float = 600.0,
) -> dict[str, Any]:
    """Peak memory one call adds, SDPA vs OAttention, each in a fresh process.

    Returns:
        Per peer the measured extra peak bytes of each run (None where the
        probe read nothing) and the median of the known ones (None if none is
        known), and the ratio ``oattention / sdpa`` of the medians (None, and
        ``met`` None, unless both are known).
    """
    peers = ("sdpa", "oattention")
    samples: dict[str, list[dict[str, Any]]] = {p: [] for p in peers}
    code = "from eval.benchmarks.speed import _memory_child_main; _memory_child_main()"
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    for _ in range(runs):
        for peer in peers:
            arg = json.dumps(
                {"peer": peer, "dims": list(shape.dims()), "threads": threads, "seed": seed}
            )
            proc = subprocess.run(
                [sys.executable, "-c", code, arg],
                capture_output=True,
                text=True,
                timeout=timeout_s,
                env=env,
                check=False,
            )
            if proc.returncode != 0:
                tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
                raise RuntimeError(f"memory child for {peer} failed: {tail}")
            samples[peer].append(json.loads(proc.stdout.strip().splitlines()[-1]))
    result: dict[str, Any] = {"shape": list(shape.dims()), "runs": runs, "peers": {}}
    for peer, rows in samples.items():
        extra = [_known_growth(r["extra_peak_bytes"]) for r in rows]
        known = [b for b in extra if b is not None]
        result["peers"][peer] = {
            "extra_peak_bytes": extra,
            "median_extra_peak_bytes": float(np.median(known)) if known else None,
            "output_bytes": rows[0]["output_bytes"],
            "input_bytes": rows[0]["input_bytes"],
        }
        result["method"] = rows[0]["method"]
    med = {p: result["peers"][p]["median_extra_peak_bytes"] for p in peers}
    ratio = med["oattention"] / med["sdpa"] if None not in med.values() else None
    result["ratio"] = ratio
    result["target"] = TARGETS["memory"]
    result["met"] = ratio <= TARGETS["memory"] if ratio is not None else None
    return result


# --------------------------------------------------------------------------- #
# Estimator
# --------------------------------------------------------------------------- #


def _fit_predict(
    mode: str, data: tuple[Any, Any, Any], *, seed: int, model_path: str, n_estimators: int | str
) -> Any:
    import torch

    from retrofit import OTabPFNRegressor

    X_train, y_train, X_test = data
    est = OTabPFNRegressor(
        mode=mode,
        model_path=model_path,
        n_estimators=n_estimators,
        device="cpu",
        random_state=seed,
        inference_precision=torch.float32,
        ignore_pretraining_limits=True,
    )
    return est.fit(X_train, y_train).predict(X_test)


def bench_estimator(
    cases: Sequence[tuple[str, int]],
    *,
    repeats: int,
    model_path: str = "embedded",
    n_estimators: int | str = "auto",
    max_train: int | None = None,
    modes: Sequence[str] = MODES,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """``fit`` + ``predict`` per mode against ``mode="none"``, interleaved per case.

    Runs in float32 (``inference_precision=torch.float32``) on CPU.

    Args:
        cases: ``(dataset, split seed)`` pairs of the offline suite.
        repeats: Timed rounds per case.
        model_path: The host checkpoint.
        n_estimators: Passed to the estimator.
        max_train: Keep at most this many training rows (smoke runs).
        modes: Modes timed; must include ``"none"``.
        progress: Receives one line per case.

    Returns:
        Per case and mode the median seconds and the ratio to ``"none"`` with
        its CI; the ratio pooled over all rounds of all cases; the target.
    """
    from eval.paper.datasets import load_dataset, split

    per_case = []
    pooled: dict[str, list[float]] = {m: [] for m in modes}
    for ci, (name, seed) in enumerate(cases):
        X_train, X_test, y_train, _ = split(load_dataset(name), seed)
        if max_train is not None:
            X_train, y_train = X_train[:max_train], y_train[:max_train]
            X_test = X_test[: max(1, max_train // 3)]

        peers = {
            m: functools.partial(
                _fit_predict,
                m,
                (X_train, y_train, X_test),
                seed=seed,
                model_path=model_path,
                n_estimators=n_estimators,
            )
            for m in modes
        }
        times, _ = time_interleaved(peers, repeats=repeats, warmup=1, min_time_s=0.0, seed=ci)
        for m in modes:
            pooled[m].extend(times[m])
        row = {
            "dataset": name,
            "seed": seed,
            "n_train": len(X_train),
            "n_test": len(X_test),
            "median_s": {m: float(np.median(t)) for m, t in times.items()},
            "ratios": {
                m: paired_ratio(t, times["none"], seed=ci) for m, t in times.items() if m != "none"
            },
        }
        per_case.append(row)
        if progress:
            progress(
                f"estimator {name} seed {seed}: none {row['median_s']['none']:.2f} s, "
                + ", ".join(f"{m} x{r['ratio']:.3f}" for m, r in row["ratios"].items())
            )
    overall = {m: paired_ratio(pooled[m], pooled["none"]) for m in modes if m != "none"}
    target = TARGETS["estimator"]
    return {
        "model_path": model_path,
        "n_estimators": n_estimators,
        "inference_precision": "float32",
        "rounds_per_case": repeats,
        "cases": per_case,
        "pooled": overall,
        "target": target,
        "met": {m: r["ci_high"] <= target for m, r in overall.items()},
        "met_point": {m: r["ratio"] <= target for m, r in overall.items()},
    }


# --------------------------------------------------------------------------- #
# Environment
# --------------------------------------------------------------------------- #


def _cpu_ticks() -> dict[int, tuple[int, str]]:
    ticks = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as f:
                stat = f.read()
            fields = stat[stat.rindex(")") + 2 :].split()
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().decode(errors="replace").split("\0")
            # Program names only: a result must not hold this machine's paths.
            cmd = " ".join(os.path.basename(a) if os.sep in a else a for a in argv if a)
            ticks[int(entry)] = (int(fields[11]) + int(fields[12]), cmd[:120])
        except (OSError, ValueError, IndexError):
            continue
    return ticks


def busy_processes(window_s: float = 1.0, min_percent: float = 5.0) -> list[dict[str, Any]]:
    """Other processes using the CPU now (sampled over ``window_s``), busiest first.

    Returns:
        ``[{"pid", "cpu_percent", "command"}]``, this process excluded; empty
        where ``/proc`` is unavailable.
    """
    if not os.path.isdir("/proc"):
        return []
    hz = os.sysconf("SC_CLK_TCK")
    first = _cpu_ticks()
    time.sleep(window_s)
    second = _cpu_ticks()
    me = os.getpid()
    busy = []
    for pid, (t1, cmd) in second.items():
        if pid == me or pid not in first:
            continue
        pct = 100.0 * (t1 - first[pid][0]) / hz / window_s
        if pct >= min_percent:
            busy.append({"pid": pid, "cpu_percent": round(pct, 1), "command": cmd})
    return sorted(busy, key=lambda r: -r["cpu_percent"])


def _environment() -> dict[str, Any]:
    env = {
        k: os.environ.get(k)
        for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OMP_WAIT_POLICY", "KMP_BLOCKTIME")
    }
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    return {"loadavg_1_5_15": load, "thread_env": env, "busy_processes": busy_processes()}


# --------------------------------------------------------------------------- #
# Report
# --------------------------------------------------------------------------- #


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
    "kernel+bias ratio",
    "OAttention / kernel+bias",
    "target",
    "met",
)


def _attention_rows(rows: list[dict[str, Any]]) -> list[list[object]]:
    """One table row per attention shape: medians, ratios to SDPA, target and verdict."""
    out = []
    for row in rows:
        kb = row["ratios"].get("kernel_with_bias")
        own = row.get("oattention_vs_kernel_with_bias")
        out.append(
            [
                tuple(row["shape"]),
                f"{row['group']} {row['label']}",
                f"{row['median_ms']['sdpa']:.2f}",
                f"{row['median_ms']['oattention']:.2f}",
                _fmt_ratio(row["ratios"]["oattention"]),
                _fmt_ratio(row["ratios"]["oattention_trusted"]),
                _fmt_ratio(kb) if kb else "—",
                _fmt_ratio(own) if own else "—",
                row["target"] if row["target"] is not None else "—",
                _mark(row.get("met")),
            ]
        )
    return out


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
        "most the target. `oattention_trusted` is the `validate=False` entry.",
        "",
    ]
    lines += _summary_lines(report)
    att = report.get("attention")
    if att:
        lines += [
            "## Attention (CPU, fp32 unless stated)",
            "",
            *markdown_table(_ATTENTION_HEADER, _attention_rows(att["rows"]), align="llrrllllrl"),
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
    mem = report.get("memory")
    if mem:
        lines += ["## Peak memory of one call (fresh process each)", ""]
        if "error" in mem:
            lines += [f"Not measured: {mem['error']}", ""]
        else:
            lines += [
                f"Shape {tuple(mem['shape'])}, {mem['runs']} runs per peer; {mem['method']}.",
                "",
                *markdown_table(
                    ("peer", "extra peak MiB (median)", "runs (MiB)", "output MiB", "inputs MiB"),
                    _memory_rows(mem["peers"]),
                    align="lrlrr",
                ),
            ]
            ratio = mem["ratio"]
            shown = "unknown (a probe read nothing)" if ratio is None else f"{ratio:.3f}"
            lines += [
                "",
                f"OAttention / SDPA extra peak: {shown} (target <= {mem['target']}: "
                f"{_mark(mem['met'])}).",
                "",
            ]
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


# --------------------------------------------------------------------------- #
# Entry point
# --------------------------------------------------------------------------- #


def run(
    out_dir: str | os.PathLike[str] = "results/bench",
    *,
    quick: bool = False,
    repeats: int | None = None,
    threads: int | None = None,
    parts: Sequence[str] = ("attention", "memory", "estimator"),
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
        parts: Any of ``"attention"``, ``"memory"``, ``"estimator"``.
        model_path: Host of the ICL shapes and the estimator part.
        estimator_repeats: Rounds per estimator case (default 5; 2 when quick).
        seed: Seed of the inputs and round orders.
        progress: Receives one line per finished measurement.

    Returns:
        The report written to ``bench.json``.
    """
    import torch

    from eval.provenance import provenance_dict
    from retrofit.files import write_json_atomic, write_text_atomic

    if threads:
        torch.set_num_threads(threads)
    unknown = set(parts) - {"attention", "memory", "estimator"}
    if unknown:
        raise ValueError(f"unknown benchmark parts: {sorted(unknown)}")
    repeats = repeats or (5 if quick else 25)
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    report: dict[str, Any] = {"quick": quick}
    env_start = _environment()
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
            "peers": ["sdpa", "oattention", "oattention_trusted", "kernel_with_bias"],
            "icl_source": source,
            "shapes": [asdict(s) for s in shapes],
            "rows": rows,
        }
    if "memory" in parts:
        shape = QUICK_MEMORY_SHAPE if quick else MEMORY_SHAPE
        try:
            report["memory"] = bench_memory(shape, runs=1 if quick else 3, threads=threads)
        except (RuntimeError, subprocess.SubprocessError) as err:
            report["memory"] = {"shape": list(shape.dims()), "error": str(err)}
        if progress:
            progress(f"memory: {report['memory']}")
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
    report["environment"] = {"start": env_start, "end": _environment()}
    report["provenance"] = provenance_dict(
        benchmark="eval.benchmarks.speed", parts=list(parts), seed=seed, targets=TARGETS
    )
    # Rendered before either file is written: a report that cannot be rendered
    # leaves no bench.json without its bench.md.
    markdown = render_markdown(report)
    out = Path(out_dir)
    write_json_atomic(out / "bench.json", report)
    write_text_atomic(out / "bench.md", markdown)
    return report


def bench_command(args: Any) -> int:
    """``python -m eval bench``: runs :func:`run` and prints one line per measurement."""
    if args.out is None:
        args.out = "results/bench/quick" if args.quick else "results/bench"
    run(
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
    return 0
