"""The lab's commands: ``python -m lab COMMAND [OPTIONS]``, run from a checkout.

The project's own measurements stand apart from the console script
``tabpfn-retrofit`` (the library's commands and the paper's). Each command is a
function ``main(argv)`` of the lab module that does the work: it parses its own
options (``python -m lab COMMAND --help``) and runs under
:func:`retrofit.command_line.run_main`, so an error is one line on stderr and
exit status 2, as on the console script. Only the chosen command's module is
imported: ``python -m lab --help`` imports nothing heavy. To add a command,
give its module a ``main`` and add a line to :data:`COMMANDS`.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from retrofit.command_line import OneLineArgumentParser

__all__ = ["COMMANDS", "PROG", "build_parser", "main"]

#: How the lab is run; each command's parser is named ``PROG COMMAND``.
PROG = "python -m lab"

#: Each command: the ``module:function`` that runs it on its arguments, and one line of help.
COMMANDS: dict[str, tuple[str, str]] = {
    "bench": (
        "lab.benchmarks.command:main",
        "OAttention vs SDPA: time, memory, fit+predict (--batched, --leave-out, --weights)",
    ),
    "intervals": (
        "lab.leave_out.commands:intervals_main",
        "coverage and width of jackknife+, CV+ and split-conformal intervals on a suite",
    ),
    "oof-gap": (
        "lab.leave_out.commands:oof_gap_main",
        "out-of-fold predictions on a suite against k refits and tabpfn run k times",
    ),
    "calibration": (
        "lab.calibration:main",
        "carrier scale and active-path movement per host class (the default tau)",
    ),
    "gpu-check": (
        "lab.device_checks.gpu_check:main",
        "OAttention's exactness, the null-row proof and speed on a CUDA device",
    ),
    "step-cost": (
        "lab.step_cost:main",
        "CPU seconds of one training step of each host class and size",
    ),
}


def build_parser() -> argparse.ArgumentParser:
    """The lab's top-level parser: a command and the arguments it is handed."""
    width = max(map(len, COMMANDS))
    listing = "\n".join(f"  {name:<{width}}  {text}" for name, (_, text) in COMMANDS.items())
    parser = OneLineArgumentParser(
        prog=PROG,
        description="The project measuring itself, run from a checkout.",
        epilog=f"commands:\n{listing}\n\n'{PROG} COMMAND --help' gives a command's options.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("command", choices=list(COMMANDS), metavar="COMMAND")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="the command's options")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Runs one lab command (``python -m lab``); returns the process exit status."""
    parser = build_parser()
    words = list(sys.argv[1:] if argv is None else argv)
    try:
        if not words:  # argparse would also ask for the arguments a command takes
            parser.error(f"give a COMMAND: {', '.join(COMMANDS)}")
        args = parser.parse_args(words)
    except SystemExit as exit_:  # --help (0) or a usage error, printed on one line (2)
        return int(exit_.code or 0)
    module, function = COMMANDS[args.command][0].split(":")
    return getattr(importlib.import_module(module), function)(args.args)
