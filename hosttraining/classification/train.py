r"""The embedded classifier host's recipe: a TabPFN-v3 classifier trained on the class prior.

The model is ``tabpfn``'s own ``TabPFNV3`` with ``max_num_classes = 10``: the
regressor host's backbone (cell embedding, distribution embedder, column
aggregator, ICL blocks, output norm), class embeddings
(``TrainableOrthogonalEmbedding``) in place of the two target encoders, and the
``ManyClassDecoder`` (retrieval attention from query rows over the context
rows' embeddings with one-hot labels as values) in place of the bar-distribution
head. The loss is the cross-entropy of the query rows' labels under the
decoder's log-probabilities; query rows of classes the context lacks are not
scored (:data:`hosttraining.priors.classes.IGNORE`). The checkpoint is written by
``hosttraining.common.loop.save_checkpoint`` with an explicit inference config, so
``tabpfn.TabPFNClassifier(model_path=...)`` loads it like any other v3 file.

Warm start (``--init-from``): every tensor of a regressor checkpoint whose name
and shape match is copied before training; the two target encoders and the
head, whose shapes differ, start from tabpfn's initialisation. Is it sound?
The copied stages are the same modules doing the same job (embedding cells,
summarising columns, mixing rows in context); only the code in which the
target enters them changes (a class embedding in place of ``Linear(1, E)`` of
the z-scored target, in the column embedding and in the ICL stage), so the
feature pathways carry over and the target pathways must be relearned. It can
help only as far as the regressor learned those stages, and it ties the
classifier to that checkpoint (its SHA-256 is recorded). ``--init-from none``
runs the cold arm; the warm and cold arms' comparison is in the training
ledger, ``docs/lab/training.md``.

Commands (one-thread, ``nice``; a run resumes from ``<out>.state.pt`` when
started again with the same arguments)::

    python -m hosttraining.classification.train --out PATH_v3.safetensors --steps N --minutes M \
        --init-from retrofit/models/embedded/tabpfn_v3_embedded_regressor.safetensors
    python -m hosttraining.classification.quality --checkpoint PATH_v3.safetensors \
        --suite in-prior dev --out QUALITY.json
    python -m hosttraining.classification.card --checkpoint PATH_v3.safetensors \
        --quality QUALITY.json

On a GPU, ``--device cuda --workers N`` trains there while ``N`` processes draw
the prior's batches ahead (the batches, hence the weights, are those of a run
that draws them itself); ``.ci/device-session`` is the lent GPU session's
script, this recipe its last step.

Every run of this recipe, with the line that reproduces it and what it scored,
is in ``docs/lab/training.md``; the embedded classifier
(:mod:`retrofit.models.embedded`, its card ``CLASSIFIER_MODEL_CARD.md``) is
one of them. It ships so that ``OTabPFNClassifier(model_path="embedded")`` runs
offline, although it does not yet beat logistic regression on ``offline_cls6``
(the bar, which its card reports); a host that does replaces it the same way. The held-out prior
tasks and the development suite (``classification.quality --suite in-prior
dev``) are where a host and its inference settings are chosen.

Shape suffixes: ``R`` rows, ``B`` tasks, ``C`` features, ``N`` context rows,
``T`` query rows, ``K`` classes (``max_num_classes``).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from tabpfn.architectures import tabpfn_v3

from hosttraining.classification.quality import (
    Task,
    baseline_scores,
    heldout_class_tasks,
    host_scores,
)
from hosttraining.common import heldout
from hosttraining.common.flags import (
    add_recipe_arguments,
    add_table_arguments,
    command_line,
    sized_model_config,
    table_shape,
    train_config,
)
from hosttraining.common.in_prior import HELDOUT_KEY
from hosttraining.common.loop import (
    DEFAULT_MODEL_CONFIG,
    TINY_MODEL_CONFIG,
    add_device_arguments,
    build_model,
    checked_device,
    inference_config_dict,
    train,
)
from hosttraining.priors.batch_stream import Sampler
from hosttraining.priors.classes import (
    CLASS_PRIOR_V2,
    IGNORE,
    ClassBatch,
    ClassPriorConfig,
    sample_class_batch,
)
from hosttraining.priors.tabicl import TabICLPriorConfig, heldout_tabicl_tasks, sample_tabicl_batch
from retrofit.command_line import OneLineArgumentParser, run_main
from retrofit.errors import CommandError
from retrofit.files import sha256_file
from retrofit.models.checkpoints import load_checkpoint

__all__ = [
    "CLASSIFIER_MODEL_CONFIG",
    "TINY_CLASSIFIER_CONFIG",
    "ClassificationObjective",
    "HeldoutCurve",
    "main",
    "warm_start",
]

_CLASSIFIER_FIELDS: dict[str, Any] = {
    "max_num_classes": 10,
    "decoder_head_dim": 32,
    "decoder_num_heads": 4,
}
CLASSIFIER_MODEL_CONFIG: dict[str, Any] = {**DEFAULT_MODEL_CONFIG, **_CLASSIFIER_FIELDS}
"""The embedded classifier: the regressor host's size, 10 classes, a 4 x 32 decoder."""

