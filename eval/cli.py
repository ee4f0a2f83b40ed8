"""The evaluation runner's commands on the console script ``tabpfn-retrofit``.

:func:`add_subcommands` registers ``exactness``, ``ablation``, ``eval``,
``report``, ``bench``, ``intervals`` and ``oof-gap``; ``pyproject.toml`` declares it in the
``tabpfn_retrofit.commands`` entry-point group, through which the library's
console (:mod:`retrofit.cli.program`) finds it without importing eval.
:func:`main` (``python -m eval``) runs the same parser from the library's and
eval's groups directly, so it works from a checkout that is not installed.
Each subcommand is one small ``_add_<name>(subparsers)`` function that
registers its parser and sets ``handler``; the handler imports its heavy
module when it runs, so ``--help`` imports neither tabpfn nor pandas; ``eval``
and ``report`` first check that the runner's dependencies (the ``eval``
extra: :mod:`eval.extras`) are installed. Every handler runs under
:func:`retrofit.cli.console.run_command` (one line on stderr and exit 2 on an
error). To add a subcommand, write its ``_add_`` function and append it to
``SUBCOMMANDS``.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from eval.benchmarks import BENCH_PARTS, DEFAULT_BATCHED_SIZES
from eval.extras import require_extra
from eval.locations import DEFAULT_OUTPUT_ROOT, default_output
from eval.paper.executors import DEFAULT_CONNECT_TIMEOUT_S, EXECUTORS
from eval.paper.protocol import (
    DEFAULT_EPS_DEN,
    DEFAULT_MODES,
    DEFAULT_SUPPORT,
    SUITE_SOURCE,
    SUITE_TASK,
    SWEEP_TAUS,
)
from retrofit.cli import commands as retrofit_cli
from retrofit.cli import program
from retrofit.errors import CommandError
from retrofit.models.aliases import AUTO, alias_list
from retrofit.settings import MODES

__all__ = ["SUBCOMMANDS", "add_subcommands", "build_parser", "main"]


# A user's command never writes the committed results/ (``.ci/regenerate-results``
# names those paths); every default output is under eval.locations' untracked folder.
_STORE_HELP = f"run store and report folder (default {DEFAULT_OUTPUT_ROOT}/SUITE)"
_COMMITTED_HELP = (
    "the committed store, only read (default: the checkout's results/SUITE; 'none': no "
    "committed store): report compares its table with this one, eval --reuse-committed "
    "copies its runs of the same key"
)


def _quick_out_help(name: str) -> str:
    return (
        f"output directory (default {default_output(name)}; {default_output(name, quick=True)} "
        "with --quick, so a smoke run never overwrites a full run; results/ only if named)"
    )


def _add_exactness(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "exactness",
        help="operator exactness of OAttention vs float64 and same-dtype direct evaluation",
    )
    p.add_argument("--out", default=None, help=_quick_out_help("exactness"))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quick", action="store_true", help="small lengths (tests, smoke runs)")
    p.add_argument(
        "--lengths", type=int, nargs="+", default=None, help="sequence lengths (overrides default)"
    )
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: keep)")
    p.set_defaults(handler=_run_exactness)


def _run_exactness(args: argparse.Namespace) -> int:
    from eval.operators import exactness

    bad = [n for n in args.lengths or () if n < 1]
    if bad:  # else torch's bare IndexError on an empty reduction
        raise CommandError(f"--lengths must be >= 1, got {' '.join(map(str, bad))}")
    args.out = args.out or str(default_output("exactness", quick=args.quick))
    report = exactness.run(
        out_dir=args.out,
        seed=args.seed,
        quick=args.quick,
        lengths=args.lengths,
        threads=args.threads,
    )
    print(f"wrote {args.out}/exactness.json and exactness.md")
    return 0 if report["all_contracts_pass"] else 1


def _add_ablation(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "ablation",
        help="two-block null-token ablation: standard vs OA-only vs OTransformer",
    )
    p.add_argument("--out", default=None, help=_quick_out_help("ablation"))
    p.add_argument("--seed", type=int, default=0, help="first seed; seeds are seed..seed+n-1")
    p.add_argument("--quick", action="store_true", help="fewer seeds and scales (tests)")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: keep)")
    p.set_defaults(handler=_run_ablation)


def _run_ablation(args: argparse.Namespace) -> int:
    from eval.operators import ablation

    args.out = args.out or str(default_output("ablation", quick=args.quick))
    ablation.run(out_dir=args.out, seed=args.seed, quick=args.quick, threads=args.threads)
    print(f"wrote {args.out}/ablation.json and ablation.md")
    return 0


def _add_eval(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "eval",
        help="run the dataset-seed cases: unpatched host vs OAttention and Full-O retrofits",
    )
    p.add_argument("--suite", default="offline18", choices=sorted(SUITE_SOURCE))
    p.add_argument(
        "--model",
        default=AUTO,
        metavar="MODEL",
        help=retrofit_cli.MODEL_HELP,
    )
    p.add_argument("--modes", nargs="+", default=list(DEFAULT_MODES), choices=MODES)
    p.add_argument(
        "--tau",
        nargs="+",
        type=float,
        default=None,
        help=f"presence scale(s) (default as in the library: {retrofit_cli.TAU_DEFAULT_HELP})",
    )
    p.add_argument(
        "--sweep",
        action="store_true",
        help=f"also run taus {', '.join(f'{t:g}' for t in SWEEP_TAUS)} and measure carrier norms",
    )
    p.add_argument("--support", default=DEFAULT_SUPPORT, help="n_eff rule of the retrofits")
    p.add_argument("--eps-den", type=float, default=DEFAULT_EPS_DEN)
    p.add_argument(
        "--n-estimators", type=int, default=None, help="default: the checkpoint's config"
    )
    p.add_argument("--device", default="cpu")
    p.add_argument("--datasets", nargs="+", default=None, help="subset of the suite")
    p.add_argument("--seeds", nargs="+", type=int, default=None, help="subset of seeds")
    p.add_argument("--max-train-rows", type=int, default=None, help="(smoke runs only)")
    p.add_argument("--max-test-rows", type=int, default=None, help="(smoke runs only)")
    p.add_argument("--jobs", type=int, default=1, help="parallel workers")
    p.add_argument("--executor", default=None, choices=EXECUTORS,
                        help="default: serial, or joblib when --jobs > 1")  # fmt: skip
    p.add_argument("--address", default=None, help="dask scheduler address")
    p.add_argument("--connect-timeout", type=float, default=DEFAULT_CONNECT_TIMEOUT_S,
                   help="seconds to wait for --address")  # fmt: skip
    p.add_argument("--threads", type=int, default=None,
                   help="torch threads per case (default: serial and dask this "
                   "process's count, so the same numbers; joblib cores/jobs)")  # fmt: skip
    p.add_argument("--store", default=None, help=_STORE_HELP)
    p.add_argument(
        "--reuse-committed",
        action="store_true",
        help="copy the runs the committed store holds under the same key instead of computing "
        "them (default: compute every run the store lacks)",
    )
    p.add_argument("--committed", default=None, help=_COMMITTED_HELP)
    p.add_argument("--retry-failed", action="store_true", help="recompute failed runs")
    p.add_argument(
        "--ignore-pretraining-limits",
        action="store_true",
        help="let tabpfn exceed its size limits (e.g. real weights on CPU, >1000 rows)",
    )
    p.add_argument("--carriers", action="store_true", help="(re)measure carrier norms")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(handler=_run_eval)


def _run_eval(args: argparse.Namespace) -> int:
    require_extra("eval", needed_by="this command")
    from eval.paper.command import eval_command

    return eval_command(args)


def _add_report(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("report", help="cases.csv, summary.md and figures from stored eval runs")
    p.add_argument("--suite", default="offline18", choices=sorted(SUITE_SOURCE))
    p.add_argument("--store", default=None, help=_STORE_HELP)
    p.add_argument("--out", default=None, help="where to write (default: the store)")
    p.add_argument("--committed", default=None, help=_COMMITTED_HELP)
    p.add_argument(
        "--tau",
        type=float,
        default=None,
        help="tau of the main table (default: the host's default, recorded by eval)",
    )
    p.add_argument("--checkpoint", default=None, help="SHA-256 prefix to report")
    p.add_argument(
        "--partial",
        action="store_true",
        help="report a store that lacks some of the suite's planned runs (they are named); "
        "without it such a store is refused (exit 2) and nothing is written",
    )
    p.set_defaults(handler=_run_report)


def _run_report(args: argparse.Namespace) -> int:
    require_extra("eval", needed_by="this command")
    if SUITE_TASK[args.suite] == "classification":
        from eval.paper.classification_report import classification_report_command

        return classification_report_command(args)
    from eval.paper.report import report_command

    return report_command(args)


def _add_bench(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "bench",
        help="OAttention vs plain SDPA: time, peak memory, fit+predict per mode (--batched: "
        "ragged batches; --leave-out: out-of-fold prediction; --weights: bootstrap replicates "
        "and weighted fits)",
    )
    p.add_argument(
        "--out",
        default=None,
        help=f"output directory (default {default_output('bench')}; "
        f"{default_output('bench', quick=True)} with --quick, so a smoke run never overwrites "
        "a measurement; with --batched bench_batched instead of bench)",
    )
    p.add_argument("--quick", action="store_true", help="tiny shapes, few rounds (smoke run)")
    p.add_argument("--repeats", type=int, default=None, help="rounds per shape (default 25)")
    p.add_argument(
        "--estimator-repeats", type=int, default=None, help="rounds per estimator case (default 5)"
    )
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: keep)")
    p.add_argument(
        "--parts",
        nargs="+",
        choices=BENCH_PARTS,
        default=list(BENCH_PARTS),
        help="which parts to run",
    )
    p.add_argument(
        "--model",
        default=AUTO,
        metavar="MODEL",
        help="host of the ICL shapes and estimator part: a version alias "
        f"({alias_list(auto=True)}; default auto, tabpfn's own default), 'embedded' (the "
        "small stand-in shipped with this package, offline) or a checkpoint file",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--batched",
        action="store_true",
        help="benchmark ragged batched prediction instead (writes "
        f"{default_output('bench_batched')} unless --out is given)",
    )
    p.add_argument(
        "--batched-sizes",
        type=int,
        nargs="+",
        default=list(DEFAULT_BATCHED_SIZES),
        metavar="N",
        help=f"numbers of datasets (default {' '.join(map(str, DEFAULT_BATCHED_SIZES))})",
    )
    p.add_argument(
        "--batched-rows",
        type=int,
        nargs=2,
        default=[50, 500],
        metavar=("MIN", "MAX"),
        help="train rows per dataset (default 50 500, sized for a small CPU; 50 2000 on a GPU)",
    )
    p.add_argument(
        "--batched-repeats", type=int, default=3, help="timed rounds per size (default 3)"
    )
    p.add_argument("--device", default="cpu", help="torch device of --batched (default cpu)")
    p.add_argument(
        "--leave-out",
        action="store_true",
        help="benchmark out-of-fold prediction against scikit-learn's k refits instead "
        f"(writes {default_output('bench_leave_out')} unless --out is given)",
    )
    p.add_argument(
        "--leave-out-rows",
        type=int,
        nargs="+",
        default=[200, 500, 1000],
        metavar="N",
        help="train rows of the k-fold cases (default 200 500 1000)",
    )
    p.add_argument(
        "--leave-out-folds",
        type=int,
        nargs="+",
        default=[5, 10],
        metavar="K",
        help="k of the k-fold cases (default 5 10)",
    )
    p.add_argument(
        "--leave-out-loo-rows",
        type=int,
        default=200,
        metavar="N",
        help="train rows of the leave-one-out case (default 200; 0: none)",
    )
    p.add_argument(
        "--leave-out-repeats", type=int, default=3, help="timed rounds per case (default 3)"
    )
    p.add_argument(
        "--weights",
        action="store_true",
        help="benchmark row weights instead: bootstrap_predict against R refits on the "
        "resampled rows, and a weighted fit+predict against an unweighted one (writes "
        f"{default_output('bench_weights')} unless --out is given)",
    )
    p.add_argument(
        "--weights-rows",
        type=int,
        nargs="+",
        default=[500],
        metavar="N",
        help="train rows of the bootstrap cases (default 500)",
    )
    p.add_argument(
        "--weights-replicates",
        type=int,
        default=16,
        metavar="R",
        help="bootstrap replicates per case (default 16)",
    )
    p.add_argument(
        "--weights-test-rows",
        type=int,
        default=100,
        metavar="Q",
        help="test rows every case predicts (default 100)",
    )
    p.add_argument(
        "--weights-fit-rows",
        type=int,
        nargs="+",
        default=[200, 500],
        metavar="N",
        help="train rows of the weighted-fit cases (default 200 500)",
    )
    p.add_argument(
        "--weights-repeats", type=int, default=5, help="timed rounds per case (default 5)"
    )
    p.set_defaults(handler=_run_bench)


def _run_bench(args: argparse.Namespace) -> int:
    from eval.benchmarks.batched import bench_batched_command
    from eval.benchmarks.leave_out import bench_leave_out_command
    from eval.benchmarks.speed import bench_command
    from eval.benchmarks.weights import bench_weights_command
    from retrofit.models.loading import resolve_model

    chosen = [name for name in ("batched", "leave_out", "weights") if getattr(args, name)]
    if len(chosen) > 1:  # a usage error, whatever the model
        flags = " or ".join(f"--{name.replace('_', '-')}" for name in chosen)
        raise CommandError(f"bench: give {flags}, not both")
    # Before any work: an unknown alias or a missing file is one line naming the
    # known aliases (exit 2), never a report whose every host part reads "Not measured".
    _ = resolve_model(args.model).checkpoint  # raises where no file stands behind the name
    if args.leave_out:
        return bench_leave_out_command(args)
    if args.weights:
        return bench_weights_command(args)
    if args.batched:
        return bench_batched_command(args)
    return bench_command(args)


def _add_intervals(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "intervals",
        help="coverage and width of jackknife+, CV+ and split-conformal intervals on a suite",
    )
    regression = sorted(s for s, task in SUITE_TASK.items() if task == "regression")
    p.add_argument("--suite", default="offline18", choices=regression)
    p.add_argument("--model", default=AUTO, metavar="MODEL", help=retrofit_cli.MODEL_HELP)
    p.add_argument("--alpha", type=float, default=0.1, help="miscoverage level (default 0.1)")
    p.add_argument("--folds", type=int, default=10, help="K of CV+ (default 10)")
    p.add_argument(
        "--max-train-rows",
        type=int,
        default=100,
        help="train rows kept per case, a seeded prefix (default 100: leave-one-out fits "
        "one fold per row; 0: all)",
    )
    p.add_argument(
        "--max-test-rows",
        type=int,
        default=250,
        help="test rows kept per case (default 250; 0: all)",
    )
    p.add_argument("--n-estimators", type=int, default=None, help="default: the checkpoint's")
    p.add_argument("--datasets", nargs="+", default=None, help="subset of the suite")
    p.add_argument("--seeds", nargs="+", type=int, default=None, help="subset of seeds")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: keep)")
    p.add_argument(
        "--out",
        default=None,
        help=f"output directory (default {default_output('leave_out')}; results/ only if named)",
    )
    p.set_defaults(handler=_run_intervals)


def _run_intervals(args: argparse.Namespace) -> int:
    require_extra("eval", needed_by="this command")
    from eval.paper.interval_coverage import interval_coverage
    from retrofit.models.loading import resolve_model

    _ = resolve_model(args.model).checkpoint  # an unknown alias is one line before any work
    if not 0 < args.alpha < 1:
        raise CommandError(f"--alpha must be in (0, 1), got {args.alpha:g}")
    if args.folds < 2:
        raise CommandError(f"--folds must be >= 2, got {args.folds}")
    out = args.out or str(default_output("leave_out"))
    report = interval_coverage(
        out,
        suite=args.suite,
        model_path=args.model,
        alpha=args.alpha,
        folds=args.folds,
        max_train_rows=args.max_train_rows or None,
        max_test_rows=args.max_test_rows or None,
        n_estimators=args.n_estimators or "auto",
        datasets=args.datasets,
        seeds=args.seeds,
        threads=args.threads,
        progress=lambda line: print(line, flush=True),
    )
    print(f"wrote {out}/interval_coverage.json and interval_coverage.md")
    return 1 if report["summary"]["failed"] else 0


def _add_oof_gap(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "oof-gap",
        help="out-of-fold predictions on a suite: transductive and per-fold cross_val_predict "
        "against k refits and tabpfn run k times",
    )
    p.add_argument("--suite", default="offline18", choices=sorted(SUITE_TASK))
    p.add_argument("--model", default=AUTO, metavar="MODEL", help=retrofit_cli.MODEL_HELP)
    p.add_argument("--folds", type=int, default=5, help="k of the splitter (default 5)")
    p.add_argument(
        "--max-train-rows",
        type=int,
        default=0,
        help="train rows kept per case, a seeded prefix (default 0: all)",
    )
    p.add_argument("--n-estimators", type=int, default=None, help="default: the checkpoint's")
    p.add_argument("--datasets", nargs="+", default=None, help="subset of the suite")
    p.add_argument("--seeds", nargs="+", type=int, default=None, help="subset of seeds")
    p.add_argument("--cases", type=int, default=None, help="at most this many cases (default all)")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: keep)")
    p.add_argument(
        "--out",
        default=None,
        help=f"output directory (default {default_output('oof_gap')}; results/ only if named)",
    )
    p.set_defaults(handler=_run_oof_gap)


def _run_oof_gap(args: argparse.Namespace) -> int:
    require_extra("eval", needed_by="this command")
    from eval.paper.oof_gap import oof_gap
    from retrofit.models.loading import resolve_model

    _ = resolve_model(args.model).checkpoint  # an unknown alias is one line before any work
    if args.folds < 2:
        raise CommandError(f"--folds must be >= 2, got {args.folds}")
    if args.cases is not None and args.cases < 1:
        raise CommandError(f"--cases must be >= 1, got {args.cases}")
    out = args.out or str(default_output("oof_gap"))
    report = oof_gap(
        out,
        suite=args.suite,
        model_path=args.model,
        folds=args.folds,
        max_train_rows=args.max_train_rows or None,
        n_estimators=args.n_estimators or "auto",
        datasets=args.datasets,
        seeds=args.seeds,
        max_cases=args.cases,
        threads=args.threads,
        progress=lambda line: print(line, flush=True),
    )
    print(f"wrote {out}/oof_gap.json and oof_gap.md")
    return 1 if report["summary"]["failed"] else 0


SUBCOMMANDS: list[program.CommandGroup] = [
    _add_exactness,
    _add_ablation,
    _add_eval,
    _add_report,
    _add_bench,
    _add_intervals,
    _add_oof_gap,
]


def add_subcommands(sub: argparse._SubParsersAction) -> None:
    """Registers the runner's subcommands (the ``tabpfn_retrofit.commands`` entry point)."""
    for add in SUBCOMMANDS:
        add(sub)


#: The library's commands (predict, predict-batch, patch), then the runner's.
_GROUPS: tuple[program.CommandGroup, ...] = (retrofit_cli.add_subcommands, add_subcommands)


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with the library's and the runner's subcommands."""
    return program.build_parser(_GROUPS)


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command line (``python -m eval``); returns the process exit status."""
    return program.main(argv, _GROUPS)
