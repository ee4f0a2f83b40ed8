"""Write the embedded classifier host's model card from recorded facts.

``python -m hosttraining.classification.card`` reads the checkpoint header (config, inference
config, training record: command settings, seed, warm start, prior), the
training log and the comparison written by ``python -m hosttraining.classification.quality
--out``, and writes the card (``--out``; the shipped one is
``retrofit/models/embedded/CLASSIFIER_MODEL_CARD.md``) and its loss curve
(``--curve``; ``classifier_loss_curve.png`` beside the card unless told; the
shipped one's is in ``docs/lab/embedded/``), both named apart from the regressor
card's ``MODEL_CARD.md`` and ``loss_curve.png``, which live in the same folders.
The card says where the host stands against the bar to ship (beat
logistic regression's log loss on ``offline_cls6``) and whether it is the
embedded classifier this installation ships (its verified digest). Nothing in
the card is typed by hand except prose; the regressor's card is ``hosttraining.regression.card``.
"""

from __future__ import annotations

import argparse
import json
import platform
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from eval.locations import default_output
from eval.markdown import markdown_table
from hosttraining.common.loss_curve import curve_link, plot_loss_curve
from hosttraining.common.run_files import read_log
from retrofit.command_line import OneLineArgumentParser, run_main
from retrofit.files import sha256_file, write_text_atomic
from retrofit.models import embedded

__all__ = [
    "CARD_NAME",
    "LOSS_CURVE_NAME",
    "RENAMED_TRAINERS",
    "main",
    "recorded_trainer_name",
    "training_command",
    "write_class_card",
]

CARD_NAME = "CLASSIFIER_MODEL_CARD.md"
"""File name of the card (the regressor's, in the same folder, is ``MODEL_CARD.md``)."""

LOSS_CURVE_NAME = "classifier_loss_curve.png"
"""File name of the loss curve (beside the card unless ``--curve`` names another file)."""

_SUITES = {
    "in-prior": "held-out prior tasks (leak-free; where runs are compared)",
    "dev": "development suite (inference settings are chosen here)",
    "offline_cls6": "evaluation suite `offline_cls6` (the bar: beat logistic "
    "regression; never used to choose settings)",
}
_MODELS = ("host", "prior", "logreg", "rf", "hgb")


# Trainer modules renamed since a shipped checkpoint recorded its command (the tooling's
# package hostgen/ became hosttraining/). The header cannot change without changing the
# file's SHA-256, so the card names today's module and says what the record holds.
RENAMED_TRAINERS: dict[str, str] = {"hostgen.train_classifier": "hosttraining.classification.train"}


def training_command(checkpoint: Path, training: dict[str, Any]) -> str:
    """The training command of a training record, naming today's trainer module.

    A recorded command runs under the module's present name; a record without
    a command has it rebuilt from its fields.
    """
    if training.get("command"):
        command = str(training["command"])
        for old, new in RENAMED_TRAINERS.items():
            command = command.replace(f" -m {old} ", f" -m {new} ")
        return command
    init = training.get("init_from")
    return (
        f"python -m hosttraining.classification.train --out {checkpoint.name} "
        f"--seed {training.get('seed')} --steps {training.get('steps_planned')} "
        f"--minutes {training.get('max_minutes')} --threads {training.get('threads')} "
        f"--lr {training.get('lr')} --init-from "
        + (f"retrofit/models/embedded/{init}" if init else "none")
    )


def recorded_trainer_name(training: dict[str, Any]) -> str | None:
    """The old trainer module a record's command names, where it was renamed since."""
    recorded = str(training.get("command") or "")
    return next((old for old in RENAMED_TRAINERS if f" -m {old} " in recorded), None)


def _quality_lines(quality: Path | None) -> list[str]:
    if quality is None or not quality.is_file():
        return ["Not measured yet: run `python -m hosttraining.classification.quality --out FILE`."]
    result = json.loads(quality.read_text(encoding="utf-8"))
    rows = []
    for suite, what in _SUITES.items():
        if suite not in result:
            continue
        part = result[suite]
        for metric in ("log_loss", "accuracy"):
            rows.append(
                [what, part.get("tasks", part.get("cases")), metric.replace("_", " ")]
                + [f"{part[m][metric]:.4f}" if m in part else "-" for m in _MODELS]
            )
    return markdown_table(("comparison", "n", "metric", *_MODELS), rows)


def _standing_lines(quality: Path | None, shipped: bool) -> list[str]:
    """Where the host stands: its ``offline_cls6`` log loss against logistic regression's."""
    result = (
        json.loads(quality.read_text(encoding="utf-8")) if quality and quality.is_file() else {}
    )
    part = result.get("offline_cls6")
    if not part or "host" not in part or "logreg" not in part:
        return ["- where it stands: not measured on `offline_cls6` yet"]
    host, logreg = part["host"]["log_loss"], part["logreg"]["log_loss"]
    clears = host < logreg
    lines = [
        f"- where it stands: log loss {host:.3f} on `offline_cls6` ({part.get('cases')} "
        f"cases) against logistic regression's {logreg:.3f}: it "
        + ("clears" if clears else "does not clear")
        + " the bar (beat logistic regression)"
    ]
    if shipped and not clears:
        lines.append(
            '- why it ships all the same: so that `OTabPFNClassifier(model_path="embedded")` '
            "runs offline, as the regressor's stand-in does; it is the best candidate so far, "
            "not a good classifier, and a host that clears the bar replaces it the same way"
        )
    return lines