TINY_CLASSIFIER_CONFIG: dict[str, Any] = {
    **TINY_MODEL_CONFIG,
    **_CLASSIFIER_FIELDS,
    "decoder_head_dim": 4,
    "decoder_num_heads": 2,
}
"""A classifier small enough for tests."""


def warm_start(model: tabpfn_v3.TabPFNV3, checkpoint: str | Path) -> dict[str, list[str]]:
    """Copy into ``model`` every tensor of ``checkpoint`` with the same name and shape.

    Args:
        model: A freshly built classifier.
        checkpoint: A v3 checkpoint (read weights-only), normally the regressor host.

    Returns:
        ``copied``, ``kept`` (the model's own init: no tensor of that name and
        shape in the checkpoint) and ``ignored`` (checkpoint tensors the model
        has no place for), each a sorted list of names.
    """
    source = load_checkpoint(checkpoint)["state_dict"]
    target = model.state_dict()
    copied = sorted(n for n, t in target.items() if n in source and source[n].shape == t.shape)
    with torch.no_grad():
        for name in copied:
            target[name].copy_(source[name].to(target[name].dtype))
    return {
        "copied": copied,
        "kept": sorted(set(target) - set(copied)),
        "ignored": sorted(set(source) - set(copied)),
    }


@dataclasses.dataclass
class ClassificationObjective:
    """Cross-entropy of the query rows' labels under the many-class decoder.

    Attributes:
        prior: The classification prior the batches come from: the project's
            (:class:`hosttraining.priors.classes.ClassPriorConfig`) or TabICL's
            (:class:`hosttraining.priors.tabicl.TabICLPriorConfig`).
        init_from: A checkpoint to warm-start from (:func:`warm_start`), or None.
        command: The command line that runs this training (for the card).
    """

    prior: ClassPriorConfig | TabICLPriorConfig = dataclasses.field(
        default_factory=ClassPriorConfig
    )
    init_from: str | None = None
    command: str | None = None
    transfer: dict[str, list[str]] | None = dataclasses.field(default=None, repr=False)

    def build(self, model_config: dict[str, Any], seed: int) -> tabpfn_v3.TabPFNV3:
        """The classifier, warm-started when ``init_from`` names a checkpoint."""
        if int(model_config.get("max_num_classes", -1)) < self.prior.max_classes:
            raise ValueError("the model's max_num_classes is below the prior's max_classes")
        model = build_model(model_config, seed=seed)
        if self.init_from is not None:
            self.transfer = warm_start(model, self.init_from)
        return model

    def sampler(self) -> Sampler:
        """The prior's batch sampler (picklable, for worker processes)."""
        if isinstance(self.prior, TabICLPriorConfig):
            return functools.partial(sample_tabicl_batch, cfg=self.prior)
        return functools.partial(sample_class_batch, cfg=self.prior)

    def batch_loss(self, model: tabpfn_v3.TabPFNV3, batch: ClassBatch) -> tuple[torch.Tensor, int]:
        """Mean cross-entropy over the scorable query rows of one class-prior batch."""
        device = next(model.parameters()).device
        logits_TBK = model(batch.x_RBC.to(device), batch.y_train_NB.to(device))
        loss = F.cross_entropy(
            logits_TBK.reshape(-1, logits_TBK.shape[-1]),
            batch.y_test_TB.to(device).reshape(-1),
            ignore_index=IGNORE,
        )
        return loss, int(batch.x_RBC.shape[1])

    def describe(self) -> dict[str, Any]:
        """The task, the prior and what the warm start copied."""
        record: dict[str, Any] = {
            "task": "classification",
            "prior_source": "tabicl" if isinstance(self.prior, TabICLPriorConfig) else "project",
            "prior": dataclasses.asdict(self.prior),
            "init_from": Path(self.init_from).name if self.init_from else None,
            "init_from_sha256": sha256_file(self.init_from) if self.init_from else None,
            "command": self.command,
        }
        if self.transfer is not None:
            record["warm_start"] = {k: len(v) for k, v in self.transfer.items()}
        return record


