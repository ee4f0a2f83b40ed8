"""Synthetic prior over classification tasks, drawn from the regression prior.

A classification task is a regression task of :mod:`hostgen.prior` (version 2
by default: lossy features before the target, designed-experiment inputs,
physics-like laws, many nearly noise-free tasks) whose continuous target is
cut into classes:

* 2 classes with probability ``p_binary``, else 3 to ``max_classes``;
* cut points at quantiles of the target whose shares are drawn from a
  symmetric Dirichlet with a log-uniform concentration, so classes range from
  balanced to strongly imbalanced;
* with probability ``p_merged`` twice as many intervals as classes, each
  class a union of intervals (a class that is not one contiguous region of the
  target, as real labels often are not);
* labels in random order (``p_unordered``), as tabpfn's class shuffling
  presents them at inference, else in target order (ordinal labels);
* with probability ``p_label_noise`` a share of up to ``max_label_noise`` of
  the rows gets a uniformly random label.

Classes are renumbered ``0 .. k-1`` over the classes present in the context
(the host can only predict a class it has seen there); a query row of a class
absent from the context gets :data:`IGNORE` and is left out of the loss.

Shape suffixes as in :mod:`hostgen.prior`: ``N`` rows of one task, ``R`` rows
of a batch, ``B`` tasks, ``C`` features, ``T`` query rows.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import torch

from hostgen.prior import PRIOR_V2, PriorConfig, sample_batch

__all__ = ["IGNORE", "ClassBatch", "ClassPriorConfig", "sample_class_batch", "to_classes"]

IGNORE = -1
"""Label of a query row whose class the context does not show (not scored)."""


@dataclasses.dataclass(frozen=True)
class ClassPriorConfig:
    """Knobs of the classification prior.

    Attributes:
        regression: The regression prior the tasks are drawn from.
        max_classes: Most classes of a task (the host's ``max_num_classes``).
        p_binary: Probability of a two-class task.
        concentration: Range of the Dirichlet concentration of class shares
            (log-uniform): low values give imbalanced classes.
        p_merged: Probability that each class is a union of two intervals.
        p_unordered: Probability that labels are in random order.
        p_label_noise: Probability that a task has label noise.
        max_label_noise: Largest share of rows relabelled at random.
    """

    regression: PriorConfig = PRIOR_V2
    max_classes: int = 10
    p_binary: float = 0.35
    concentration: tuple[float, float] = (0.3, 5.0)
    p_merged: float = 0.3
    p_unordered: float = 0.7
    p_label_noise: float = 0.3
    max_label_noise: float = 0.1


@dataclasses.dataclass
class ClassBatch:
    """Classification tasks of one shape, ready for a ``TabPFNV3`` classifier.

    Attributes:
        x_RBC: Features, context rows first, float32.
        y_train_NB: Context labels ``0 .. k-1`` as float32 (the model's input).
        y_test_TB: Query labels, int64, :data:`IGNORE` where not scorable.
        n_classes_B: Classes each task's context shows.
    """

    x_RBC: torch.Tensor
    y_train_NB: torch.Tensor
    y_test_TB: torch.Tensor
    n_classes_B: list[int]

    @property
    def num_train(self) -> int:
        """Number of context rows."""
        return int(self.y_train_NB.shape[0])


def to_classes(
    rng: np.random.Generator, y_N: np.ndarray, num_train: int, cfg: ClassPriorConfig
) -> tuple[np.ndarray, int]:
    """Cut a continuous target into classes, as the module docstring describes.

    Args:
        rng: Source of randomness.
        y_N: The regression target (context rows first).
        num_train: Context rows.
        cfg: The prior's knobs.

    Returns:
        ``(labels_N, k)``: int64 labels, ``0 .. k-1`` for classes the context
        shows and :data:`IGNORE` for query rows of other classes; ``k`` classes.
    """
    n_classes = 2 if rng.random() < cfg.p_binary else int(rng.integers(3, cfg.max_classes + 1))
    merged = rng.random() < cfg.p_merged
    intervals = 2 * n_classes if merged else n_classes
    low, high = cfg.concentration
    alpha = math.exp(rng.uniform(math.log(low), math.log(high)))
    shares = rng.dirichlet(np.full(intervals, alpha))
    cuts = np.quantile(y_N, np.cumsum(shares)[:-1])
    interval_N = np.searchsorted(cuts, y_N, side="right")
    if merged:  # every class gets two intervals, in random positions
        owner = rng.permutation(np.arange(intervals) % n_classes)
    elif rng.random() < cfg.p_unordered:
        owner = rng.permutation(n_classes)
    else:
        owner = np.arange(n_classes)
    labels_N = owner[interval_N]
    if rng.random() < cfg.p_label_noise:
        flip = rng.random(len(y_N)) < rng.uniform(0.0, cfg.max_label_noise)
        labels_N = np.where(flip, rng.integers(0, n_classes, len(y_N)), labels_N)
    seen = np.unique(labels_N[:num_train])
    code = np.full(n_classes, IGNORE, dtype=np.int64)
    code[seen] = np.arange(len(seen))
    return code[labels_N], len(seen)


def sample_class_batch(rng: np.random.Generator, cfg: ClassPriorConfig | None = None) -> ClassBatch:
    """Draw a batch of classification tasks that share rows, features and context size.

    Args:
        rng: Source of randomness (the regression batch, then the cuts).
        cfg: Prior configuration; defaults to ``ClassPriorConfig()``.

    Returns:
        A :class:`ClassBatch`.
    """
    cfg = cfg or ClassPriorConfig()
    batch = sample_batch(rng, cfg.regression)
    num_train = batch.num_train
    y_RB = torch.cat([batch.y_train_NB, batch.y_test_TB]).double().numpy()
    labels, counts = [], []
    for b in range(y_RB.shape[1]):
        labels_N, k = to_classes(rng, y_RB[:, b], num_train, cfg)
        labels.append(labels_N)
        counts.append(k)
    labels_RB = torch.from_numpy(np.stack(labels, axis=1))
    return ClassBatch(
        x_RBC=batch.x_RBC,
        y_train_NB=labels_RB[:num_train].float(),
        y_test_TB=labels_RB[num_train:],
        n_classes_B=counts,
    )
