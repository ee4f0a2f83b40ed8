"""``python -m lab bench``: OAttention against plain attention, and the library's speed.

The command line of :mod:`lab.benchmarks`: without a mode flag it runs
:mod:`~lab.benchmarks.speed` (attention time, peak memory, fit + predict per
mode, the fit loop, chunks), ``--batched`` :mod:`~lab.benchmarks.batched`
(ragged batches against the per-dataset loops) and ``--leave-out``
:mod:`~lab.benchmarks.leave_out` (out-of-fold prediction against scikit-learn's
k refits) and ``--weights`` :mod:`~lab.benchmarks.weights` (bootstrap replicates
against refits on the resampled rows, a weighted fit against an unweighted one).
Each writes under the untracked ``tabpfn-retrofit-results/`` unless
``--out`` names a folder (``.ci/regenerate-results`` names ``results/``).
Building the parser imports nothing heavy.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from eval.locations import default_output
from lab.benchmarks import BENCH_PARTS, DEFAULT_BATCHED_SIZES
from retrofit.command_line import OneLineArgumentParser, run_main
from retrofit.errors import CommandError
from retrofit.models.aliases import AUTO, alias_list

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Runs ``bench``; returns the exit status."""
    return run_main(_parser, _run, argv)


def _parser() -> argparse.ArgumentParser:
    p = OneLineArgumentParser(
        prog="python -m lab bench",
        description="OAttention vs plain SDPA: time, peak memory, fit+predict per mode (--batched: "
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
    p.add_argument(
        "--weights-fresh-processes",
        action="store_true",
        help="also time the bootstrap's peers with each call in a fresh process of its own "
        "(one process per round and peer: minutes more)",
    )
    return p


def _run(args: argparse.Namespace) -> int:
    from lab.benchmarks.batched import bench_batched_command
    from lab.benchmarks.leave_out import bench_leave_out_command
    from lab.benchmarks.speed import bench_command
    from lab.benchmarks.weights import bench_weights_command
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
