"""The runner's command line: its help, an unknown command, and ``python -m eval``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from eval import cli

REPO = Path(__file__).resolve().parents[2]


def test_cli_help_and_unknown_command(capsys):
    with pytest.raises(SystemExit) as err:
        cli.main(["--help"])
    assert err.value.code == 0
    assert "exactness" in capsys.readouterr().out
    with pytest.raises(SystemExit) as err:
        cli.main(["no-such-command"])
    assert err.value.code != 0


def test_python_dash_m_eval_entry_point():
    root = REPO
    res = subprocess.run(
        [sys.executable, "-m", "eval", "exactness", "--help"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0 and "--seed" in res.stdout and "--out" in res.stdout
