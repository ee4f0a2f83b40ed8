"""The regressor host's card command: its default inputs are the checkout's shipped files."""

from __future__ import annotations

from pathlib import Path

from hosttraining.regression import card

REPO = Path(__file__).resolve().parents[3]


def test_the_card_defaults_to_the_shipped_checkpoint_and_its_training_log():
    args = card._parser().parse_args([])
    assert (REPO / args.checkpoint).is_file(), args.checkpoint
    assert (REPO / args.log).is_file(), args.log
