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

Row weights (``cross_val_predict(params={"sample_weight": w})``): the X side
is fitted once with the sample weights ``w`` (each row counted ``w_j`` times,
weight 0 removed; a classifier's ``class_weight`` reads labels, so it never
reaches the X side), and each fold's y side, target transforms and context
count its train rows by the fold's weights (``w`` on its train rows, times
its ``class_weight`` on their labels): the weighted fit of the fold's rows,
over the shared X side.

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
from tabpfn.preprocessing.torch import create_gpu_preprocessing_pipeline

from retrofit.batching.engine import Estimator, check_class_limit, worker_for
from retrofit.errors import InvalidInputError
from retrofit.tabpfn_surface import transform_labels_one
from retrofit.weighted_preprocessing import WeightedEnsembleMember, fitting_with
from retrofit.weighted_preprocessing.outliers import weighted_device_pipeline

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
        sample_weight: The checked weights of ``X``'s rows for the X side,
            ``(N,)``, or None.
        fold_weights: Per fold, the weights of its train rows (its sample
            weights times its class weights) or None; None: no fold has any.
    """

    def __init__(
        self,
        host: Estimator,
        X: Any,
        folds: Sequence[tuple[np.ndarray, np.ndarray]],
        *,
        sample_weight: np.ndarray | None = None,
        fold_weights: Sequence[np.ndarray | None] | None = None,
    ):
        self.host = host
        self.X = X
        self.folds = list(folds)
        self.sample_weight = sample_weight
        self.fold_weights = fold_weights
        self.shared: Estimator | None = None
        # Row of X -> its row in the shared fit (weight-0 rows are not in it: -1).
        self.shared_row_N = np.arange(len(X))
        if sample_weight is not None:
            kept_N = sample_weight > 0
            self.shared_row_N = np.where(kept_N, np.cumsum(kept_N) - 1, -1)

    def _shared(self, random_state: Any) -> Estimator:
        """The X side: a worker fitted on all rows with :func:`surrogate_target`."""
        if self.shared is None:
            weighted = self.sample_weight is not None
            worker = worker_for(self.host, copy.deepcopy(random_state), weighted=weighted)
            surrogate = surrogate_target(worker, len(self.X))
            if weighted:
                worker.fit(self.X, surrogate, sample_weight=self.sample_weight)
            else:
                worker.fit(self.X, surrogate)
            self.shared = worker
        return self.shared

    def __call__(self, index: int, X: Any, y: Any, random_state: Any) -> Estimator:
        """Fold ``index``'s worker: its train rows' y side over the shared X side.

        ``X`` and ``y`` are the fold's train rows and labels as the front end
        checked them; ``X`` is fitted only for the y side (no pipeline).
        """
        shared = self._shared(random_state)
        train_n = self.folds[index][0]
        w_n = None if self.fold_weights is None else self.fold_weights[index]
        worker = worker_for(self.host, random_state, weighted=w_n is not None)
        worker.fit_mode = "low_memory"  # fit's y side; its feature pipelines are not fitted
        if w_n is None:
            worker.fit(X, y)
        else:  # the fit drops the rows of weight 0: they are no context of the fold
            worker.fit(X, y, sample_weight=w_n)
            train_n = train_n[w_n > 0]
            w_n = w_n[w_n > 0]
        if isinstance(worker, TabPFNClassifier):
            check_class_limit(worker)
        if getattr(worker, "is_constant_target_", False):
            return worker  # answered without the model: nothing of the X side is read
        for name in X_SIDE_ATTRIBUTES:
            setattr(worker, name, getattr(shared, name))
        worker.executor_ = _fold_executor(worker, shared, self.shared_row_N[train_n], w_n)
        return worker


def _fold_executor(
    worker: Estimator, shared: Estimator, train_n: np.ndarray, w_n: np.ndarray | None = None
) -> Any:
    """The shared fit's inference engine with the fold's members.

    Each member keeps its fitted feature pipeline and the rows it produced for
    the fold's train rows (the context, ``train_n`` indexing the shared fit's
    rows); its config takes the label fields of the fold's own config, and its
    targets are the fold's, transformed as tabpfn's ``fit`` transforms them
    (with the fold's weights ``w_n``, where it has any, which its rows then
    carry into the model).
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
    # A weighted fold's configs are its weighted preprocessor's (their target
    # transforms fit weighted); an unweighted fold's are tabpfn's.
    fold_configs = worker.ensemble_preprocessor_.configs if w_n is not None else None
    members = []
    for j, member in enumerate(shared_members):
        fold_config = (fold_configs or worker.ensemble_configs_)[j]
        config = dataclasses.replace(
            member.config, **{name: getattr(fold_config, name) for name in fields}
        )
        with fitting_with(w_n):
            y_train = transform_labels_one(config, y_n.copy())
        fold_member = dataclasses.replace(
            member, config=config, X_train=member.X_train[train_n], y_train=y_train
        )
        if w_n is not None:
            fold_member = _weighted_member(fold_member, w_n)
        members.append(fold_member)
    executor = copy.copy(shared.executor_)
    executor.ensemble_members = members
    n_columns = shared.executor_.X_train_shape_before_preprocessing[1]
    executor.X_train_shape_before_preprocessing = (len(train_n), n_columns)
    return executor


def _weighted_member(member: Any, w_n: np.ndarray) -> WeightedEnsembleMember:
    """``member`` over a fold's rows of weights ``w_n``, counted by the model.

    Its outlier clipping, which fits on the fold's rows at every forward,
    counts them too.
    """
    fields = {f.name: getattr(member, f.name) for f in dataclasses.fields(member)}
    fields["row_weights"] = w_n
    device = create_gpu_preprocessing_pipeline(member.config, keep_fitted_cache=False)
    fields["gpu_preprocessor"] = weighted_device_pipeline(
        device, member.config.outlier_removal_std, w_n
    )
    return WeightedEnsembleMember(**fields)
