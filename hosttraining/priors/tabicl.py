"""TabICL's graph-SCM prior as a source of classification and regression batches.

``tabicl`` (pinned in the ``training`` extra, never a library dependency)
ships the prior behind TabICL and the modded-nanoTabPFN speedrun. Its default
``mix_scm`` draws tables a random forest cannot beat the majority rate on;
``graph_scm`` with ``filter_unpredictable_datasets`` (an extra-trees
out-of-bag test that drops tables whose target no feature predicts) is
informative (the check and its numbers: ``docs/lab/training.md``). That switch lives only in
tabicl's private ``graph_lib._config.PriorConfig``; this module is the one
place that touches it.

Each batch holds ``tables`` tables of one shape (rows, features, context
size), as the speedrun trains: few large tables per step. Rows are drawn
log-uniformly in ``[min_rows, max_rows]``; the last ``test_rows`` (at most half
the table) are the query rows. Tables in a batch share a feature count, and
columns tabicl drops as constant are zero in that table.

Regression tables (``regression=True`` in tabicl, :func:`sample_tabicl_regression_batch`)
come with a target tabicl standardised over the whole table; it is
z-normalised again on the context rows alone, as the project's regression
prior and ``tabpfn`` at inference do, so the query rows carry no statistic
of themselves.

tabicl draws from the global numpy, torch and Python generators. A batch is a
function of the step's generator alone (:func:`hosttraining.priors.batch_stream.batch_rng`):
the global generators are seeded from it and restored afterwards, so drawing
inline leaves the trainer's own generators as they were, and worker processes
draw the same batches. One more input had to go: tabicl 2.2.0's graph
``RandomDataset.sample`` walks its feature groups (``"x"``, ``"y"``) in the
order of a Python ``set`` of strings, which follows the process's string-hash
seed (``PYTHONHASHSEED``), so the same seed gave one of two tables in two
processes (a resumed run's batches and held-out tasks were not its first
process's). While it draws, that module's ``set`` is one that iterates sorted
(:func:`_sorted_feature_groups`).

Shape suffixes as in :mod:`hosttraining.priors.classes`.
"""

from __future__ import annotations

import builtins
import contextlib
import dataclasses
import random
import warnings
from collections.abc import Iterable, Iterator

import numpy as np
import torch
from tabicl.prior import PriorDataset
from tabicl.prior.graph_lib import _dataset as _graph_dataset
from tabicl.prior.graph_lib._config import PriorConfig as _GraphConfig

from hosttraining.priors.classes import ClassBatch, class_batch, renumbered_by_context
from hosttraining.priors.regression import HeldoutTask, TaskBatch, normalise_on_context

__all__ = [
    "CALIBRATION_STREAM",
    "CURVE_STREAM",
    "TabICLPriorConfig",
    "heldout_tabicl_regression_tasks",
    "heldout_tabicl_tasks",
    "sample_tabicl_batch",
    "sample_tabicl_regression_batch",
]


@dataclasses.dataclass(frozen=True)
class TabICLPriorConfig:
    """Shape of the batches drawn from TabICL's graph-SCM prior.

    Attributes:
        tables: Tables per batch (the speedrun's 1-2).
        min_rows: Fewest rows of a table (context plus queries).
        max_rows: Most rows of a table.
        test_rows: Query rows of a table (at most half of it).
        min_features: Fewest features.
        max_features: Most features.
        max_classes: Most classes (the host's ``max_num_classes``; unused by
            regression tables).
        filter_unpredictable: tabicl's ``filter_unpredictable_datasets``.
    """

    tables: int = 2
    min_rows: int = 256
    max_rows: int = 1152
    test_rows: int = 128
    min_features: int = 2
    max_features: int = 40
    max_classes: int = 10
    filter_unpredictable: bool = True


@contextlib.contextmanager
def _global_generators_seeded(seed: int) -> Iterator[None]:
    """Seed numpy's, torch's and Python's global generators; restore them afterwards."""
    np_state, py_state = np.random.get_state(), random.getstate()
    with torch.random.fork_rng(devices=[]):
        np.random.seed(seed)
        random.seed(seed)
        torch.manual_seed(seed)
        try:
            yield
        finally:
            np.random.set_state(np_state)
            random.setstate(py_state)


def _sorted_set(items: Iterable[str]) -> list[str]:
    return sorted(builtins.set(items))


@contextlib.contextmanager
def _sorted_feature_groups() -> Iterator[None]:
    """Make tabicl's graph dataset walk its feature groups in sorted order, not hash order.

    ``set`` is looked up in the module's globals before the builtins; its one
    use there is ``list(set(spec.group ...))``, so a sorted list serves.
    """
    _graph_dataset.set = _sorted_set  # type: ignore[attr-defined]
    try:
        yield
    finally:
        del _graph_dataset.set  # type: ignore[attr-defined]


