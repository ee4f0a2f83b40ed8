"""The regressor host's card command: its default inputs are the checkout's shipped files."""

from __future__ import annotations

from pathlib import Path

from eval.locations import DEFAULT_OUTPUT_ROOT
from hosttraining.regression import card
from tests.helpers.commands import one_prog_error_line

REPO = Path(__file__).resolve().parents[3]


def test_the_card_defaults_to_the_shipped_checkpoint_and_its_training_log():
    args = card._parser().parse_args([])
    assert (REPO / args.checkpoint).is_file(), args.checkpoint
    assert (REPO / args.log).is_file(), args.log


def test_the_card_writes_under_the_untracked_folder_and_a_usage_error_is_one_line(capsys):
    assert card._parser().parse_args([]).out.parts[0] == DEFAULT_OUTPUT_ROOT.name
    assert card.main(["--no-such-option"]) == 2
    one_prog_error_line(capsys.readouterr().err, "python -m hosttraining.regression.card")
