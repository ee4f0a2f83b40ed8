"""The prior's batches of a training run, in step order, drawn inline or by worker processes.

A step's batch depends only on ``(seed, step)`` (:func:`batch_rng`), so worker
processes can draw batches ahead of the model and a run gives the same batches,
hence the same weights, whether it draws them itself or with ``workers``
helpers. Drawing is CPU work in numpy; on a GPU the model's step is far
shorter than drawing its batch, so without helpers the device would wait on
the prior.

Helpers are ``spawn``-ed processes (never forked from a process that may hold
a CUDA context), each with one torch thread; at most ``2 * workers`` batches
are drawn ahead, so memory stays bounded when the model is the slower side.
"""

from __future__ import annotations

import collections
import multiprocessing
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch

__all__ = ["Sampler", "batch_rng", "batch_stream"]

#: Draws one batch from a generator: a picklable callable (a module-level
#: function, or a ``functools.partial`` of one over a prior's config).
Sampler = Callable[[np.random.Generator], Any]


def batch_rng(seed: int, step: int) -> np.random.Generator:
    """The generator of one step's batch: depends only on (seed, step)."""
    return np.random.default_rng([seed, step])


def _draw(sampler: Sampler, seed: int, step: int) -> Any:
    return sampler(batch_rng(seed, step))


def _one_thread() -> None:
    torch.set_num_threads(1)


def batch_stream(
    sampler: Sampler, seed: int, start: int, stop: int, *, workers: int = 0
) -> Iterator[Any]:
    """Yields the batches of steps ``start .. stop - 1`` in order.

    Args:
        sampler: Draws one batch from a generator.
        seed: The run's seed.
        start: First step (a resumed run's step).
        stop: One past the last step.
        workers: Helper processes drawing ahead (0: draw inline).

    Yields:
        ``sampler(batch_rng(seed, step))`` for each step.

    Raises:
        ValueError: If ``workers`` is negative.
    """
    if workers < 0:
        raise ValueError(f"workers must be >= 0, got {workers}")
    if workers == 0:
        for step in range(start, stop):
            yield _draw(sampler, seed, step)
        return
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(workers, initializer=_one_thread) as pool:
        pending: collections.deque[Any] = collections.deque()
        step = start
        while True:
            while len(pending) < 2 * workers and step < stop:
                pending.append(pool.apply_async(_draw, (sampler, seed, step)))
                step += 1
            if not pending:
                return
            yield pending.popleft().get()
