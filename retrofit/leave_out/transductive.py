"""Transductive leave-out: the X side fitted once on all rows, the y side per fold.

``retrofit.cross_val_predict(preprocessing="transductive")`` (the default)
runs the folds on the padded engine like ``"per_fold"``, but fits each fold's
worker with :class:`TransductiveFit` instead of tabpfn's full ``fit`` on the
fold's rows:

* X side, shared by every fold and fitted once, on all ``N`` rows, from a
  label-free stand-in target (:func:`surrogate_target`): the input cleaning
  (dates, text, ordinal encoding, the feature schema) and each ensemble
  member's feature pipeline (tabpfn's ``fit_preprocessors`` fit). A fold's
  context is its train rows of that one transform; its queries go through the
  same fitted pipelines (``transform_X_test``), as ``predict`` sends test rows.
* y side, per fold, from the fold's own train rows only: tabpfn's ``fit`` in
  ``fit_mode="low_memory"``, which fits no feature pipeline, gives the target
  standardisation and bar-distribution borders (regressor) or the label
  encoding and class counts (classifier) and the ensemble configs; each
  member's target transform or class permutation is then fitted on the fold's
  labels with tabpfn's own function (``_transform_labels_one``).

So no held-out label reaches anything that predicts it: the X side never
reads a label, and a fold's y side reads only its train rows. What the folds
do not get is a feature pipeline fitted without their held-out rows' features
(unlabelled rows, the transductive setting); ``"per_fold"`` refits it per
fold. How far that moves the predictions is measured by ``tabpfn-retrofit
oof-gap`` (``results/leave_out/``; :mod:`retrofit.leave_out.cross_val` gives
the numbers). The feature pipelines run once instead of ``k`` times; the
per-fold ``low_memory`` fit still validates and cleans the fold's rows and
fits its target side. On ``bench --leave-out`` (``results/bench_leave_out``,
the embedded host, 4 members, one thread) that is 0.72-0.95 of the ``k``
refits' CPU time against 0.86-0.98 for ``"per_fold"``.

Refused (one line naming ``preprocessing="per_fold"``): X steps that read
labels (row subsampling, ``SUBSAMPLE_SAMPLES``, and importance-chosen feature
subsets, ``FEATURE_SUBSAMPLING_METHOD`` ``"gini_feature_importance"`` or
``"auto"``), and a ``random_state`` that is not an integer (the shared fit
and each fold's fit must draw the same ensemble).

Shape letters: N rows of ``X``, n a fold's train rows.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np
from tabpfn import TabPFNClassifier

from retrofit.batching.engine import Estimator, check_class_limit, worker_for
from retrofit.errors import InvalidInputError
from retrofit.tabpfn_surface import transform_labels_one

__all__ = [
    "LABEL_FIELDS",
    "X_SIDE_ATTRIBUTES",
    "TransductiveFit",
    "refuse_label_reading",
    "surrogate_target",
]

#: The attributes of a fitted tabpfn estimator that ``fit`` sets from ``X``
#: alone (input cleaning) and ``predict`` reads to clean its test rows.
X_SIDE_ATTRIBUTES: tuple[str, ...] = (
    "feature_names_in_",
    "n_features_in_",
    "inferred_feature_schema_",
    "ordinal_encoder_",
    "date_transformer_",
    "text_transformer_",
    "categorical_features_indices_",
)

#: Per task, the fields of an ensemble member's config that ``fit`` derives
#: from the labels; everything else in a config is the X side.
LABEL_FIELDS: dict[str, tuple[str, ...]] = {
    "classifier": ("class_permutation",),
    "regressor": ("target_transform",),
}


def _refused(what: str) -> InvalidInputError:
    return InvalidInputError(
        f"cross_val_predict: {what}, so the X side cannot be fitted once for every fold; "
        'use preprocessing="per_fold"'
    )


def refuse_label_reading(host: Estimator) -> None:
    """Refuses settings under which the X side reads labels or differs between fits.

    Args:
        host: The plain tabpfn estimator the folds run on (its parameters and
            resolved inference config are read; nothing is fitted).

    Raises:
        InvalidInputError: One line naming the setting and ``preprocessing="per_fold"``.
    """
    random_state = host.get_params(deep=False)["random_state"]
    if not isinstance(random_state, int | np.integer) or isinstance(random_state, bool):
        raise _refused(
            f"random_state={random_state!r} is not an integer (each fit would draw "
            "another ensemble)"
        )
    config = worker_for(host, random_state).get_inference_config()
    if config.SUBSAMPLE_SAMPLES is not None:
        raise _refused("SUBSAMPLE_SAMPLES subsamples rows per member, by label")
    if config.FEATURE_SUBSAMPLING_METHOD in ("gini_feature_importance", "auto"):
        raise _refused(
            f"FEATURE_SUBSAMPLING_METHOD={config.FEATURE_SUBSAMPLING_METHOD!r} may choose "
            "features by their importance for the labels"
        )


def surrogate_target(host: Estimator, n_rows: int) -> np.ndarray:
    """A label-free target of ``n_rows`` values that ``fit`` accepts: the row numbers.

    Two classes alternating for a classifier, the row index for a regressor
    (never constant, so tabpfn builds its members). Only the X side of the fit
    made with it is kept; the X side reads no label, so any target gives the
    same one.
    """
    rows_N = np.arange(n_rows)
    return rows_N % 2 if isinstance(host, TabPFNClassifier) else rows_N.astype(np.float64)


class TransductiveFit:
    """The engine's per-fold fit (:data:`retrofit.batching.engine.DatasetFit`) over one X side.

    Dataset ``i`` of the batch is fold ``i``: its worker has the y side of the
    fold's train rows and the X side fitted once on all rows (fitted at the
    first call, so the front ends' refusals come first).

    Args:
        host: The plain tabpfn estimator of the batch (patched model).
        X: All rows, ``(N, F)``, as the caller gave them.
        folds: ``(train_rows, held_out_rows)`` per fold; the batch's dataset
            ``i`` holds fold ``i``'s train rows.
    """

    def __init__(self, host: Estimator, X: Any, folds: Sequence[tuple[np.ndarray, np.ndarray]]):
        self.host = host
        self.X = X
        self.folds = list(folds)
        self.shared: Estimator | None = None

    def _shared(self, random_state: Any) -> Estimator:
        """The X side: a worker fitted on all rows with :func:`surrogate_target`."""
        if self.shared is None:
            worker = worker_for(self.host, copy.deepcopy(random_state))
            worker.fit(self.X, surrogate_target(worker, len(self.X)))
            self.shared = worker
        return self.shared

    def __call__(self, index: int, X: Any, y: Any, random_state: Any) -> Estimator:
        """Fold ``index``'s worker: its train rows' y side over the shared X side.

        ``X`` and ``y`` are the fold's train rows and labels as the front end
        checked them; ``X`` is fitted only for the y side (no pipeline).
        """
        shared = self._shared(random_state)
        train_n = self.folds[index][0]
        worker = worker_for(self.host, random_state)
        worker.fit_mode = "low_memory"  # fit's y side; its feature pipelines are not fitted
        worker.fit(X, y)
        if isinstance(worker, TabPFNClassifier):
            check_class_limit(worker)
        if getattr(worker, "is_constant_target_", False):
            return worker  # answered without the model: nothing of the X side is read
        for name in X_SIDE_ATTRIBUTES:
            setattr(worker, name, getattr(shared, name))
        worker.executor_ = _fold_executor(worker, shared, train_n)
        return worker


def _fold_executor(worker: Estimator, shared: Estimator, train_n: np.ndarray) -> Any:
    """The shared fit's inference engine with the fold's members.

    Each member keeps its fitted feature pipeline and the rows it produced for
    the fold's train rows (the context); its config takes the label fields of
    the fold's own config, and its targets are the fold's, transformed as
    tabpfn's ``fit`` transforms them.
    """
    # fit_mode="low_memory" keeps the fit's targets as fit hands them to its
    # members: standardised (regressor) or encoded (classifier).
    y_n = np.asarray(worker.executor_.y_train)
    fields = LABEL_FIELDS["classifier" if isinstance(worker, TabPFNClassifier) else "regressor"]
    shared_members = shared.executor_.ensemble_members
    if len(worker.ensemble_configs_) != len(shared_members):
        raise InvalidInputError(
            f"cross_val_predict: a fold's ensemble has {len(worker.ensemble_configs_)} members "
            f"and the all-rows fit {len(shared_members)} (its columns differ); "
            'use preprocessing="per_fold"'
        )
    members = []
    for member, fold_config in zip(shared_members, worker.ensemble_configs_, strict=True):
        config = dataclasses.replace(
            member.config, **{name: getattr(fold_config, name) for name in fields}
        )
        members.append(
            dataclasses.replace(
                member,
                config=config,
                X_train=member.X_train[train_n],
                y_train=transform_labels_one(config, y_n.copy()),
            )
        )
    executor = copy.copy(shared.executor_)
    executor.ensemble_members = members
    n_columns = shared.executor_.X_train_shape_before_preprocessing[1]
    executor.X_train_shape_before_preprocessing = (len(train_n), n_columns)
    return executor
