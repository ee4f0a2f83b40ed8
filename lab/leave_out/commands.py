"""``python -m lab intervals`` and ``python -m lab oof-gap``: the library's leave-out on a suite.

``intervals`` measures the coverage and width of jackknife+, CV+ and
split-conformal intervals (:mod:`~lab.leave_out.interval_coverage`);
``oof-gap`` compares ``cross_val_predict``'s modes with k refits and with
tabpfn run k times (:mod:`~lab.leave_out.oof_gap`). Both run the paper's suites'
cases (the runner's ``eval`` extra) and write under the untracked
``tabpfn-retrofit-results/`` unless ``--out`` names a folder. Building the
parsers imports nothing heavy.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from eval.extras import require_extra
from eval.locations import default_output
from eval.paper.protocol import SUITE_TASK
from retrofit.command_line import MODEL_HELP, OneLineArgumentParser, run_main
from retrofit.errors import CommandError
from retrofit.models.aliases import AUTO

__all__ = ["intervals_main", "oof_gap_main"]


def intervals_main(argv: Sequence[str] | None = None) -> int:
    """Runs ``intervals``; returns the exit status."""
    return run_main(_intervals_parser, _run_intervals, argv)


def oof_gap_main(argv: Sequence[str] | None = None) -> int:
    """Runs ``oof-gap``; returns the exit status."""
    return run_main(_oof_gap_parser, _run_oof_gap, argv)


def _intervals_parser() -> argparse.ArgumentParser:
    p = OneLineArgumentParser(
        prog="python -m lab intervals",
        description="coverage and width of jackknife+, CV+ and split-conformal intervals "
        "on a suite",
    )
    regression = sorted(s for s, task in SUITE_TASK.items() if task == "regression")
    p.add_argument("--suite", default="offline18", choices=regression)
    p.add_argument("--model", default=AUTO, metavar="MODEL", help=MODEL_HELP)
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
    return p


def _run_intervals(args: argparse.Namespace) -> int:
    require_extra("eval", needed_by="this command")
    from lab.leave_out.interval_coverage import interval_coverage
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


def _oof_gap_parser() -> argparse.ArgumentParser:
    p = OneLineArgumentParser(
        prog="python -m lab oof-gap",
        description="out-of-fold predictions on a suite: transductive and per-fold "
        "cross_val_predict against k refits and tabpfn run k times",
    )
    p.add_argument("--suite", default="offline18", choices=sorted(SUITE_TASK))
    p.add_argument("--model", default=AUTO, metavar="MODEL", help=MODEL_HELP)
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
    return p


def _run_oof_gap(args: argparse.Namespace) -> int:
    require_extra("eval", needed_by="this command")
    from lab.leave_out.oof_gap import oof_gap
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
