"""Ragged ``predict_proba_batched`` for classifiers: datasets of any shapes and class sets.

tabpfn 9.2's ``TabPFNClassifier.predict_proba_batched`` needs one raw shape
for every train array, one for every test array, and one class set for all
datasets, because it stacks the datasets on the model's batch dimension and
scores them with one ``n_classes_``. On a patched host
:func:`predict_proba_batched` lifts both rules, sharing the regressor's
mechanism (:func:`retrofit.batching.engine.run_padded`):

1. every dataset is fitted by its own plain ``TabPFNClassifier`` over the
   shared patched model (``fit_mode="fit_preprocessors"``, as tabpfn's own
   method), so it gets its own ``classes_``, label encoding and class
   permutations, and each ensemble member goes through the stages before ICL
   on its own, with the inputs ``predict_proba`` builds for it;
2. the members' ICL carriers are padded with zero rows, bucketed by length and
   run through the patched ICL blocks in fused forwards (exact: a zero carrier
   is a NULL there);
3. padded rows are dropped before the decoder, and each dataset's member
   outputs go through tabpfn's own post-processing: the fitted worker's
   ``forward`` reads them from a replaying executor in place of its inference
   engine, so the class slicing and permutation, temperature, softmax,
   averaging and ``predict_proba``'s rounding are tabpfn's code, not a copy.

Class sets. Each dataset is scored over its own classes, so they may differ
(a dataset of 2 classes beside one of 7, labels of any kind), and each result
has that dataset's columns (its ``classes_``, sorted as tabpfn sorts them).
What still binds every dataset is the model's class limit,
``max_num_classes``: the v2-family decoders (v2, v2.5, v2.6) read one test row
at a time and output a fixed ``max_num_classes`` logits (10 for the published
v2 checkpoints), of which tabpfn keeps the first ``n_classes_``; v3's and
v3.5's many-class decoders score the classes present in the dataset's own
train rows, padded to ``max_num_classes`` columns. A dataset with more classes
is refused, named by its index, by tabpfn's own ``fit`` check, applied with
the model's limit too (an ``inference_config`` whose ``MAX_NUMBER_OF_CLASSES``
is above it: :func:`retrofit.batching.engine.check_class_limit`).

Hosts. Every patched classifier host with a registered ICL stage: v2, v2.5
and v2.6, whose decoder reads each test row alone, and v3 and v3.5, whose
``ManyClassDecoder`` is a retrieval attention from the test rows over the
train rows with one-hot labels as values; their stages decode each dataset
from its own train rows cut from the padded batch, so no padding row is a key
of the decoder (``retrofit/hosts/v3/icl_stage.py``). A stage without
``decode_classes`` is refused (``UnsupportedArchitectureError``). v3's and
v3.5's many-class decoders score any class count up to ``max_num_classes``,
as in ``predict_proba``.

Which path answers is decided in one place,
:func:`retrofit.batching.dispatch.takes_padded_path`: on a patched host the
padded path takes ragged input, same-shape input whose class sets differ
(other classes, or integer labels beside text ones) and same-shape input in
``inference_precision=torch.float64``, which tabpfn's fused forward refuses.
Other same-shape input, and any input on a model without a null-padded stage
(``mode="none"``), is handed to tabpfn's ``predict_proba_batched``: it behaves
as tabpfn does, and a refusal names the dataset (class sets that differ
there: :func:`retrofit.batching.dispatch.refuse_other_class_sets`; ragged
input keeps tabpfn's ``ValueError``, which lists the shapes).

Refused as tabpfn's own method refuses them (their state is fitted per
dataset): ``balance_probabilities=True``, ``tuning_config`` and
``SAMPLE_SUBSAMPLING_METHOD="majority_downsample"``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Literal

import numpy as np
import torch
from tabpfn import TabPFNClassifier

from retrofit.batching.bounds import check_bucket_bounds
from retrofit.batching.dispatch import (
    check_batch_lists,
    check_batch_weights,
    refuse_other_class_sets,
    tabpfn_batched,
    takes_padded_path,
)
from retrofit.batching.engine import (
    BatchedPrediction,
    DatasetFit,
    Progress,
    models_of,
    run_padded,
)
from retrofit.batching.padding import DEFAULT_MAX_ROWS_PER_FORWARD, PaddingStats
from retrofit.errors import UnsupportedArchitectureError
from retrofit.hosts.common.base import decodes_classes, icl_stage_for

__all__ = ["predict_batched_labels", "predict_proba_batched"]


class _ReplayedOutputs:
    """Stands in for a fitted classifier's inference engine: yields outputs computed already.

    ``TabPFNClassifier.forward`` takes each member's decoder output and config
    from ``executor_.iter_outputs`` and post-processes them; given this object
    as ``executor_``, it post-processes the padded path's outputs instead, in
    member order as the engine yields them.
    """

    def __init__(self, outputs: Sequence[torch.Tensor], configs: Sequence[Any]) -> None:
        self.outputs = list(outputs)
        self.configs = list(configs)

    def iter_outputs(self, X: Any, **_: Any) -> Iterator[tuple[torch.Tensor, Any]]:
        """Each member's ``(M, O)`` output with its ensemble config (``X`` is not read)."""
        yield from zip(self.outputs, self.configs, strict=True)

    def use_torch_inference_mode(self, *, use_inference: bool) -> None:
        """Nothing to switch: the outputs exist."""


