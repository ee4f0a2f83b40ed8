"""Running the command line in process: argv builders, the one-line error check, listings.

The commands run through ``eval.cli.main`` (every subcommand, the runner's included) on a
tiny v3 checkpoint or the embedded host, with one estimator and few rows, so that a test of
a message or a file left behind costs a second.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from eval import cli

__all__ = [
    "EVAL_CASES",
    "EVAL_FAST",
    "FAST",
    "ROOT",
    "dead_pid",
    "eval_argv",
    "file_mode",
    "listing",
    "model_defaults",
    "one_error_line",
    "one_prog_error_line",
    "predict_argv",
    "run_cli",
]

#: ``predict`` and ``patch`` options that keep a run to one float32 estimator on the CPU.
FAST = ["--n-estimators", "1", "--precision", "float32", "--device", "cpu", "--quiet"]
#: ``eval`` options that cut each case to one estimator and a few rows.
EVAL_FAST = ["--n-estimators", "1", "--max-train-rows", "40", "--max-test-rows", "12"]
#: ``eval``'s cases: one dataset, one seed.
EVAL_CASES = ["--datasets", "qsar_fish", "--seeds", "0", "--no-progress"]
#: The repository root (the working directory of a test's subprocess).
ROOT = Path(__file__).resolve().parents[2]


def run_cli(argv: list, capsys) -> tuple[int, str, str]:
    """``eval.cli.main(argv)`` in process: its exit code, stdout and stderr."""
    code = cli.main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def one_error_line(err: str, command: str) -> None:
    """Asserts that ``err`` is exactly one ``tabpfn-retrofit COMMAND: error:`` line."""
    assert err.count("\n") == 1, err
    assert err.startswith(f"tabpfn-retrofit {command}: error: "), err


def one_prog_error_line(err: str, prog: str) -> None:
    """Asserts that ``err`` is exactly one ``PROG: error:`` line (a ``python -m`` command's)."""
    assert err.count("\n") == 1, err
    assert err.startswith(f"{prog}: error: "), err


def listing(folder: Path) -> list[str]:
    """The names in ``folder``, sorted (hidden leftovers included)."""
    return sorted(p.name for p in folder.iterdir())


def file_mode(path: Path) -> int:
    """The permission bits of ``path``."""
    return path.stat().st_mode & 0o777


def dead_pid() -> int:
    """The id of a process that has exited (a killed writer's, for leftovers and claims)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def predict_argv(csv_data: dict[str, Path], model: str | Path, out: Path, *extra) -> list:
    """A fast ``predict`` of ``csv_data``'s train and test files (target ``y``) into ``out``."""
    return ["predict", "--train", csv_data["train"], "--target", "y", "--test", csv_data["test"],
            "--out", out, "--model", model, *FAST, *extra]  # fmt: skip


def eval_argv(checkpoint: Path, store: Path, *extra) -> list:
    """A fast ``eval`` of one case, unpatched and OAttention, into ``store``."""
    return ["eval", "--model", checkpoint, "--modes", "none", "oattention", "--store", store,
            *EVAL_FAST, *EVAL_CASES, *extra]  # fmt: skip


def model_defaults(parser: argparse.ArgumentParser) -> dict[str, object]:
    """Each subcommand of ``parser`` that takes ``--model``, and that option's default."""
    found: dict[str, object] = {}
    for action in parser._actions:  # argparse keeps the subcommands only here
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                for option in sub._actions:
                    if "--model" in option.option_strings:
                        found[name] = option.default
    return found
