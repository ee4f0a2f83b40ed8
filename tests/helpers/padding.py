"""Shared pieces of the ragged-batch tests: the reference kernel, the unpatched control.

``reference_kernel()`` swaps :func:`patches.oattention` for
:func:`patches.oattention_reference` in the two block modules that call it
(the ICL block of v3 and v3.5, the v2-family block), so every receiver row is
computed over exactly its live sources (``tests/helpers/exactness.py``).
``unpatched_padding_drifts`` feeds the same zero padding to an unpatched host
through a stage's calls, the control that keeps the equivalence tests from
passing vacuously.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import torch

import retrofit.hosts.common.row_attention as row_attention
from patches import oattention_reference
from retrofit.batching.padding import key_rows, pad_carriers

__all__ = ["ragged_tables", "reference_kernel", "unpatched_padding_drifts"]


@contextlib.contextmanager
def reference_kernel() -> Iterator[None]:
    """The patched v2-family, v3 and v3.5 blocks evaluate OAttention by the reference oracle."""
    modules = (row_attention,)
    fast = [m.oattention for m in modules]

    def reference(*args, validate=True, nulls_are_zero=False, **kwargs):
        # The oracle reads every token as given: neither flag changes its result.
        return oattention_reference(*args, **kwargs)

    for module in modules:
        module.oattention = reference
    try:
        yield
    finally:
        for module, kernel in zip(modules, fast, strict=True):
            module.oattention = kernel


def unpatched_padding_drifts(
    host: torch.nn.Module,
    stage: Any,
    sets: Sequence[tuple[torch.Tensor, torch.Tensor]],
    **forward_kwargs: Any,
) -> tuple[list[float], list[torch.Tensor], list[int]]:
    """Each dataset's relative output drift when ``host`` runs the zero-padded batch.

    Args:
        host: An unpatched host.
        stage: The ICL stage whose calls split ``host``'s forward.
        sets: ``(x_RBC, y_N)`` per dataset, one batch element each, one carrier shape.
        **forward_kwargs: Passed to ``host``'s forward (v3.5's ``task_type``).

    Returns:
        ``(drifts, carriers, key_rows)``: ``max|alone - padded| / max|alone|`` per
        dataset, and the stage's carriers and key rows.
    """
    with torch.inference_mode():
        alone = [host(x, y, **forward_kwargs) for x, y in sets]
        carriers = [stage.embed(host, x, y) for x, y in sets]
        keys = [
            key_rows(c, x.shape[0] - y.shape[0]) for c, (x, y) in zip(carriers, sets, strict=True)
        ]
        x_BRD, n_max = pad_carriers(carriers, keys)
        out_BRD = stage.run_blocks(host, x_BRD, n_max)
        drifts = []
        for b, ((x, y), a) in enumerate(zip(sets, alone, strict=True)):
            m = x.shape[0] - y.shape[0]
            padded = stage.decode(host, out_BRD[b : b + 1, n_max : n_max + m])
            drifts.append(((a - padded).abs().max() / a.abs().max()).item())
    return drifts, carriers, keys


def ragged_tables(
    shapes: Sequence[tuple[int, int, int]], seed: int = 0
) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """``(X_train, y_train, X_test)`` per ``(train rows, test rows, features)``: a noisy
    random linear target, for the estimator-level ragged-batch tests."""
    rng = np.random.default_rng(seed)
    out = []
    for n, m, c in shapes:
        X = rng.normal(size=(n + m, c))
        y = X @ rng.normal(size=c) + 0.1 * rng.normal(size=n + m)
        out.append((X[:n], y[:n], X[n:]))
    return out