def _classify(
    classifier: TabPFNClassifier,
    X_train_list: Sequence[Any],
    y_train_list: Sequence[Any],
    X_test_list: Sequence[Any],
    *,
    method: Literal["predict_proba", "predict"],
    max_padded_fraction: float | None,
    max_rows: int,
    max_bucket_bytes: int | str | None,
    progress: Progress | None,
    padded: bool | None,
    fit: DatasetFit | None,
    sample_weight: Sequence[Any] | None,
) -> BatchedPrediction:
    """:func:`predict_proba_batched` and :func:`predict_batched_labels`, by ``method``."""
    y_train_list = check_batch_lists(X_train_list, y_train_list, X_test_list, numeric=False)
    max_padded_fraction, max_bucket_bytes = check_bucket_bounds(
        max_padded_fraction, max_bucket_bytes
    )
    weights = check_batch_weights(sample_weight, X_train_list)
    padded_path = takes_padded_path(
        classifier, X_train_list, y_train_list, X_test_list, padded, weighted=weights is not None
    )
    if not padded_path:
        refuse_other_class_sets(y_train_list)  # before tabpfn's message, which names none
        probas = tabpfn_batched(
            # tabpfn's own method, also when ``classifier`` is a subclass overriding it.
            lambda: TabPFNClassifier.predict_proba_batched(
                classifier, list(X_train_list), list(y_train_list), list(X_test_list)
            ),
            lambda: classifier,
            X_train_list,
            y_train_list,
            X_test_list,
        )
        results = list(probas)
        if method == "predict":
            results = [_labels(p, y) for p, y in zip(results, y_train_list, strict=True)]
        return BatchedPrediction(results, False, PaddingStats(), [])
    _refuse_per_dataset_state(classifier)
    for model in models_of(classifier):
        if not decodes_classes(icl_stage_for(model)):
            raise UnsupportedArchitectureError(
                f"{type(model).__name__}: its null-padded ICL stage decodes no classes "
                "(no decode_classes); predict each dataset with predict_proba"
            )
    run = run_padded(
        classifier,
        X_train_list,
        y_train_list,
        X_test_list,
        max_padded_fraction,
        max_rows,
        max_bucket_bytes,
        progress,
        fit,
        sample_weights=weights,
    )
    results = []
    for i, (worker, data) in enumerate(run.fitted):
        assert data is not None  # a classifier always runs the model
        worker.executor_ = _ReplayedOutputs(run.outputs[i], data.configs)
        results.append(getattr(worker, method)(X_test_list[i]))
    return BatchedPrediction(results, True, run.stats, run.buckets)


def _labels(probas: np.ndarray, y_train: Any) -> np.ndarray:
    """``TabPFNClassifier.predict``'s labels from its probabilities: the argmax class.

    tabpfn's classes are the sorted distinct train labels (its label encoder).
    """
    return np.unique(np.asarray(y_train))[np.argmax(probas, axis=1)]


def _refuse_per_dataset_state(classifier: TabPFNClassifier) -> None:
    # The refusals of tabpfn's predict_proba_batched that are settings, before any
    # fit (majority downsampling is refused per dataset, once fitted).
    for name, what in (
        ("balance_probabilities", "balance_probabilities=True (class counts are per dataset)"),
        ("tuning_config", "tuning_config (thresholds and temperature are tuned per dataset)"),
    ):
        if getattr(classifier, name):
            raise NotImplementedError(
                f"predict_proba_batched does not support {what}; "
                "score datasets individually with predict_proba"
            )


