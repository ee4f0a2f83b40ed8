"""Synthetic prior over tabular regression tasks for pretraining the embedded host.

Every task is drawn from a seeded ``numpy.random.Generator``; nothing here reads
real data. A task is a table of ``n`` rows and ``d`` features whose first
``num_train`` rows are the context and the rest the queries. Targets are
z-normalised with the context's statistics, as ``tabpfn`` does at inference.

Two families of tasks:

* structural causal models: a random MLP graph driven by root noise; features
  and target are nodes, so features can be causes, effects or siblings of the
  target (the TabPFN-style prior);
* function tasks: correlated inputs (Gaussian copula) and a target that is a
  random mixture of sparse-linear, additive, MLP, random-Fourier (GP-like),
  tree-ensemble and pairwise-interaction functions.

Both are then made to look like real tables: skewed, heavy-tailed, discretised,
rounded and categorical-coded feature marginals; homo- or heteroscedastic,
Gaussian or heavy-tailed noise; skewed and integer-valued targets. Features may
also be passed through the same kinds of monotone maps ``tabpfn`` applies at
inference (quantile-to-normal, robust squashing), so the host knows them.

Shape suffixes: ``N`` rows of one task, ``D`` features, ``R`` rows of a batch,
``B`` tasks in a batch, ``C`` features of a batch, ``T`` test rows.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import torch
from scipy.special import ndtr, ndtri

__all__ = ["PriorConfig", "TaskBatch", "sample_batch", "sample_task"]


@dataclasses.dataclass(frozen=True)
class PriorConfig:
    """Knobs of the prior and of how tasks are grouped into batches.

    Attributes:
        min_rows: Smallest table (context plus queries).
        small_max_rows: Upper end of the common, small tables.
        max_rows: Upper end of the rare, large tables.
        p_large: Probability that a batch holds large tables.
        max_features: Most features of a table.
        cells_per_batch: Rows times columns summed over a batch; sets how many
            tasks share a batch of a given shape.
        max_tasks_per_batch: Cap on tasks per batch.
        min_train_fraction: Smallest context share of a table.
        max_train_fraction: Largest context share of a table.
    """

    min_rows: int = 24
    small_max_rows: int = 512
    max_rows: int = 3000
    p_large: float = 0.3
    max_features: int = 20
    cells_per_batch: int = 24_000
    max_tasks_per_batch: int = 32
    min_train_fraction: float = 0.5
    max_train_fraction: float = 0.9


@dataclasses.dataclass
class TaskBatch:
    """Tasks of one shape, ready for ``TabPFNV3.forward``.

    Attributes:
        x_RBC: Features, train rows first, float32.
        y_train_NB: z-normalised context targets, float32.
        y_test_TB: z-normalised query targets, float32.
    """

    x_RBC: torch.Tensor
    y_train_NB: torch.Tensor
    y_test_TB: torch.Tensor

    @property
    def num_train(self) -> int:
        """Number of context rows."""
        return int(self.y_train_NB.shape[0])


# ---------------------------------------------------------------------------
# Elementwise building blocks
# ---------------------------------------------------------------------------

_ACTIVATIONS = (
    np.tanh,
    lambda z: np.maximum(z, 0.0),
    np.sin,
    np.abs,
    lambda z: np.log1p(np.exp(-np.abs(z))) + np.maximum(z, 0.0),  # softplus
    lambda z: z * z,
    lambda z: z,
    lambda z: 1.0 / (1.0 + np.exp(-z)),
    lambda z: np.sign(z) * np.sqrt(np.abs(z)),
    lambda z: (z > 0).astype(np.float64),
)


def _standardize(v: np.ndarray, axis: int = 0) -> np.ndarray:
    std = v.std(axis=axis, keepdims=True)
    return (v - v.mean(axis=axis, keepdims=True)) / np.where(std > 1e-12, std, 1.0)


def _log_uniform(rng: np.random.Generator, low: float, high: float) -> float:
    return float(math.exp(rng.uniform(math.log(low), math.log(high))))


def _univariate(rng: np.random.Generator, z: np.ndarray) -> np.ndarray:
    """A random smooth, monotone, periodic or step function of a standardised z."""
    kind = rng.integers(9)
    c = rng.normal(0.0, 0.8)
    s = _log_uniform(rng, 0.3, 3.0)
    if kind == 0:
        return np.tanh(s * (z - c))
    if kind == 1:
        return (z - c) ** 2
    if kind == 2:
        return np.sin(s * z + rng.uniform(0, 2 * np.pi))
    if kind == 3:
        return np.maximum(z - c, 0.0)
    if kind == 4:
        return np.exp(np.clip(0.5 * s * z, -10, 10))
    if kind == 5:
        return np.log1p(np.abs(z - c))
    if kind == 6:
        return (z > c).astype(np.float64)
    if kind == 7:
        return z**3 / 3.0
    return z


# ---------------------------------------------------------------------------
# Target functions of standardised inputs
# ---------------------------------------------------------------------------


def _f_linear(rng: np.random.Generator, z_ND: np.ndarray) -> np.ndarray:
    return z_ND @ rng.normal(size=z_ND.shape[1])


def _f_additive(rng: np.random.Generator, z_ND: np.ndarray) -> np.ndarray:
    out = np.zeros(z_ND.shape[0])
    for j in range(z_ND.shape[1]):
        out += rng.normal() * _standardize(_univariate(rng, z_ND[:, j]))
    return out


def _f_mlp(rng: np.random.Generator, z_ND: np.ndarray) -> np.ndarray:
    h = z_ND
    for _ in range(rng.integers(1, 4)):
        width = int(rng.integers(8, 65))
        w = rng.normal(size=(h.shape[1], width)) * (
            _log_uniform(rng, 0.5, 2.5) / math.sqrt(h.shape[1])
        )
        act = _ACTIVATIONS[rng.integers(len(_ACTIVATIONS))]
        h = act(h @ w + rng.normal(size=width) * 0.5)
        h = _standardize(h)
    return h @ rng.normal(size=h.shape[1])


def _f_fourier(rng: np.random.Generator, z_ND: np.ndarray) -> np.ndarray:
    n_feats = 64
    lengthscale_D = np.array([_log_uniform(rng, 0.4, 4.0) for _ in range(z_ND.shape[1])])
    w = rng.normal(size=(z_ND.shape[1], n_feats)) / lengthscale_D[:, None]
    phase = rng.uniform(0, 2 * np.pi, size=n_feats)
    return np.cos(z_ND @ w + phase) @ rng.normal(size=n_feats)


def _f_trees(rng: np.random.Generator, z_ND: np.ndarray) -> np.ndarray:
    n, d = z_ND.shape
    out = np.zeros(n)
    for _ in range(rng.integers(1, 11)):
        depth = int(rng.integers(1, 6))
        leaf = np.zeros(n, dtype=np.int64)
        for _level in range(depth):
            # One split per level shared by the level's nodes (an oblivious tree).
            j = rng.integers(d)
            thr = np.quantile(z_ND[:, j], rng.uniform(0.1, 0.9))
            leaf = leaf * 2 + (z_ND[:, j] > thr)
        out += rng.normal(size=2**depth)[leaf]
    return out


def _f_interactions(rng: np.random.Generator, z_ND: np.ndarray) -> np.ndarray:
    d = z_ND.shape[1]
    out = np.zeros(z_ND.shape[0])
    for _ in range(rng.integers(1, 2 * d + 1)):
        i, j = rng.integers(d, size=2)
        out += rng.normal() * z_ND[:, i] * z_ND[:, j]
    return out


_FUNCTIONS = (_f_linear, _f_additive, _f_mlp, _f_fourier, _f_trees, _f_interactions)
_FUNCTION_WEIGHTS = np.array([0.18, 0.2, 0.2, 0.14, 0.16, 0.12])


def _random_function(rng: np.random.Generator, z_ND: np.ndarray) -> np.ndarray:
    """A mixture of one to three function families on a random feature subset."""
    d = z_ND.shape[1]
    p_rel = rng.uniform(0.3, 1.0)
    relevant = rng.random(d) < p_rel
    relevant[rng.integers(d)] = True
    importance_D = np.exp(rng.normal(0.0, 0.7, size=d))[relevant]
    z_rel = z_ND[:, relevant] * importance_D / np.sqrt(np.mean(importance_D**2))
    n_parts = int(rng.choice([1, 1, 1, 2, 2, 3]))
    picks = rng.choice(len(_FUNCTIONS), size=n_parts, p=_FUNCTION_WEIGHTS)
    out = np.zeros(z_ND.shape[0])
    for k in picks:
        out += rng.uniform(0.3, 1.0) * _standardize(_FUNCTIONS[k](rng, z_rel))
    return out


# ---------------------------------------------------------------------------
# Inputs
# ---------------------------------------------------------------------------


def _copula_inputs(rng: np.random.Generator, n: int, d: int) -> np.ndarray:
    """Correlated standard-normal inputs through a random low-rank mixing."""
    rank = int(rng.integers(1, d + 1))
    mix = rng.normal(size=(rank, d)) * rng.uniform(0.0, 1.5)
    z_ND = rng.normal(size=(n, rank)) @ mix + rng.normal(size=(n, d))
    if rng.random() < 0.3:  # clustered data: a mixture of shifted blobs
        k = int(rng.integers(2, 6))
        centers = rng.normal(0.0, 2.0, size=(k, d))
        z_ND = z_ND + centers[rng.integers(k, size=n)]
    return _standardize(z_ND)


def _scm_task(rng: np.random.Generator, n: int, d: int) -> tuple[np.ndarray, np.ndarray]:
    """Features and target as nodes of a random MLP structural causal model."""
    n_roots = int(rng.integers(1, max(2, d) + 1))
    root = rng.normal(size=(n, n_roots))
    if rng.random() < 0.3:
        root = rng.uniform(-1.7, 1.7, size=(n, n_roots))
    layers = [root]
    h = root
    n_nodes = n_roots
    while n_nodes < d + 2 or len(layers) < 2:
        width = int(rng.integers(max(2, d // 2), 2 * d + 8))
        w = rng.normal(size=(h.shape[1], width)) / math.sqrt(h.shape[1])
        w *= rng.random(size=w.shape) < rng.uniform(0.3, 1.0)  # sparse edges
        act = _ACTIVATIONS[rng.integers(len(_ACTIVATIONS))]
        noise = _log_uniform(rng, 0.01, 0.5)
        h = _standardize(act(h @ w + rng.normal(size=width)))
        h = h + noise * rng.normal(size=h.shape)
        layers.append(h)
        n_nodes += width
    nodes_NK = np.concatenate(layers[1:], axis=1)
    k = nodes_NK.shape[1]
    target_idx = int(rng.integers(k // 3, k))
    others = np.delete(np.arange(k), target_idx)
    feat_idx = rng.choice(others, size=d, replace=len(others) < d)
    y_N = nodes_NK[:, target_idx]
    x_ND = nodes_NK[:, feat_idx]
    if rng.random() < 0.5:  # sometimes also give the root causes as features
        n_root_feats = min(d // 2, n_roots)
        if n_root_feats > 0:
            x_ND[:, :n_root_feats] = root[:, :n_root_feats]
    return _standardize(x_ND), y_N


# ---------------------------------------------------------------------------
# Making it look like real data
# ---------------------------------------------------------------------------


def _real_marginal(rng: np.random.Generator, z_N: np.ndarray) -> np.ndarray:
    """Give a standardised column a realistic marginal (monotone or coded)."""
    u = rng.random()
    if u < 0.35:
        out = z_N
    elif u < 0.47:  # log-normal style skew
        out = np.exp(np.clip(_log_uniform(rng, 0.3, 1.5) * z_N, -30, 30))
    elif u < 0.55:  # heavy tails
        out = np.sinh(_log_uniform(rng, 0.5, 2.0) * z_N)
    elif u < 0.62:  # bounded, uniform-like
        out = ndtr(z_N)
    elif u < 0.77:  # categorical / ordinal codes
        k = int(rng.integers(2, 11))
        cuts = np.sort(rng.uniform(0.05, 0.95, size=k - 1))
        codes = np.searchsorted(np.quantile(z_N, cuts), z_N).astype(np.float64)
        if rng.random() < 0.5:  # unordered categories: shuffled codes
            codes = rng.permutation(k)[codes.astype(np.int64)].astype(np.float64)
        out = codes
    elif u < 0.87:  # measured with coarse resolution
        out = np.round(z_N * _log_uniform(rng, 1.0, 10.0))
    elif u < 0.93:  # count-like
        out = rng.poisson(np.exp(np.clip(0.7 * z_N + rng.normal(), -5, 5))).astype(np.float64)
    else:  # point mass plus continuous part (zero-inflated)
        out = np.where(z_N < rng.normal(-0.3, 0.7), 0.0, np.exp(0.5 * z_N))
    scale = _log_uniform(rng, 1e-2, 1e3)
    return out * scale + rng.normal(0.0, 3.0) * scale


def _quantile_normal(x_ND: np.ndarray, num_train: int) -> np.ndarray:
    """Map each column through the context's empirical CDF, then to N(0, 1)."""
    out = np.empty_like(x_ND)
    for j in range(x_ND.shape[1]):
        ref = np.sort(x_ND[:num_train, j])
        lo = np.searchsorted(ref, x_ND[:, j], side="left")
        hi = np.searchsorted(ref, x_ND[:, j], side="right")
        q = (0.5 * (lo + hi) + 0.5) / (num_train + 1)
        out[:, j] = ndtri(np.clip(q, 1e-3, 1 - 1e-3))
    return out


