"""The console wrapper of every command: the libraries' warnings, logs and ANSI escapes
stay off stderr; the project's warnings and tabpfn's own (not its deprecations) and the
errors are one line each; tabpfn's size refusals name the command's option.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import warnings

import sklearn.base
import tabpfn.validation

from retrofit.cli.console import pretraining_limit_error, run_command
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


def test_tabpfns_own_warnings_reach_a_commands_stderr_one_line_each_but_its_deprecations(capsys):
    """tabpfn's warnings speak to its user (its CPU row guard, text columns); docs/cli.md
    promises the guard's warning, which was dropped with every other library's."""
    in_tabpfn = tabpfn.validation.__file__

    def body() -> int:
        for category, text in (
            (UserWarning, "Running on CPU with more than 1000 samples may be slow.\nUse a GPU"),
            (DeprecationWarning, "`norm_bardist_` is deprecated"),
            (FutureWarning, "a future default"),
        ):
            warnings.warn_explicit(text, category, in_tabpfn, 1, module="tabpfn.validation")
        elsewhere = sklearn.base.__file__
        warnings.warn_explicit("not tabpfn's", UserWarning, elsewhere, 1, module="sklearn")
        return 0

    assert run_command("tabpfn-retrofit demo", body) == 0
    assert capsys.readouterr().err == (
        "tabpfn-retrofit demo: warning: tabpfn: Running on CPU with more than 1000 samples "
        "may be slow. Use a GPU\n"
    )


def test_tabpfns_size_refusals_name_the_commands_option_not_its_python_argument():
    # tabpfn 9.2's messages, as its validation raises them.
    cpu = RuntimeError(
        "Running on CPU with more than 5000 samples is not allowed by default due to slow "
        "performance.\nTo override this behavior, set the environment variable "
        "TABPFN_ALLOW_CPU_LARGE_DATASET=1 or set ignore_pretraining_limits=True.\n"
        "Alternatively, consider using a GPU or the tabpfn-client API: https://example"
    )
    rows = ValueError(
        "Number of samples `60,000` in the input data is greater than the maximum number of "
        "samples `50,000` officially supported by TabPFN. Set `ignore_pretraining_limits=True` "
        "to override this error!"
    )
    assert str(pretraining_limit_error(cpu)) == (
        "Running on CPU with more than 5000 samples is not allowed by default due to slow "
        "performance; give --ignore-pretraining-limits to run it anyway, or run on a GPU "
        "(--device cuda)"
    )
    assert str(pretraining_limit_error(rows)) == (
        "Number of samples 60,000 in the input data is greater than the maximum number of "
        "samples 50,000 officially supported by TabPFN; give --ignore-pretraining-limits to "
        "run it anyway"
    )
    assert pretraining_limit_error(RuntimeError("CUDA out of memory")) is None
