"""Every command's ``--model`` defaults to tabpfn's ``auto``, and offline says how to go on.

A user who leaves ``--model`` out gets what ``tabpfn.TabPFNRegressor()`` loads, as
with the estimators; offline (no file in tabpfn's model cache, downloads off or
failing) that is one line saying how to get tabpfn's weights and that
``--model embedded`` runs the shipped stand-in. No download is tried: tabpfn's
downloader is the ``no_download`` fixture's, and the model cache is empty.
"""

from __future__ import annotations

import pytest

from retrofit.cli import commands, program
from tests.helpers.commands import FAST, model_defaults, run_cli

#: The library's commands: each takes ``--model``.
LIBRARY_COMMANDS = ("predict", "predict-batch", "patch")


def test_every_library_command_defaults_to_tabpfns_auto():
    defaults = model_defaults(program.build_parser([commands.add_subcommands]))
    assert defaults == dict.fromkeys(LIBRARY_COMMANDS, "auto")


def test_the_help_names_auto_as_the_default_and_embedded_as_the_offline_stand_in():
    assert "(default: auto, tabpfn's own default)" in commands.MODEL_HELP
    assert "'embedded' (the small TabPFN v3 stand-ins" in commands.MODEL_HELP


@pytest.mark.parametrize("command", ["predict", "patch", "predict-batch"])
def test_offline_a_command_without_model_fails_in_one_line_naming_the_way_on(
    command, csv_data, tmp_path, cache_dir, no_download, capsys
):
    out = tmp_path / "out"
    if command == "predict":
        train, test = csv_data["train"], csv_data["test"]
        argv = ["predict", "--train", train, "--target", "y", "--test", test, "--out", out, *FAST]
    elif command == "patch":
        argv = ["patch", "--out", out, "--quiet"]
    else:
        manifest = tmp_path / "manifest.json"
        manifest.write_text(
            f'[{{"train": "{csv_data["train"].name}", "test": "{csv_data["test"].name}"}}]'
        )
        argv = ["predict-batch", manifest, "--target", "y", "--out-dir", out, "--quiet"]
    assert "--model" not in [str(a) for a in argv]
    code, _, err = run_cli(argv, capsys)
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith(f"tabpfn-retrofit {command}: error: WeightsUnavailableError"), err
    assert "TabPFN v3.5 regressor weights are not available for 'auto'" in err
    assert str(cache_dir / "tabpfn-v3.5-20260909.safetensors") in err
    assert "docs/real_weights.md" in err and "licence" in err
    assert "--model embedded (command line) runs the small offline stand-in" in err
    assert len(no_download) == 1  # tabpfn's downloader was asked once (the fixture's fake)
    assert not out.exists()