def predict_proba_batched(
    classifier: TabPFNClassifier,
    X_train_list: Sequence[Any],
    y_train_list: Sequence[Any],
    X_test_list: Sequence[Any],
    *,
    max_padded_fraction: float | None = None,
    max_rows: int = DEFAULT_MAX_ROWS_PER_FORWARD,
    max_bucket_bytes: int | str | None = "auto",
    progress: Progress | None = None,
    padded: bool | None = None,
    fit: DatasetFit | None = None,
    sample_weight: Sequence[Any] | None = None,
) -> BatchedPrediction:
    """Class probabilities for several independent datasets, ragged ones in fused ICL forwards.

    Args:
        classifier: A ``tabpfn.TabPFNClassifier`` whose ``model_path`` holds the
            model (for the padded path a patched host); it is left unchanged.
        X_train_list: Training features, one array per dataset.
        y_train_list: Training labels, one array per dataset; class sets may
            differ on the padded path (module docstring).
        X_test_list: Test features, one array per dataset.
        max_padded_fraction: Bound in ``[0, 1)`` on each bucket's padded share;
            None: the device's default (as :func:`retrofit.batching.regression.predict_batched`).
        max_rows: Bound on the padded rows of one ICL forward.
        max_bucket_bytes: Bound on the estimated working set of one ICL
            forward (as :func:`retrofit.batching.regression.predict_batched`).
        progress: Called as ``progress(phase, done, total)``.
        padded: None (default): the padded path for ragged input, differing
            class sets or float64 on a patched host, tabpfn's
            ``predict_proba_batched`` otherwise
            (:func:`~retrofit.batching.dispatch.takes_padded_path`). True: the
            padded path for any input; False: always tabpfn's.
        fit: The padded path's fit of each dataset
            (:data:`~retrofit.batching.engine.DatasetFit`); None: tabpfn's
            ``fit`` on the dataset's own rows.
        sample_weight: None, or per dataset None or the weights of its train
            rows (as :func:`retrofit.batching.regression.predict_batched`).

    Returns:
        The :class:`~retrofit.batching.engine.BatchedPrediction`; its
        ``results`` hold, per dataset, what ``predict_proba`` returns for it:
        ``(n_test, n_classes)`` with the dataset's own classes as columns.

    Raises:
        BatchInputError: Malformed lists or datasets, a missing label, a
            dataset tabpfn's ``fit`` refuses or one with more classes than the
            model scores (the message names the dataset index and the limit),
            class sets that differ where tabpfn's method answers (a host whose
            ICL stage is not closed, or ``padded=False``), or a bad
            ``max_padded_fraction``.
        NotImplementedError: ``balance_probabilities``, ``tuning_config`` or
            majority downsampling (as tabpfn's ``predict_proba_batched``).
        ValueError: Ragged input on a host whose ICL stage is not closed
            (tabpfn's error).
        UnsupportedArchitectureError: ``padded=True`` on an unpatched host, or
            a host whose stage decodes no classes.
    """
    return _classify(
        classifier,
        X_train_list,
        y_train_list,
        X_test_list,
        method="predict_proba",
        max_padded_fraction=max_padded_fraction,
        max_rows=max_rows,
        max_bucket_bytes=max_bucket_bytes,
        progress=progress,
        padded=padded,
        fit=fit,
        sample_weight=sample_weight,
    )


def predict_batched_labels(
    classifier: TabPFNClassifier,
    X_train_list: Sequence[Any],
    y_train_list: Sequence[Any],
    X_test_list: Sequence[Any],
    *,
    max_padded_fraction: float | None = None,
    max_rows: int = DEFAULT_MAX_ROWS_PER_FORWARD,
    max_bucket_bytes: int | str | None = "auto",
    progress: Progress | None = None,
    padded: bool | None = None,
    fit: DatasetFit | None = None,
    sample_weight: Sequence[Any] | None = None,
) -> BatchedPrediction:
    """Labels per dataset, as ``predict`` returns them; otherwise as :func:`predict_proba_batched`.

    On the padded path each label is ``TabPFNClassifier.predict``'s own (the
    worker's ``predict`` over the replayed outputs); on tabpfn's path it is the
    argmax of tabpfn's probabilities mapped to the sorted train labels, which
    is what ``predict`` computes from the same probabilities.
    """
    return _classify(
        classifier,
        X_train_list,
        y_train_list,
        X_test_list,
        method="predict",
        max_padded_fraction=max_padded_fraction,
        max_rows=max_rows,
        max_bucket_bytes=max_bucket_bytes,
        progress=progress,
        padded=padded,
        fit=fit,
        sample_weight=sample_weight,
    )
