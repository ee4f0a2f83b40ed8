"""The combined command line: a usage error of every subcommand and of every
``python -m`` entry point is one line on stderr, exit 2.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from eval import cli
from tests.helpers.commands import ROOT, model_defaults, one_error_line


@pytest.mark.parametrize("command", ["predict", "patch", "exactness", "ablation", "eval", "report"])
def test_a_usage_error_of_every_subcommand_is_one_line(command, capsys):
    """Not argparse's usage block plus the error: one line."""
    with pytest.raises(SystemExit) as info:
        cli.main([command, "--no-such-option"])
    assert info.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    one_error_line(captured.err, command)


@pytest.mark.parametrize(
    ("module", "prog"),
    [
        ("eval.paper.datasets.__main__", "python -m eval.paper.datasets"),
    ],
)
def test_a_usage_error_of_every_python_dash_m_entry_point_is_one_line(module, prog, capsys):
    """Each ``main`` runs under ``retrofit.command_line.run_main``."""
    main = __import__(module, fromlist=["main"]).main
    assert main(["--no-such-option"]) == 2
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1, captured.err
    assert captured.err.startswith(f"{prog}: error: "), captured.err


def test_a_python_dash_m_entry_point_fails_in_one_line_as_a_process():
    """The same through the interpreter, as a user runs it."""
    result = subprocess.run(
        [sys.executable, "-m", "eval.paper.datasets", "--print-manifest", "nope"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith("python -m eval.paper.datasets: error: ")


def test_every_command_that_takes_model_defaults_to_tabpfns_auto():
    """As the estimators: a user who names no model gets what ``TabPFNRegressor()`` loads."""
    defaults = model_defaults(cli.build_parser())
    assert {"predict", "predict-batch", "patch", "eval"} <= defaults.keys()
    assert defaults == dict.fromkeys(defaults, "auto")
