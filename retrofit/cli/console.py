"""What every command of the project shares: one-line errors and exit codes.

Every ``tabpfn-retrofit`` subcommand and every ``python -m`` entry point runs
through :func:`run_command`: a user error is one line on stderr (``PROG
COMMAND: error: MESSAGE``) and exit status 2, argparse's own errors included
(:class:`OneLineArgumentParser`); Ctrl-C is one line and 130. While a
command runs, the project's own warnings
(:class:`~retrofit.errors.RetrofitWarning`) and tabpfn's (its CPU row guard,
free-text columns taken as categoricals: what a user of tabpfn would see) are
one line each, ``PROG COMMAND: warning: MESSAGE`` (tabpfn's prefixed
``tabpfn:``); the other libraries stay quiet: their warnings (torch,
scikit-learn, tabpfn's deprecations, which speak of Python arguments) and log
records (tabpfn's and Hugging Face's download retries) are not printed.
tabpfn's refusals that name its Python argument ``ignore_pretraining_limits``
name the option ``--ignore-pretraining-limits`` instead
(:func:`pretraining_limit_error`). ANSI escapes are stripped from every
message. Set ``TABPFN_RETROFIT_DEBUG=1`` to get the tracebacks, warnings and
logs instead.

This module imports nothing heavy, so building a parser stays fast.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import re
import sys
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NoReturn, TextIO

from retrofit.errors import CommandError, RetrofitWarning

__all__ = [
    "EXIT_ERROR",
    "EXIT_INTERRUPTED",
    "PRECISIONS",
    "PROG",
    "OneLineArgumentParser",
    "naming_limit_option",
    "one_line",
    "parse_precision",
    "pretraining_limit_error",
    "quiet_libraries",
    "run_command",
    "run_main",
    "status",
    "strip_ansi",
]

PROG = "tabpfn-retrofit"
EXIT_ERROR = 2
EXIT_INTERRUPTED = 130
#: The ``--precision`` names: tabpfn's "auto", or a fixed dtype.
PRECISIONS: tuple[str, ...] = ("auto", "float32", "float64")


# CSI sequences (colours, cursor moves), OSC sequences (titles, links) and other
# two-character escapes, as terminals and rich/colorama-style libraries emit them.
_ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-Z\\-_])")


def strip_ansi(text: str) -> str:
    """``text`` without ANSI escape sequences."""
    return _ANSI.sub("", text)


def one_line(message: object) -> str:
    """``message`` without ANSI escapes and with every run of whitespace as one space."""
    return " ".join(strip_ansi(str(message)).split())


def _debug() -> bool:
    return bool(os.environ.get("TABPFN_RETROFIT_DEBUG"))


#: Warnings for developers, not for a command's user: they name Python arguments.
_DEVELOPER_WARNINGS = (DeprecationWarning, PendingDeprecationWarning, FutureWarning)


def _from_tabpfn(filename: str) -> bool:
    """Whether a warning was issued from tabpfn's own code (its package folder)."""
    tabpfn = sys.modules.get("tabpfn")
    location = getattr(tabpfn, "__file__", None)
    if not location:
        return False
    root = os.path.dirname(os.path.abspath(location))
    return os.path.abspath(filename).startswith(root + os.sep)


def pretraining_limit_error(err: BaseException) -> CommandError | None:
    """Tabpfn's refusal of a size beyond its limits, naming the command's option; else None.

    tabpfn refuses more rows or features than its models were pretrained on,
    and on a CPU more train rows than its guard allows (5,000 from v3 on),
    with a message that names its Python argument ``ignore_pretraining_limits``;
    a command's user gives ``--ignore-pretraining-limits``.
    """
    text = one_line(err)
    if "ignore_pretraining_limits" not in text:
        return None
    first = text.split(". ")[0].rstrip(".").replace("`", "")
    way_out = "give --ignore-pretraining-limits to run it anyway"
    if "CPU" in first:
        way_out += ", or run on a GPU (--device cuda)"
    return CommandError(f"{first}; {way_out}")


def naming_limit_option(body: Callable[[], int]) -> int:
    """Runs ``body``; tabpfn's size refusals come out naming ``--ignore-pretraining-limits``.

    For the commands that have that option (``predict``, ``predict-batch``).
    """
    try:
        return body()
    except CommandError:
        raise
    except Exception as err:
        translated = pretraining_limit_error(err)
        if translated is None:
            raise
        raise translated from err


@contextlib.contextmanager
def quiet_libraries(command: str, stream: TextIO | None = None) -> Iterator[None]:
    """Keeps third-party warnings and log records off stderr while a command runs.

    A :class:`~retrofit.errors.RetrofitWarning`, and a warning of tabpfn's own
    code but for its deprecations, is printed as one line (each distinct
    message once); every other warning and every log record is dropped.
    Nothing is changed when ``TABPFN_RETROFIT_DEBUG`` is set.

    Args:
        command: How to name the command in a warning line.
        stream: Where warning lines go (default: ``sys.stderr`` at the time).
    """
    if _debug():
        yield
        return
    shown: set[str] = set()

    def show(message, category, filename, lineno, file=None, line=None) -> None:
        if issubclass(category, RetrofitWarning):
            text = one_line(message)
        elif _from_tabpfn(filename) and not issubclass(category, _DEVELOPER_WARNINGS):
            text = f"tabpfn: {one_line(message)}"
        else:
            return
        if text not in shown:
            shown.add(text)
            print(f"{command}: warning: {text}", file=stream or sys.stderr, flush=True)

    previous_disable = logging.root.manager.disable
    with warnings.catch_warnings():
        warnings.simplefilter("default")
        warnings.simplefilter("always", RetrofitWarning)
        warnings.showwarning = show
        logging.disable(logging.CRITICAL)
        try:
            yield
        finally:
            logging.disable(previous_disable)


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
        with quiet_libraries(command):
            return int(body())
    except KeyboardInterrupt:
        print(f"{command}: interrupted", file=sys.stderr, flush=True)
        return EXIT_INTERRUPTED
    except CommandError as exc:
        message = one_line(exc)
    except Exception as exc:  # every failure is one line, typed errors by name
        if _debug():
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
        print(f"[{PROG}] {strip_ansi(message)}", file=sys.stderr, flush=True)


def parse_precision(name: str) -> Any:
    """``--precision NAME`` as tabpfn's ``inference_precision`` (one of :data:`PRECISIONS`)."""
    import torch  # lazy: keeps --help light

    if name not in PRECISIONS:
        raise CommandError(f"unknown precision {name!r}; choose one of {', '.join(PRECISIONS)}")
    return name if name == "auto" else getattr(torch, name)