def _draw_tables(
    seed: int, rows: int, num_train: int, cfg: TabICLPriorConfig, *, regression: bool = False
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(x_BRH, y_BR, d_B)`` of ``cfg.tables`` tables of one shape, from tabicl."""
    dataset = PriorDataset(
        regression=regression,
        batch_size=cfg.tables,
        batch_size_per_gp=cfg.tables,  # one group: the tables share rows and features
        min_features=cfg.min_features,
        max_features=cfg.max_features,
        max_classes=cfg.max_classes,
        min_seq_len=None,  # every table has max_seq_len rows
        max_seq_len=rows,
        min_train_size=num_train,
        max_train_size=num_train + 1,  # randint's open upper end: exactly num_train
        prior_type="graph_scm",
        config=_GraphConfig(filter_unpredictable_datasets=cfg.filter_unpredictable),
        n_jobs=1,
        device="cpu",
    )
    with _global_generators_seeded(seed), _sorted_feature_groups(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        x_BRH, y_BR, d_B, _, train_B = dataset.get_batch()
    if not bool((train_B == num_train).all()):
        raise RuntimeError(f"tabicl drew context sizes {train_B.tolist()}, asked {num_train}")
    return x_BRH, y_BR, d_B


def table_shape(rng: np.random.Generator, cfg: TabICLPriorConfig) -> tuple[int, int]:
    """Rows (log-uniform in ``[min_rows, max_rows]``) and context rows of the next batch."""
    rows = int(np.exp(rng.uniform(np.log(cfg.min_rows), np.log(cfg.max_rows + 1))))
    rows = min(rows, cfg.max_rows)
    return rows, rows - min(cfg.test_rows, rows // 2)


def _features(x_BRH: torch.Tensor, d_B: torch.Tensor) -> torch.Tensor:
    """The padded tabicl features as float32 ``x_RBC``, cut to the widest table, non-finite to 0."""
    width = max(int(d_B.max()), 1)
    x_RBC = x_BRH[:, :, :width].permute(1, 0, 2).float()
    return torch.nan_to_num(x_RBC, nan=0.0, posinf=0.0, neginf=0.0).contiguous()


def sample_tabicl_batch(rng: np.random.Generator, cfg: TabICLPriorConfig) -> ClassBatch:
    """Draw one batch of TabICL graph-SCM classification tables.

    Args:
        rng: The step's generator (:func:`hosttraining.priors.batch_stream.batch_rng`).
        cfg: The batch shape.

    Returns:
        A :class:`hosttraining.priors.classes.ClassBatch`: features float32 (context
        rows first), labels renumbered over the classes the context shows.
    """
    rows, num_train = table_shape(rng, cfg)
    x_BRH, y_BR, d_B = _draw_tables(int(rng.integers(2**31)), rows, num_train, cfg)
    x_RBC = _features(x_BRH, d_B)
    labels, counts = [], []
    for b in range(y_BR.shape[0]):
        labels_N, k = renumbered_by_context(y_BR[b].long().numpy(), num_train)
        labels.append(labels_N)
        counts.append(k)
    return class_batch(x_RBC, labels, counts, num_train)


def sample_tabicl_regression_batch(rng: np.random.Generator, cfg: TabICLPriorConfig) -> TaskBatch:
    """Draw one batch of TabICL graph-SCM regression tables.

    Args:
        rng: The step's generator (:func:`hosttraining.priors.batch_stream.batch_rng`).
        cfg: The batch shape (``max_classes`` is not used).

    Returns:
        A :class:`hosttraining.priors.regression.TaskBatch`: features float32
        (context rows first), targets z-normalised on each table's context.
    """
    rows, num_train = table_shape(rng, cfg)
    x_BRH, y_BR, d_B = _draw_tables(int(rng.integers(2**31)), rows, num_train, cfg, regression=True)
    y_NB = np.stack(
        [normalise_on_context(y_BR[b].double().numpy(), num_train) for b in range(len(y_BR))],
        axis=1,
    )
    y_RB = torch.from_numpy(y_NB.astype(np.float32))
    return TaskBatch(
        x_RBC=_features(x_BRH, d_B), y_train_NB=y_RB[:num_train], y_test_TB=y_RB[num_train:]
    )


CURVE_STREAM = 3
"""Held-out stream of the tasks a run's curve is scored on."""
CALIBRATION_STREAM = 4
"""Held-out stream of the tasks a temperature is fitted on (none of the curve's)."""


def heldout_tabicl_tasks(
    count: int, cfg: TabICLPriorConfig, key: int, stream: int = CURVE_STREAM
) -> list[tuple[np.ndarray, np.ndarray, int]]:
    """Fixed held-out tables of this prior: ``(x_ND float32, labels_N, num_train)``.

    Task ``i`` is the first table of the batch drawn from
    ``np.random.default_rng([key, stream, i])``; ``key`` is
    :data:`hosttraining.common.in_prior.HELDOUT_KEY`, which no training seed reaches.
    """
    one = dataclasses.replace(cfg, tables=1)
    tasks = []
    for i in range(count):
        batch = sample_tabicl_batch(np.random.default_rng([key, stream, i]), one)
        labels_N = torch.cat([batch.y_train_NB, batch.y_test_TB.float()])[:, 0].long().numpy()
        tasks.append((batch.x_RBC[:, 0, :].numpy(), labels_N, batch.num_train))
    return tasks


def heldout_tabicl_regression_tasks(
    count: int, cfg: TabICLPriorConfig, key: int, stream: int = CURVE_STREAM
) -> list[HeldoutTask]:
    """Fixed held-out regression tables of this prior (targets normalised on the context).

    Task ``i`` is the first table of the batch drawn from
    ``np.random.default_rng([key, stream, i])``, as in :func:`heldout_tabicl_tasks`.
    """
    one = dataclasses.replace(cfg, tables=1)
    tasks = []
    for i in range(count):
        batch = sample_tabicl_regression_batch(np.random.default_rng([key, stream, i]), one)
        y_N = torch.cat([batch.y_train_NB, batch.y_test_TB])[:, 0].double().numpy()
        tasks.append(HeldoutTask(batch.x_RBC[:, 0, :].numpy(), y_N, batch.num_train))
    return tasks