class HeldoutCurve(heldout.HeldoutCurve):
    """The classifier's curve: log loss and accuracy on held-out class-prior tasks.

    Attributes:
        suites: Name -> fixed held-out tasks ``(x_ND, labels_N, num_train)``.
    """

    suites: dict[str, list[Task]]

    @classmethod
    def for_prior(cls, prior: ClassPriorConfig | TabICLPriorConfig, count: int) -> HeldoutCurve:
        """``count`` held-out tasks of the project's prior, and of TabICL's if it trains on it."""
        suites = {"project": heldout_class_tasks(count)}
        if isinstance(prior, TabICLPriorConfig):
            suites["tabicl"] = heldout_tabicl_tasks(count, prior, HELDOUT_KEY)
        return cls(suites)

    def score(self, model: torch.nn.Module, tasks: Sequence[Task]) -> dict[str, float]:
        """The host's mean log loss and accuracy."""
        return host_scores(model, tasks)  # type: ignore[arg-type]

    def baseline(self, tasks: Sequence[Task]) -> dict[str, dict[str, float]]:
        """Class frequencies, logistic regression and random forest."""
        return baseline_scores(tasks, ("prior", "logreg", "rf"))


DEFAULT_INIT = "retrofit/models/embedded/tabpfn_v3_embedded_regressor.safetensors"
"""The warm start of the recipe, relative to the repository root."""


_MODULE = "hosttraining.classification.train"


def main(argv: Sequence[str] | None = None) -> int:
    """Train the embedded classifier host (see the module docstring)."""
    return run_main(_parser, lambda args: _run(args, argv), argv)


def _parser() -> argparse.ArgumentParser:
    p = OneLineArgumentParser(
        prog="python -m hosttraining.classification.train",
        description="Train a TabPFN-v3 classifier host on the classification prior.",
    )
    p.add_argument("--out", type=Path, required=True, help="checkpoint (.safetensors, name has v3)")
    p.add_argument("--steps", type=int, default=20_000, help="planned steps (cosine spans them)")
    p.add_argument("--minutes", type=float, default=100.0, help="wall-clock cap of this run")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--warmup-steps", type=int, default=300)
    add_recipe_arguments(p)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    add_device_arguments(p)
    p.add_argument("--log-every", type=int, default=25)
    p.add_argument("--checkpoint-minutes", type=float, default=10.0)
    p.add_argument("--model", choices=("default", "tiny"), default="default")
    p.add_argument(
        "--init-from",
        default=DEFAULT_INIT,
        help="checkpoint whose matching tensors start the model ('none': cold start)",
    )
    p.add_argument(
        "--prior",
        choices=("1", "2", "tabicl"),
        default="2",
        help="the project's class prior version (1: cut regression tasks; 2: plus linear "
        "tasks) or TabICL's graph-SCM prior (needs the training extra)",
    )
    max_rows = TabICLPriorConfig().max_rows
    add_table_arguments(p, which="tabicl", max_rows=max_rows, max_rows_help="tabicl: most rows")
    p.add_argument("--n-estimators", type=int, default=4, help="stored N_ESTIMATORS")
    p.add_argument("--no-resume", action="store_true", help="ignore an existing state file")
    return p


def _run(args: argparse.Namespace, argv: Sequence[str] | None = None) -> int:
    if "v3" not in args.out.name or args.out.suffix != ".safetensors":
        raise CommandError("--out must be a .safetensors file whose name contains 'v3'")
    init = None if args.init_from == "none" else args.init_from
    if init is not None and not Path(init).is_file():
        raise CommandError(f"--init-from {init}: no such checkpoint")
    device, workers = checked_device(args)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    model_config = sized_model_config(
        CLASSIFIER_MODEL_CONFIG if args.model == "default" else TINY_CLASSIFIER_CONFIG, args
    )
    prior = _prior(args)
    cfg = train_config(args, device, workers)
    curve = None
    if args.eval_tasks > 0:
        curve = HeldoutCurve.for_prior(prior, args.eval_tasks)
        curve.write_baselines(args.out, args.eval_tasks)
    summary = train(
        args.out,
        cfg,
        model_config=model_config,
        inference_config=inference_config_dict(n_estimators=args.n_estimators),
        log=lambda line: print(line, file=sys.stderr, flush=True),
        resume=not args.no_resume,
        objective=ClassificationObjective(
            prior=prior, init_from=init, command=command_line(_MODULE, argv)
        ),
        evaluate=curve,
    )
    print(json.dumps(summary))
    return 0


def _prior(args: argparse.Namespace) -> ClassPriorConfig | TabICLPriorConfig:
    if args.prior == "tabicl":
        return table_shape(args, args.max_rows)
    return CLASS_PRIOR_V2 if args.prior == "2" else ClassPriorConfig()


if __name__ == "__main__":
    raise SystemExit(main())
