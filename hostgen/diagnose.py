"""Reproduce the prior diagnosis of issue 26: can the target be explained by the table?

``python -m hostgen.diagnose`` draws noise-free function tasks (2 features,
500 rows) from prior versions 1 and 2 and, on the tasks whose rows repeat the
same feature values often (designed experiments, coded, rounded or counted
inputs), measures the share of the target's variance *within* rows of identical
features. Such variance cannot be explained by any model of the table. In
version 1 the lossy maps come after the target, so that share is large; in
version 2 most lossy features precede the target and it is near zero. It also
reports the share of nearly noise-free tasks and of 200-4,000-row tables.
"""

from __future__ import annotations

import json

import numpy as np

from hostgen import prior as p

__all__ = ["main", "unexplainable_share"]


def unexplainable_share(x_ND: np.ndarray, y_N: np.ndarray, min_groups: int = 20) -> float | None:
    """Share of ``var(y)`` within groups of identical rows of ``x``.

    Returns:
        The share, or ``None`` when fewer than ``min_groups`` rows values repeat.
    """
    _, inverse = np.unique(x_ND, axis=0, return_inverse=True)
    inverse = inverse.ravel()
    sizes = np.bincount(inverse)
    if (sizes > 1).sum() < min_groups:
        return None
    means = np.bincount(inverse, weights=y_N) / sizes
    return float(np.mean((y_N - means[inverse]) ** 2) / np.var(y_N))


def _shares(version: int, tasks: int) -> list[float]:
    out = []
    for seed in range(tasks):
        rng = np.random.default_rng(seed)
        if version == 1:
            z_ND = p._copula_inputs(rng, 500, 2)
            y_N = p._random_function(rng, z_ND)
            x_ND = np.stack([p._real_marginal(rng, z_ND[:, j]) for j in range(2)], axis=1)
        else:
            x_ND, seen_ND, _, _ = p._features_v2(rng, 500, 2)
            y_N = p._random_function_v2(rng, seen_ND)
        share = unexplainable_share(x_ND, p._standardize(y_N))
        if share is not None:
            out.append(share)
    return out


def main(tasks: int = 400) -> dict[str, object]:
    """Print and return the diagnosis (JSON)."""
    result: dict[str, object] = {"tasks_drawn": tasks}
    for version in (1, 2):
        shares = _shares(version, tasks)
        result[f"v{version}"] = {
            "tasks_with_repeated_rows": len(shares),
            "unexplainable_share_mean": round(float(np.mean(shares)), 4),
            "unexplainable_share_median": round(float(np.median(shares)), 4),
        }
    rows = [
        p.sample_batch(np.random.default_rng([0, s]), p.PRIOR_V2).x_RBC.shape[0] for s in range(200)
    ]
    result["v2_share_rows_200_4000"] = round(float(np.mean([200 <= r <= 4000 for r in rows])), 3)
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
