"""The classifier host's card: the shipped files and where the host stands against the bar."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from hosttraining.classification import card as class_card
from retrofit.files import sha256_file
from retrofit.models import embedded

# The shipped hosts' training records: logs, loss curves, the classifier's comparison.
RECORDS = Path(__file__).resolve().parents[3] / "docs" / "lab" / "embedded"


def test_the_shipped_classifier_card_is_the_shipped_files_and_says_where_it_stands() -> None:
    path = Path(embedded.embedded_model_path("classifier"))  # verifies the digest
    digest = sha256_file(path)
    card = (path.parent / class_card.CARD_NAME).read_text(encoding="utf-8")
    # Beside the regressor's card, its curve beside the regressor's, under names of their own.
    assert (
        class_card.CARD_NAME != "MODEL_CARD.md" and class_card.LOSS_CURVE_NAME != "loss_curve.png"
    )
    assert (path.parent / "MODEL_CARD.md").is_file() and (RECORDS / "loss_curve.png").is_file()
    assert (RECORDS / class_card.LOSS_CURVE_NAME).is_file()
    assert f"![loss curve](../../../docs/lab/embedded/{class_card.LOSS_CURVE_NAME})" in card
    assert f"sha256 `{digest}`" in card
    assert "shipped as this package's embedded classifier: yes" in card
    quality = json.loads((RECORDS / "classifier_quality.json").read_text(encoding="utf-8"))
    host, logreg = (quality["offline_cls6"][m]["log_loss"] for m in ("host", "logreg"))
    assert f"log loss {host:.3f} on `offline_cls6`" in card
    assert f"against logistic regression's {logreg:.3f}" in card
    assert ("does not clear the bar" in card) == (host >= logreg)


def test_the_card_of_a_shipped_host_below_the_bar_says_so(tmp_path: Path) -> None:
    quality = tmp_path / "quality.json"
    scores = {"cases": 18, "host": {"log_loss": 0.5}, "logreg": {"log_loss": 0.3}}
    quality.write_text(json.dumps({"offline_cls6": scores}), encoding="utf-8")
    lines = class_card._standing_lines(quality, shipped=True)
    assert "log loss 0.500 on `offline_cls6` (18 cases)" in lines[0]
    assert "does not clear the bar" in lines[0]
    assert 'OTabPFNClassifier(model_path="embedded")` runs offline' in lines[1]
    scores["host"]["log_loss"] = 0.2
    quality.write_text(json.dumps({"offline_cls6": scores}), encoding="utf-8")
    assert class_card._standing_lines(quality, shipped=True) == [
        "- where it stands: log loss 0.200 on `offline_cls6` (18 cases) against logistic "
        "regression's 0.300: it clears the bar (beat logistic regression)"
    ]


def test_a_recorded_command_of_a_renamed_trainer_runs_under_todays_module_name() -> None:
    """The shipped checkpoint recorded ``hostgen.train_classifier``, a module gone since."""
    record = {"command": "python -m hostgen.train_classifier --out c.safetensors --seed 4"}
    assert class_card.training_command(Path("c.safetensors"), record) == (
        "python -m hosttraining.classification.train --out c.safetensors --seed 4"
    )
    assert class_card.recorded_trainer_name(record) == "hostgen.train_classifier"
    today = {"command": "python -m hosttraining.classification.train --out c.safetensors"}
    assert class_card.recorded_trainer_name(today) is None
    assert class_card.training_command(Path("c.safetensors"), today) == today["command"]
    for new in class_card.RENAMED_TRAINERS.values():
        assert importlib.util.find_spec(new) is not None, new


def test_the_shipped_classifier_card_names_no_trainer_module_but_as_recorded() -> None:
    card_path = Path(embedded.embedded_model_path("classifier")).parent / class_card.CARD_NAME
    card = card_path.read_text(encoding="utf-8")
    for old in class_card.RENAMED_TRAINERS:
        card = card.replace(f"(recorded as `{old}`, the trainer's name then)", "")
        assert f"python -m {old} " not in card
    assert "python -m hosttraining.classification.train " in card
