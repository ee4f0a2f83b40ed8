"""``python -m lab``: every command runs its module, and every error is one line, exit 2."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

from lab import cli
from tests.helpers.commands import ROOT, one_prog_error_line


@pytest.mark.parametrize("command", list(cli.COMMANDS))
def test_a_usage_error_of_every_lab_command_is_one_line_naming_it(command, capsys):
    assert cli.main([command, "--no-such-option"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    one_prog_error_line(captured.err, f"python -m lab {command}")


@pytest.mark.parametrize("command", list(cli.COMMANDS))
def test_every_lab_command_names_a_function_that_takes_its_arguments(command, monkeypatch):
    target, _ = cli.COMMANDS[command]
    module, function = target.split(":")
    handed = []
    monkeypatch.setattr(importlib.import_module(module), function, lambda argv: handed.append(argv))
    cli.main([command, "--out", "x", "-h"])
    assert handed == [["--out", "x", "-h"]]  # everything after the command, options included


def test_the_lab_s_help_lists_its_commands_and_an_unknown_one_is_one_line(capsys):
    assert cli.main(["--help"]) == 0
    shown = capsys.readouterr().out
    assert all(f"  {name}  " in shown for name in cli.COMMANDS), shown
    assert cli.main(["bench-all"]) == 2
    one_prog_error_line(capsys.readouterr().err, "python -m lab")
    assert cli.main([]) == 2
    one_prog_error_line(capsys.readouterr().err, "python -m lab")


def test_python_dash_m_lab_runs_a_command_and_its_help_imports_nothing_heavy():
    code = (
        "import sys\n"
        "from lab.cli import main\n"
        "main(['--help'])\n"
        "main(['bench', '--help'])\n"
        "main(['intervals', '--help'])\n"
        "heavy = [m for m in ('tabpfn', 'pandas', 'sklearn') if m in sys.modules]\n"
        "print('HEAVY=' + ','.join(heavy))\n"
    )
    shown = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    assert "usage: python -m lab bench" in shown and "--leave-out" in shown
    assert shown.strip().splitlines()[-1] == "HEAVY="
    ran = subprocess.run(
        [sys.executable, "-m", "lab", "oof-gap", "--folds"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert ran.returncode == 2
    one_prog_error_line(ran.stderr, "python -m lab oof-gap")


@pytest.mark.parametrize(
    ("parser", "argv"),
    [
        ("lab.benchmarks.command:_parser", []),
        ("lab.leave_out.commands:_intervals_parser", []),
        ("lab.leave_out.commands:_oof_gap_parser", []),
        ("lab.device_checks.gpu_check:_parser", ["out"]),
    ],
)
def test_every_lab_command_that_takes_model_defaults_to_tabpfns_auto(parser, argv):
    """As the console script's: naming no model means tabpfn's default; .ci names 'embedded'."""
    module, function = parser.split(":")
    assert getattr(importlib.import_module(module), function)().parse_args(argv).model == "auto"
