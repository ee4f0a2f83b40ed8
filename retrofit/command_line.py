"""The library's command-line plumbing, public for the tools built on it.

The paper's runner (``eval``: its commands join the console script
``tabpfn-retrofit``), the lab (``python -m lab``) and the host trainer
(``python -m hosttraining...``) follow the console script's conventions through
these names and never through :mod:`retrofit.cli`'s modules, which are the
library's own and may change (``tests/repo/test_layout.py`` pins that no other
package imports them). Building a parser with them imports nothing heavy.

One-line errors and exit codes:

- :class:`OneLineArgumentParser`: an ``ArgumentParser`` whose usage errors are
  one line and exit :data:`EXIT_ERROR`;
- :func:`run_main`: the body of a ``python -m`` entry point's ``main`` (parse,
  then run the handler under :func:`run_command`);
- :func:`run_command`: a failure is one line on stderr (``COMMAND: error:
  MESSAGE``) and :data:`EXIT_ERROR`, Ctrl-C one line and
  :data:`EXIT_INTERRUPTED`; the libraries underneath stay quiet meanwhile;
- :func:`one_line`: a message without ANSI escapes, its whitespace one space;
- :data:`PROG`: the console script's name, for messages of its commands.

Where a command writes, checked before any work: :func:`check_output_dir`,
:func:`check_output_file`.

Joining the console script (what the runner's entry point uses):
:data:`COMMAND_GROUP` (the entry-point group the console script reads),
:data:`CommandGroup` (a function that registers subcommands),
:func:`library_commands` (the library's ``predict``, ``predict-batch`` and
``patch``), :func:`build_parser` and :func:`main` over a sequence of groups,
and the help texts the library's commands give ``--model`` and ``--tau``
(:data:`MODEL_HELP`, :data:`TAU_DEFAULT_HELP`), so another group says the same.
"""

from __future__ import annotations

from retrofit.cli.commands import MODEL_HELP, TAU_DEFAULT_HELP
from retrofit.cli.commands import add_subcommands as library_commands
from retrofit.cli.console import (
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    PROG,
    OneLineArgumentParser,
    one_line,
    run_command,
    run_main,
)
from retrofit.cli.outputs import check_output_dir, check_output_file
from retrofit.cli.program import COMMAND_GROUP, CommandGroup, build_parser, main

__all__ = [
    "COMMAND_GROUP",
    "EXIT_ERROR",
    "EXIT_INTERRUPTED",
    "MODEL_HELP",
    "PROG",
    "TAU_DEFAULT_HELP",
    "CommandGroup",
    "OneLineArgumentParser",
    "build_parser",
    "check_output_dir",
    "check_output_file",
    "library_commands",
    "main",
    "one_line",
    "run_command",
    "run_main",
]