def _robust_squash(x_ND: np.ndarray, num_train: int) -> np.ndarray:
    """Robust-scale each column on the context, then softly clip the tails."""
    med = np.median(x_ND[:num_train], axis=0)
    q75, q25 = np.percentile(x_ND[:num_train], [75, 25], axis=0)
    iqr = q75 - q25
    std = x_ND[:num_train].std(axis=0)
    scale = np.where(iqr > 1e-12, iqr / 1.349, np.where(std > 1e-12, std, 1.0))
    z = (x_ND - med) / scale
    return z / np.sqrt(1.0 + (z / 3.0) ** 2)


def _noisy_target(rng: np.random.Generator, f_N: np.ndarray, x_ND: np.ndarray) -> np.ndarray:
    """Add homo- or heteroscedastic, Gaussian or heavy-tailed noise."""
    f_N = _standardize(f_N)
    u = rng.random()
    if u < 0.04:
        ratio = _log_uniform(rng, 1.0, 4.0)  # mostly noise
    elif u < 0.25:
        ratio = _log_uniform(rng, 0.005, 0.05)  # nearly deterministic
    else:
        ratio = _log_uniform(rng, 0.05, 1.0)
    if rng.random() < 0.25:
        eps = rng.standard_t(df=rng.uniform(1.5, 6.0), size=f_N.shape)
        eps = np.clip(eps, -50, 50) / 1.5
    else:
        eps = rng.normal(size=f_N.shape)
    if rng.random() < 0.2:
        g = _standardize(x_ND[:, rng.integers(x_ND.shape[1])] + 0.5 * f_N)
        eps = eps * np.exp(np.clip(rng.uniform(0.2, 0.8) * g, -3, 3))
    return f_N + ratio * eps


