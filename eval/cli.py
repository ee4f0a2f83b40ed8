"""The command line: ``python -m eval <subcommand>`` (console script ``tabpfn-retrofit``).

Each subcommand is one small ``_add_<name>(subparsers)`` function that
registers its parser and sets ``handler``; the handler imports its heavy
module lazily, so ``--help`` and unrelated subcommands stay fast. To add a
subcommand, write its ``_add_`` function and append it to ``SUBCOMMANDS``.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence

from eval import commands
from retrofit import cli_batch

__all__ = ["SUBCOMMANDS", "build_parser", "main"]


def _add_exactness(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "exactness",
        help="operator exactness of OAttention vs float64 and same-dtype direct evaluation",
    )
    p.add_argument("--out", default="results/exactness", help="output directory")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quick", action="store_true", help="small lengths (tests, smoke runs)")
    p.add_argument(
        "--lengths", type=int, nargs="+", default=None, help="sequence lengths (overrides default)"
    )
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: keep)")
    p.set_defaults(handler=_run_exactness)


def _run_exactness(args: argparse.Namespace) -> int:
    from eval import exactness

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
    p.add_argument("--out", default="results/ablation", help="output directory")
    p.add_argument("--seed", type=int, default=0, help="first seed; seeds are seed..seed+n-1")
    p.add_argument("--quick", action="store_true", help="fewer seeds and scales (tests)")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: keep)")
    p.set_defaults(handler=_run_ablation)


def _run_ablation(args: argparse.Namespace) -> int:
    from eval import ablation

    ablation.run(out_dir=args.out, seed=args.seed, quick=args.quick, threads=args.threads)
    print(f"wrote {args.out}/ablation.json and ablation.md")
    return 0


def _add_eval(sub: argparse._SubParsersAction) -> None:
    from eval.runner import add_eval_arguments

    p = sub.add_parser(
        "eval",
        help="run the dataset-seed cases: unpatched host vs OAttention and Full-O retrofits",
    )
    add_eval_arguments(p)
    p.set_defaults(handler=_run_eval)


def _run_eval(args: argparse.Namespace) -> int:
    from eval.runner import eval_command

    return eval_command(args)


def _add_report(sub: argparse._SubParsersAction) -> None:
    from eval.report import add_report_arguments

    p = sub.add_parser("report", help="cases.csv, summary.md and figures from stored eval runs")
    add_report_arguments(p)
    p.set_defaults(handler=_run_report)


def _run_report(args: argparse.Namespace) -> int:
    from eval.report import report_command

    return report_command(args)


def _add_bench(sub: argparse._SubParsersAction) -> None:
    from eval.bench import add_bench_arguments
    from eval.bench_batched import add_batched_arguments

    p = sub.add_parser(
        "bench", help="OAttention vs plain SDPA: time, peak memory, fit+predict per mode"
    )
    add_bench_arguments(p)
    add_batched_arguments(p)  # --batched: eval/bench_batched.py
    p.set_defaults(handler=_run_bench)


def _run_bench(args: argparse.Namespace) -> int:
    from eval.bench import bench_command
    from eval.bench_batched import bench_batched_command

    if args.batched:
        return bench_batched_command(args)
    return bench_command(args)


SUBCOMMANDS: list[Callable[[argparse._SubParsersAction], None]] = [
    commands.add_subcommands,  # predict, patch (the one-command retrofit)
    _add_exactness,
    _add_ablation,
    _add_eval,
    _add_report,
    _add_bench,
    cli_batch.add_parser,  # predict-batch
]


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with every registered subcommand."""
    parser = argparse.ArgumentParser(
        prog="tabpfn-retrofit",
        description="tabpfn-retrofit: O-closed TabPFN, its reports and evaluations.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for add in SUBCOMMANDS:
        add(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command line; returns the process exit status."""
    args = build_parser().parse_args(argv)
    return int(args.handler(args))
