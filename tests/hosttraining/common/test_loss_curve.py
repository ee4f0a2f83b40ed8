"""The loss curve a model card links: its path relative to the card, wherever it is written."""

from __future__ import annotations

from pathlib import Path

from hosttraining.common.loss_curve import curve_link, plot_loss_curve


def test_a_card_links_a_curve_beside_it_by_name_and_one_elsewhere_by_a_relative_path(tmp_path):
    card = tmp_path / "retrofit" / "models" / "embedded" / "MODEL_CARD.md"
    assert curve_link(card.with_name("loss_curve.png"), card) == "loss_curve.png"
    elsewhere = tmp_path / "docs" / "lab" / "embedded" / "loss_curve.png"
    link = curve_link(elsewhere, card)
    assert link == "../../../docs/lab/embedded/loss_curve.png"
    assert (card.parent / link).resolve() == elsewhere.resolve()


def test_the_curve_is_drawn_from_the_log(tmp_path: Path):
    log = [{"step": s, "loss_ema": 1.0 / (s + 1), "lr": 1e-3} for s in range(5)]
    plot_loss_curve(log, tmp_path / "curve.png")
    assert (tmp_path / "curve.png").read_bytes().startswith(b"\x89PNG")
