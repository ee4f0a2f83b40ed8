"""Every list of version aliases a user reads names every alias (retrofit.models.aliases).

The lists are written from the table, so these tests fail when a message or a
``--help`` spells its own list again and leaves an alias out.
"""

from __future__ import annotations

import pytest

from eval.cli import main
from retrofit.errors import CheckpointNotFoundError, UnknownVersionError
from retrofit.models import loading, weights
from retrofit.models.aliases import VERSION_ALIASES

#: Every version this package resolves to tabpfn's published weights, and "auto".
EVERY_ALIAS = ("v2", "v2.5", "v2.6", "v3", "v3.5")


def _missing(text: str) -> list[str]:
    return [alias for alias in (*EVERY_ALIAS, "auto") if f"'{alias}'" not in text]


def test_the_alias_table_is_the_one_the_resolver_uses():
    assert tuple(VERSION_ALIASES) == EVERY_ALIAS
    assert tuple(weights.DEFAULT_VERSIONS) == EVERY_ALIAS


@pytest.mark.parametrize(
    ("raise_it", "error"),
    [
        (lambda tmp: loading.resolve_model(tmp / "missing.ckpt"), CheckpointNotFoundError),
        (lambda tmp: loading.load_host(str(tmp / "missing.ckpt")), CheckpointNotFoundError),
        (lambda tmp: weights.resolve_version("v4"), UnknownVersionError),
    ],
    ids=["resolve_model", "load_host", "unknown version"],
)
def test_every_error_listing_the_aliases_names_every_one(tmp_path, raise_it, error):
    with pytest.raises(error) as info:
        raise_it(tmp_path)
    assert not _missing(str(info.value)), str(info.value)


@pytest.mark.parametrize("command", ["eval", "predict", "predict-batch", "patch"])
def test_every_help_listing_the_aliases_names_every_one(command, capsys):
    with pytest.raises(SystemExit):
        main([command, "--help"])
    text = capsys.readouterr().out
    assert not _missing(text), f"{command} --help leaves out {_missing(text)}"
