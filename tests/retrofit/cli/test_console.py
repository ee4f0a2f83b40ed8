"""The console wrapper of every command: the libraries' warnings, logs and ANSI escapes
stay off stderr; the project's warnings and errors are one line each.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import warnings

from retrofit.cli.console import run_command
from retrofit.errors import RetrofitWarning
from tests.helpers.commands import ROOT, predict_argv


def test_library_warnings_logs_and_ansi_escapes_stay_off_a_commands_stderr(capsys):
    """Only the project's warnings, one line each, no escapes."""

    def body() -> int:
        warnings.warn("torch: TypedStorage is deprecated", UserWarning, stacklevel=1)
        warnings.warn("sklearn says\nover two lines", FutureWarning, stacklevel=1)
        logging.getLogger("huggingface_hub").warning("Retrying in 1s [Retry 1/5].")
        logging.getLogger("tabpfn.model_loading").warning("HuggingFace download failed.")
        for _ in range(2):
            warnings.warn("\x1b[33mstore\x1b[0m note\nsecond line", RetrofitWarning, stacklevel=1)
        raise RuntimeError("\x1b[1;31mbold red\x1b[0m failure\n  detail")

    code = run_command("tabpfn-retrofit demo", body)
    captured = capsys.readouterr()
    assert code == 2
    assert captured.err == (
        "tabpfn-retrofit demo: warning: store note second line\n"
        "tabpfn-retrofit demo: error: RuntimeError: bold red failure detail\n"
    )
    assert not logging.root.manager.disable  # logging is back on after the command


_NOISY_PREDICT = """
import logging, sys, warnings
from eval import cli
from retrofit.regressor import OTabPFNRegressor
fit = OTabPFNRegressor.fit
def noisy_fit(self, X, y):
    warnings.warn("\\x1b[31mtorch.cuda: no GPU\\x1b[0m", UserWarning)
    logging.getLogger("tabpfn").warning("Running on CPU")
    logging.getLogger("huggingface_hub").warning("Retrying in 1s [Retry 1/5].")
    return fit(self, X, y)
OTabPFNRegressor.fit = noisy_fit
sys.exit(cli.main(sys.argv[1:]))
"""


def test_predict_keeps_the_libraries_warnings_and_logs_off_stderr(csv_data, model_arg, tmp_path):
    """As a process (pytest would swallow both): stderr stays empty."""
    argv = [str(a) for a in predict_argv(csv_data, model_arg, tmp_path / "p.csv")]
    result = subprocess.run(
        [sys.executable, "-c", _NOISY_PREDICT, *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env={**os.environ, "PYTHONPATH": str(ROOT), "PYTHONWARNINGS": "always"},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("RMSE ")
    assert result.stderr == ""
