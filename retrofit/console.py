"""What every command of the project shares: one-line errors and exit codes.

Every ``tabpfn-retrofit`` subcommand and every ``python -m`` entry point runs
through :func:`run_command`: a user error is one line on stderr (``PROG
COMMAND: error: MESSAGE``) and exit status 2, argparse's own errors included
(:class:`OneLineArgumentParser`); Ctrl-C is one line and 130. Set
``TABPFN_RETROFIT_DEBUG=1`` to get the traceback instead.

This module imports nothing heavy, so building a parser stays fast.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

from retrofit.errors import CommandError

__all__ = [
    "EXIT_ERROR",
    "EXIT_INTERRUPTED",
    "PROG",
    "OneLineArgumentParser",
    "one_line",
    "run_command",
    "run_main",
    "status",
]

PROG = "tabpfn-retrofit"
EXIT_ERROR = 2
EXIT_INTERRUPTED = 130


def one_line(message: object) -> str:
    """``message`` with every run of whitespace, newlines included, as one space."""
    return " ".join(str(message).split())


def _print_error(command: str, message: str) -> None:
    print(f"{command}: error: {message}", file=sys.stderr, flush=True)


class OneLineArgumentParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose usage errors are one line (and exit 2)."""

    def error(self, message: str) -> NoReturn:
        """Prints ``PROG: error: MESSAGE (see PROG --help)`` and exits 2."""
        _print_error(self.prog, f"{one_line(message)} (see '{self.prog} --help')")
        raise SystemExit(EXIT_ERROR)


def run_command(command: str, body: Callable[[], int]) -> int:
    """Runs ``body`` and turns any failure into one line on stderr.

    Args:
        command: How to name the command in the message (``"tabpfn-retrofit predict"``).
        body: The command; returns its exit status.

    Returns:
        ``body``'s status, :data:`EXIT_ERROR` on an error, :data:`EXIT_INTERRUPTED`
        on Ctrl-C.
    """
    try:
        return int(body())
    except KeyboardInterrupt:
        print(f"{command}: interrupted", file=sys.stderr, flush=True)
        return EXIT_INTERRUPTED
    except CommandError as exc:
        message = one_line(exc)
    except Exception as exc:  # every failure is one line, typed errors by name
        if os.environ.get("TABPFN_RETROFIT_DEBUG"):
            raise
        message = f"{type(exc).__name__}: {one_line(exc)}"
    _print_error(command, message)
    return EXIT_ERROR


def run_main(
    build_parser: Callable[[], argparse.ArgumentParser],
    handler: Callable[[argparse.Namespace], int],
    argv: Sequence[str] | None = None,
) -> int:
    """Parses ``argv`` and runs ``handler`` under :func:`run_command`.

    The shared body of every ``python -m`` entry point's ``main``; ``build_parser``
    should return an :class:`OneLineArgumentParser`.
    """
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:
        return int(exit_.code or 0)
    return run_command(parser.prog, lambda: handler(args))


def status(args: argparse.Namespace, message: str) -> None:
    """A progress line on stderr, unless the command was given ``--quiet``."""
    if not getattr(args, "quiet", False):
        print(f"[{PROG}] {message}", file=sys.stderr, flush=True)
