"""The paper's commands on the console script ``tabpfn-retrofit``.

:func:`add_subcommands` registers ``exactness``, ``ablation``, ``eval`` and
``report`` (the lab's measurements run from a checkout: ``python -m lab``);
``pyproject.toml`` declares it in the
``tabpfn_retrofit.commands`` entry-point group, through which the library's
console script finds it without importing eval.
:func:`main` (``python -m eval``) runs the same parser from the library's and
eval's groups directly, so it works from a checkout that is not installed.
Each subcommand is one small ``_add_<name>(subparsers)`` function that
registers its parser and sets ``handler``; the handler imports its heavy
module when it runs, so ``--help`` imports neither tabpfn nor pandas; ``eval``
and ``report`` first check that the runner's dependencies (the ``eval``
extra: :mod:`eval.extras`) are installed. Every handler runs under
:func:`retrofit.command_line.run_command` (one line on stderr and exit 2 on an
error). To add a subcommand, write its ``_add_`` function and append it to
``SUBCOMMANDS``.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

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
from retrofit import command_line as retrofit_cli
from retrofit.errors import CommandError
from retrofit.models.aliases import AUTO
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


SUBCOMMANDS: list[retrofit_cli.CommandGroup] = [
    _add_exactness,
    _add_ablation,
    _add_eval,
    _add_report,
]


def add_subcommands(sub: argparse._SubParsersAction) -> None:
    """Registers the runner's subcommands (the ``tabpfn_retrofit.commands`` entry point)."""
    for add in SUBCOMMANDS:
        add(sub)


#: The library's commands (predict, predict-batch, patch), then the runner's.
_GROUPS: tuple[retrofit_cli.CommandGroup, ...] = (retrofit_cli.library_commands, add_subcommands)


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with the library's and the runner's subcommands."""
    return retrofit_cli.build_parser(_GROUPS)


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command line (``python -m eval``); returns the process exit status."""
    return retrofit_cli.main(argv, _GROUPS)