def _shipped_classifier_sha256() -> str | None:
    """The digest of the embedded classifier this installation ships, or None."""
    if not embedded.embedded_is_shipped("classifier"):
        return None
    return sha256_file(embedded.embedded_model_path("classifier"))  # verified first


def write_class_card(
    checkpoint: Path,
    log_path: Path,
    quality: Path | None,
    out: Path,
    curve: Path | None = None,
) -> None:
    """Write the classifier's model card and its loss curve.

    Args:
        checkpoint: The classifier checkpoint.
        log_path: Its training log (``<checkpoint>.log.jsonl``).
        quality: The JSON of ``python -m hosttraining.classification.quality --out``
            (may be absent).
        out: Card path.
        curve: Where the loss curve goes (default :data:`LOSS_CURVE_NAME` beside the card);
            the card links it by its path relative to the card.
    """
    from tabpfn.checkpoint import Checkpoint

    header = Checkpoint(checkpoint).load()
    training = header.get("training", {})
    old = recorded_trainer_name(training)
    config, inf = header["config"], header["inference_config"]
    curve = out.with_name(LOSS_CURVE_NAME) if curve is None else curve
    plot_loss_curve(
        read_log(log_path),
        curve,
        loss_name="cross-entropy",
        title="Embedded TabPFN-v3 classifier: pretraining on the class prior",
    )
    n_params = sum(int(v.numel()) for v in header["state_dict"].values())
    digest = sha256_file(checkpoint)
    shipped = digest == _shipped_classifier_sha256()
    warm = training.get("warm_start") or {}
    lines = [
        "# Model card: embedded TabPFN-v3 classifier",
        "",
        "Generated by `python -m hosttraining.classification.card` from the checkpoint header, the "
        "training log and the recorded comparison; edit the generator, not this file.",
        "",
        "## What it is",
        "",
        "A small classifier with the real TabPFN v3 architecture and tabpfn's "
        f"`ManyClassDecoder` (up to {config['max_num_classes']} classes), pretrained by "
        "tabpfn-retrofit on a synthetic classification prior; it loads through tabpfn's "
        "loader: `tabpfn.TabPFNClassifier(model_path=..., inference_precision=torch.float32)`. "
        "It is not Prior Labs' TabPFN.",
        "",
        f"- file: `{checkpoint.name}`, sha256 `{digest}`",
        "- shipped as this package's embedded classifier: "
        + ("yes" if shipped else "no (a candidate)"),
        *_standing_lines(quality, shipped),
        f"- parameters: {n_params:,}; embed_dim {config['embed_dim']}, ICL blocks "
        f"{config['nlayers']}, decoder {config['decoder_num_heads']} x "
        f"{config['decoder_head_dim']}",
        f"- inference config: N_ESTIMATORS={inf['N_ESTIMATORS']}, "
        f"SOFTMAX_TEMPERATURE={inf['SOFTMAX_TEMPERATURE']}, "
        f"CLASS_SHIFT_METHOD={inf.get('CLASS_SHIFT_METHOD')}",
        "",
        "## Training",
        "",
        f"- command: `{training_command(checkpoint, training)}`"
        + (f" (recorded as `{old}`, the trainer's name then)" if old else ""),
        f"- seed {training.get('seed')}, {training.get('steps_done')} of "
        f"{training.get('steps_planned')} planned steps (stopped by "
        f"{training.get('stopped_by')}), {training.get('tasks_seen', 0):,} synthetic tasks, "
        f"wall time {training.get('wall_s', 0.0) / 60:.1f} min on {training.get('threads')} "
        f"CPU thread(s) of {platform.machine()} (the machine that wrote this card)",
        f"- warm start: `{training.get('init_from')}` (sha256 "
        f"`{training.get('init_from_sha256')}`); tensors copied {warm.get('copied')}, "
        f"kept from tabpfn's init {warm.get('kept')}, not used {warm.get('ignored')}",
        f"- class prior: `{json.dumps(training.get('prior'))}`",
        "",
        f"![loss curve]({curve_link(curve, out)})",
        "",
        "## Quality (mean over cases; lower log loss, higher accuracy is better)",
        "",
        *_quality_lines(quality),
        "",
    ]
    write_text_atomic(out, "\n".join(lines))


def main(argv: Sequence[str] | None = None) -> int:
    """Command line entry point; returns the exit status."""
    return run_main(_parser, _run, argv)


def _parser() -> argparse.ArgumentParser:
    p = OneLineArgumentParser(
        prog="python -m hosttraining.classification.card", description=__doc__
    )
    p.add_argument("--checkpoint", type=Path, required=True)
    p.add_argument("--log", type=Path, default=None, help="default: <checkpoint>.log.jsonl")
    p.add_argument(
        "--quality",
        type=Path,
        default=None,
        help="JSON of hosttraining.classification.quality --out",
    )
    p.add_argument("--out", type=Path, default=default_output("classifier_card") / CARD_NAME)
    p.add_argument(
        "--curve",
        type=Path,
        default=None,
        help=f"the loss curve's file, linked from the card (default: {LOSS_CURVE_NAME} beside "
        "--out)",
    )
    return p


def _run(args: argparse.Namespace) -> int:
    log = args.log or args.checkpoint.with_name(args.checkpoint.name + ".log.jsonl")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    curve = args.curve or args.out.with_name(LOSS_CURVE_NAME)
    write_class_card(args.checkpoint, log, args.quality, args.out, curve)
    print(f"wrote {args.out} and {curve}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
