"""``python -m lab bench``'s options: its --model help names every alias."""

from __future__ import annotations

from lab.cli import main
from retrofit.models.aliases import VERSION_ALIASES


def test_bench_s_help_names_every_version_alias(capsys):
    assert main(["bench", "--help"]) == 0
    text = capsys.readouterr().out
    assert "usage: python -m lab bench" in text
    missing = [a for a in (*VERSION_ALIASES, "auto") if f"'{a}'" not in text]
    assert not missing, f"bench --help leaves out {missing}"
