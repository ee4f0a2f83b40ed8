"""The console script ``tabpfn-retrofit``: the library's commands and every installed group's.

The library's own commands (``predict``, ``predict-batch``, ``patch``:
:func:`retrofit.cli.commands.add_subcommands`) are always there. Other
packages join the same parser without the library importing them: each
declares an entry point in the ``tabpfn_retrofit.commands`` group (in its
``pyproject.toml``) naming a function that registers its subcommands on an
``add_subparsers()`` object, as ``add_subcommands`` does. The evaluation
runner declares one (``eval``, ``report``, ``bench``, ...), so its commands
appear when it is installed. Each subcommand sets ``handler`` and runs under
:func:`retrofit.cli.console.run_command`. Building the parser imports nothing
heavy (``--help`` stays fast).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from importlib.metadata import entry_points

from retrofit.cli import commands
from retrofit.cli.console import PROG, OneLineArgumentParser, run_command

__all__ = ["COMMAND_GROUP", "CommandGroup", "build_parser", "installed_groups", "main"]

#: The entry-point group through which installed packages add subcommands.
COMMAND_GROUP = "tabpfn_retrofit.commands"

#: A function that registers subcommands on an ``add_subparsers()`` object.
CommandGroup = Callable[[argparse._SubParsersAction], None]


def installed_groups() -> list[CommandGroup]:
    """The library's commands, then each installed ``COMMAND_GROUP`` entry point's, by name."""
    found = sorted(entry_points(group=COMMAND_GROUP), key=lambda entry: entry.name)
    return [commands.add_subcommands, *(entry.load() for entry in found)]


def build_parser(groups: Sequence[CommandGroup] | None = None) -> argparse.ArgumentParser:
    """The top-level parser with every subcommand of ``groups`` (default: the installed ones)."""
    parser = OneLineArgumentParser(
        prog=PROG,
        description="tabpfn-retrofit: O-closed TabPFN, its reports and evaluations.",
    )
    sub = parser.add_subparsers(
        dest="command", metavar="COMMAND", parser_class=OneLineArgumentParser
    )
    sub.required = True
    for add in installed_groups() if groups is None else groups:
        add(sub)
    return parser


def main(argv: Sequence[str] | None = None, groups: Sequence[CommandGroup] | None = None) -> int:
    """Runs the command line; returns the process exit status.

    Args:
        argv: The arguments (default: ``sys.argv[1:]``).
        groups: The command groups (default: :func:`installed_groups`).
    """
    # --help exits 0 and a usage error exits 2 (one line) through SystemExit.
    parser = build_parser(groups)
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # argparse would blame the top-level parser; name the subcommand
        _subparser(parser, args.command).error(f"unrecognized arguments: {' '.join(unknown)}")
    return run_command(f"{PROG} {args.command}", lambda: args.handler(args))


def _subparser(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    for action in parser._actions:  # argparse keeps the subcommands only here
        if isinstance(action, argparse._SubParsersAction):
            return action.choices[name]
    return parser