def _shape_target(rng: np.random.Generator, y_N: np.ndarray) -> np.ndarray:
    """Optionally skew the target or make it integer-valued."""
    u = rng.random()
    if u < 0.2:
        y_N = np.exp(np.clip(_log_uniform(rng, 0.2, 1.0) * _standardize(y_N), -20, 20))
    elif u < 0.3:
        y_N = -np.exp(np.clip(_log_uniform(rng, 0.2, 1.0) * _standardize(y_N), -20, 20))
    if rng.random() < 0.15:  # few integer levels, like a quality score
        levels = int(rng.integers(3, 21))
        y_N = np.round(_standardize(y_N) * levels / 5.0)
    return y_N


def sample_task(
    rng: np.random.Generator,
    n: int,
    d: int,
    num_train: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Draw one regression task.

    Args:
        rng: Source of randomness.
        n: Rows (context plus queries).
        d: Features.
        num_train: Context rows (the first ``num_train``).

    Returns:
        ``(x_ND, y_N)``: float64 features (in the raw units the prior gave them,
        or after one of tabpfn's monotone preprocessing maps) and the target
        z-normalised with the context's mean and standard deviation.
    """
    if rng.random() < 0.4:
        z_ND, latent_y_N = _scm_task(rng, n, d)
        y_N = _noisy_target(rng, latent_y_N, z_ND)
    else:
        z_ND = _copula_inputs(rng, n, d)
        y_N = _noisy_target(rng, _random_function(rng, z_ND), z_ND)
    y_N = _shape_target(rng, y_N)

    x_ND = np.stack([_real_marginal(rng, z_ND[:, j]) for j in range(d)], axis=1)
    view = rng.random()
    if view < 0.25:
        x_ND = _quantile_normal(x_ND, num_train)
    elif view < 0.45:
        x_ND = _robust_squash(x_ND, num_train)

    mu = y_N[:num_train].mean()
    sd = y_N[:num_train].std()
    y_N = (y_N - mu) / (sd if sd > 1e-12 else 1.0)
    return x_ND, np.clip(y_N, -100.0, 100.0)


def _batch_shape(rng: np.random.Generator, cfg: PriorConfig) -> tuple[int, int, int, int]:
    """Rows, features, context rows and tasks of the next batch."""
    small_max = min(cfg.small_max_rows, cfg.max_rows)
    if rng.random() < cfg.p_large and cfg.max_rows > small_max:
        n = int(_log_uniform(rng, small_max, cfg.max_rows))
    else:
        n = int(_log_uniform(rng, cfg.min_rows, small_max))
    # Half log-uniform (favouring few features), half uniform.
    if rng.random() < 0.5:
        d = int(
            np.clip(round(_log_uniform(rng, 1.0, cfg.max_features + 1) - 0.5), 1, cfg.max_features)
        )
    else:
        d = int(rng.integers(1, cfg.max_features + 1))
    frac = rng.uniform(cfg.min_train_fraction, cfg.max_train_fraction)
    num_train = int(np.clip(round(n * frac), 8, n - 4))
    tasks = int(np.clip(cfg.cells_per_batch // (n * max(d, 4)), 1, cfg.max_tasks_per_batch))
    return n, d, num_train, tasks


def sample_batch(rng: np.random.Generator, cfg: PriorConfig | None = None) -> TaskBatch:
    """Draw a batch of tasks that share rows, features and context size.

    Args:
        rng: Source of randomness.
        cfg: Prior configuration; defaults to ``PriorConfig()``.

    Returns:
        A :class:`TaskBatch` with float32 tensors.
    """
    cfg = cfg or PriorConfig()
    n, d, num_train, tasks = _batch_shape(rng, cfg)
    xs, ys = [], []
    for _ in range(tasks):
        x_ND, y_N = sample_task(rng, n, d, num_train)
        xs.append(x_ND)
        ys.append(y_N)
    x_RBC = torch.from_numpy(np.stack(xs, axis=1).astype(np.float32))
    y_RB = torch.from_numpy(np.stack(ys, axis=1).astype(np.float32))
    # float32 overflow from extreme marginals would poison the model's scaler.
    x_RBC = torch.nan_to_num(x_RBC, nan=0.0).clamp(-1e8, 1e8)
    return TaskBatch(x_RBC=x_RBC, y_train_NB=y_RB[:num_train], y_test_TB=y_RB[num_train:])
