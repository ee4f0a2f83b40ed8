"""Which task ``predict`` and ``predict-batch`` run: ``--task``, or the model's and the labels'.

With ``--task auto`` (the default) the task follows from what the model can
do (:func:`model_kinds`) and what the target holds: a classifier checkpoint
classifies; a regressor checkpoint regresses, and a target holding text is
refused, naming the way out; a model that does both (the names ``embedded``,
``auto`` and the version aliases, which name a regressor and a classifier, and
a v3.5 file) classifies a target of text and regresses a numeric one, and
refuses a target mixing both (a mistyped number, or class labels: only the
user can say), naming ``--task``.
:func:`choose_task` returns the task with the reason, which the commands print.
"""

from __future__ import annotations

from dataclasses import dataclass

from retrofit.errors import CommandError
from retrofit.models.aliases import EMBEDDED
from retrofit.models.kinds import host_kinds
from retrofit.models.loading import load_host
from retrofit.models.weights import KINDS, Which, is_version_alias

__all__ = ["TextTarget", "choose_task", "model_kinds"]

_TASK_OF_KIND = {"regressor": "regression", "classifier": "classification"}


def model_kinds(model: str) -> tuple[Which, ...]:
    """What ``--model`` can run: ``("regressor",)``, ``("classifier",)`` or both.

    A name (``embedded``, ``auto``, a version alias) names a regressor and a
    classifier, and nothing is loaded for it; a file or a saved directory is
    loaded and asked (:func:`retrofit.models.kinds.host_kinds`).
    """
    if model == EMBEDDED or is_version_alias(model):
        return KINDS
    return host_kinds(load_host(model))


@dataclass(frozen=True)
class TextTarget:
    """Where a train target first holds text, for the reason and the messages.

    Attributes:
        where: The file (and, for ``predict-batch``, the dataset).
        row: The 0-based data row.
        value: The cell.
        with_numbers: Whether other cells of the column are numbers.
    """

    where: str
    row: int
    value: object
    with_numbers: bool = False

    def cell(self) -> str:
        """``data row R: 'CELL'``."""
        return f"data row {self.row}: {self.value!r}"


def choose_task(
    requested: str,
    model: str,
    target: str,
    text: TextTarget | None,
    numeric_where: str | None = None,
) -> tuple[str, str | None]:
    """The task to run and why (None when ``--task`` named it).

    Args:
        requested: ``--task``: ``"auto"``, ``"regression"`` or ``"classification"``.
        model: ``--model``.
        target: The target column's name, for the messages.
        text: Where a train target first holds text; None if every cell is a number.
        numeric_where: For several datasets, one whose train target is numeric,
            named with its target column (None if none is): a batch mixing
            both runs neither task on every dataset.

    Raises:
        CommandError: An explicit ``--task`` the model cannot run. With
            ``auto``: a target holding text for a regressor model; for a model
            that does both, a target mixing numbers and text (a mistyped number
            or class labels: only the user knows), or a batch mixing numeric and
            text targets (regression cannot run the text; classification only
            if the numbers are class labels too).
    """
    kinds = model_kinds(model)
    if requested != "auto":
        if requested not in (_TASK_OF_KIND[kind] for kind in kinds):
            raise CommandError(
                f"--task {requested} asked of --model {model}, which is a {kinds[0]} only; "
                f"give --task {_TASK_OF_KIND[kinds[0]]} (or auto), or a model that does "
                f"{requested} as --model"
            )
        return requested, None
    if len(kinds) == 1:
        task = _TASK_OF_KIND[kinds[0]]
        if task == "regression" and text is not None:
            raise CommandError(
                f"target column {target!r} in {text.where} is not numeric ({text.cell()}), "
                f"and --model {model} is a regressor; for class labels give a classifier "
                "checkpoint or a version alias as --model"
            )
        return task, f"--model {model} is a {kinds[0]}"
    if text is None:
        return "regression", (
            f"target column {target!r} is numeric (for class labels give --task classification)"
        )
    if text.with_numbers:
        raise CommandError(
            f"target column {target!r} in {text.where} mixes numbers and text "
            f"({text.cell()}): give --task classification if these are class labels, "
            "or make every cell a number for regression"
        )
    if numeric_where is not None:
        raise CommandError(
            f"target column {target!r} holds text in {text.where} ({text.cell()}) but "
            f"{numeric_where} holds numbers, and one batch runs one task: give --task "
            "classification if those numbers are class labels too, else predict each "
            "task's datasets in a batch of their own"
        )
    return "classification", f"target column {target!r} in {text.where} holds text ({text.cell()})"
