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

That is version 1, the prior of the shipped checkpoint (``PriorConfig()``).
Version 2 (``PRIOR_V2``, the host chain's; see ``hosttraining.regression.diagnose`` for why)
makes most lossy features lossy *before* the target is computed, adds
design-of-experiments inputs (few, unevenly used settings per feature), products,
ratios, power laws and saturating effects, draws 45 % nearly noise-free tasks,
and favours tables of 200-4,000 rows.

Shape suffixes: ``N`` rows of one task, ``D`` features, ``R`` rows of a batch,
``B`` tasks in a batch, ``C`` features of a batch, ``T`` test rows.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import torch
from scipy.special import ndtr, ndtri

__all__ = [
    "PRIOR_V2",
    "HeldoutTask",
    "PriorConfig",
    "TaskBatch",
    "batch_shape",
    "log_uniform",
    "normalise_on_context",
    "quantile_normal",
    "random_units",
    "real_marginal",
    "robust_squash",
    "sample_batch",
    "sample_task",
    "stack_features",
]


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
        version: 1 is the prior of the shipped checkpoint (kept so that its
            recorded command still regenerates it); 2 adds lossy features that
            precede the target, design-of-experiments inputs, physics-like
            functions and more low-noise tasks (see :data:`PRIOR_V2`).
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
    version: int = 1


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


class HeldoutTask:
    """One held-out regression task: features, z-normalised target, context size.

    Attributes:
        x_ND: Features (float32 values, as the model receives them).
        y_N: Target, normalised on the context.
        num_train: Context rows (the first ``num_train``).
    """

    def __init__(self, x_ND: np.ndarray, y_N: np.ndarray, num_train: int) -> None:
        self.x_ND = x_ND
        self.y_N = y_N
        self.num_train = num_train


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


def log_uniform(rng: np.random.Generator, low: float, high: float) -> float:
    """A draw whose logarithm is uniform on ``[log low, log high]``."""
    return float(math.exp(rng.uniform(math.log(low), math.log(high))))


def _univariate(rng: np.random.Generator, z: np.ndarray) -> np.ndarray:
    """A random smooth, monotone, periodic or step function of a standardised z."""
    kind = rng.integers(9)
    c = rng.normal(0.0, 0.8)
    s = log_uniform(rng, 0.3, 3.0)
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
            log_uniform(rng, 0.5, 2.5) / math.sqrt(h.shape[1])
        )
        act = _ACTIVATIONS[rng.integers(len(_ACTIVATIONS))]
        h = act(h @ w + rng.normal(size=width) * 0.5)
        h = _standardize(h)
    return h @ rng.normal(size=h.shape[1])


def _f_fourier(rng: np.random.Generator, z_ND: np.ndarray) -> np.ndarray:
    n_feats = 64
    lengthscale_D = np.array([log_uniform(rng, 0.4, 4.0) for _ in range(z_ND.shape[1])])
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
        noise = log_uniform(rng, 0.01, 0.5)
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


def real_marginal(rng: np.random.Generator, z_N: np.ndarray) -> np.ndarray:
    """Give a standardised column a realistic marginal (monotone or coded)."""
    u = rng.random()
    if u < 0.35:
        out = z_N
    elif u < 0.47:  # log-normal style skew
        out = np.exp(np.clip(log_uniform(rng, 0.3, 1.5) * z_N, -30, 30))
    elif u < 0.55:  # heavy tails
        out = np.sinh(log_uniform(rng, 0.5, 2.0) * z_N)
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
        out = np.round(z_N * log_uniform(rng, 1.0, 10.0))
    elif u < 0.93:  # count-like
        out = rng.poisson(np.exp(np.clip(0.7 * z_N + rng.normal(), -5, 5))).astype(np.float64)
    else:  # point mass plus continuous part (zero-inflated)
        out = np.where(z_N < rng.normal(-0.3, 0.7), 0.0, np.exp(0.5 * z_N))
    scale = log_uniform(rng, 1e-2, 1e3)
    return out * scale + rng.normal(0.0, 3.0) * scale


def quantile_normal(x_ND: np.ndarray, num_train: int) -> np.ndarray:
    """Map each column through the context's empirical CDF, then to N(0, 1)."""
    out = np.empty_like(x_ND)
    for j in range(x_ND.shape[1]):
        ref = np.sort(x_ND[:num_train, j])
        lo = np.searchsorted(ref, x_ND[:, j], side="left")
        hi = np.searchsorted(ref, x_ND[:, j], side="right")
        q = (0.5 * (lo + hi) + 0.5) / (num_train + 1)
        out[:, j] = ndtri(np.clip(q, 1e-3, 1 - 1e-3))
    return out


def robust_squash(x_ND: np.ndarray, num_train: int) -> np.ndarray:
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
        ratio = log_uniform(rng, 1.0, 4.0)  # mostly noise
    elif u < 0.25:
        ratio = log_uniform(rng, 0.005, 0.05)  # nearly deterministic
    else:
        ratio = log_uniform(rng, 0.05, 1.0)
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
        y_N = np.exp(np.clip(log_uniform(rng, 0.2, 1.0) * _standardize(y_N), -20, 20))
    elif u < 0.3:
        y_N = -np.exp(np.clip(log_uniform(rng, 0.2, 1.0) * _standardize(y_N), -20, 20))
    if rng.random() < 0.15:  # few integer levels, like a quality score
        levels = int(rng.integers(3, 21))
        y_N = np.round(_standardize(y_N) * levels / 5.0)
    return y_N


# ---------------------------------------------------------------------------
# Prior version 2: the target depends on what the model sees
# ---------------------------------------------------------------------------
#
# Version 1 computes the target from latent inputs and only then rounds, codes
# or counts the features, so on every lossy column the target carries noise the
# model can never explain, and a deterministic table such as airfoil or concrete
# (few settings per input, a smooth physical law of those settings) has no
# counterpart. Version 2 makes most lossy features lossy *before* the target,
# adds design-of-experiments inputs and physics-like laws, and draws far more
# nearly noise-free tasks.

_LOSSY_KINDS = ("codes", "round", "counts", "zero_inflated")
_P_LOSSY_BEFORE_TARGET = 0.85
"""Share of lossy features whose lossy value, not the latent one, drives the target."""


def _lossy(rng: np.random.Generator, z_N: np.ndarray, kind: str) -> tuple[np.ndarray, np.ndarray]:
    """A lossy measurement of a standardised column.

    Returns:
        ``(observed_N, seen_N)``: the values the table shows and a standardised
        function of them that a target may read. Equal observations give equal
        ``seen`` values, so a target of ``seen`` is a function of the table.
    """
    if kind == "codes":
        k = int(rng.integers(2, 11))
        cuts = np.sort(rng.uniform(0.05, 0.95, size=k - 1))
        codes = np.searchsorted(np.quantile(z_N, cuts), z_N)
        if rng.random() < 0.5:
            # Unordered categories: shuffled codes, and a random effect per
            # category so the target is not monotone in the code.
            observed = rng.permutation(k)[codes].astype(np.float64)
            return observed, _standardize(rng.normal(size=k)[codes])
        observed = codes.astype(np.float64)
    elif kind == "round":
        observed = np.round(z_N * log_uniform(rng, 1.0, 10.0))
    elif kind == "counts":
        rate = np.exp(np.clip(0.7 * z_N + rng.normal(), -5, 5))
        observed = rng.poisson(rate).astype(np.float64)
    else:  # zero-inflated: a point mass plus a continuous part
        observed = np.where(z_N < rng.normal(-0.3, 0.7), 0.0, np.exp(0.5 * z_N))
    return observed, _standardize(observed)


def _lossless(rng: np.random.Generator, z_N: np.ndarray) -> np.ndarray:
    """A monotone marginal that keeps all information (identity, skew, tails, bounds)."""
    u = rng.random()
    if u < 0.5:
        return z_N
    if u < 0.72:
        return np.exp(np.clip(log_uniform(rng, 0.3, 1.5) * z_N, -30, 30))
    if u < 0.86:
        return np.sinh(log_uniform(rng, 0.5, 2.0) * z_N)
    return ndtr(z_N)


def _doe_column(rng: np.random.Generator, n: int) -> np.ndarray:
    """A designed input: few distinct settings, evenly, log- or irregularly spaced."""
    k = round(log_uniform(rng, 2.0, 30.0))
    u = rng.random()
    if u < 0.4:
        levels = np.linspace(0.0, 1.0, k)
    elif u < 0.7:
        levels = np.geomspace(1.0, log_uniform(rng, 2.0, 1000.0), k)
    else:
        levels = np.sort(rng.normal(size=k))
    # Unbalanced designs: some settings are run far more often than others.
    weights = rng.dirichlet(np.full(k, log_uniform(rng, 0.3, 10.0)))
    return levels[rng.choice(k, size=n, p=weights)]


def _features_v2(
    rng: np.random.Generator, n: int, d: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Observed features and the standardised inputs a target reads.

    Returns:
        ``(x_ND, seen_ND, lossy_D, before_D)``: the table's features (before the
        per-column affine units), the inputs of the target function, which
        features are lossy (designed, coded, rounded, counts, zero-inflated) and
        which of those are lossy before the target (``seen`` is then a function
        of ``x`` in that column).
    """
    z_ND = _copula_inputs(rng, n, d)
    x_ND = np.empty((n, d))
    seen_ND = z_ND.copy()
    lossy_D = np.zeros(d, dtype=bool)
    before_D = np.zeros(d, dtype=bool)
    p_doe = rng.choice([0.0, 0.0, 0.5, 0.9])  # some tasks are designed experiments
    p_lossy = rng.uniform(0.0, 0.6)
    for j in range(d):
        if rng.random() < p_doe:
            x_ND[:, j] = _doe_column(rng, n)
            seen_ND[:, j] = _standardize(x_ND[:, j])
            lossy_D[j] = before_D[j] = True
        elif rng.random() < p_lossy:
            kind = _LOSSY_KINDS[rng.integers(len(_LOSSY_KINDS))]
            x_ND[:, j], seen_j = _lossy(rng, z_ND[:, j], kind)
            lossy_D[j] = True
            if rng.random() < _P_LOSSY_BEFORE_TARGET:
                seen_ND[:, j] = seen_j
                before_D[j] = True
        else:
            x_ND[:, j] = _lossless(rng, z_ND[:, j])
    return x_ND, seen_ND, lossy_D, before_D


def _positive(rng: np.random.Generator, z_N: np.ndarray) -> np.ndarray:
    """A positive quantity from a standardised input (log-normal or shifted)."""
    if rng.random() < 0.5:
        return np.exp(np.clip(log_uniform(rng, 0.2, 1.0) * z_N, -20, 20))
    return z_N - z_N.min() + log_uniform(rng, 0.05, 2.0)


def _f_physics(rng: np.random.Generator, z_ND: np.ndarray) -> np.ndarray:
    """Products, ratios, power laws and saturating effects of positive inputs."""
    n, d = z_ND.shape
    out = np.zeros(n)
    for _ in range(int(rng.integers(1, 4))):
        kind = rng.integers(4)
        cols = rng.choice(d, size=min(d, int(rng.integers(1, 4))), replace=False)
        p_NK = np.stack([_positive(rng, z_ND[:, j]) for j in cols], axis=1)
        if kind == 0:  # power law / product: c * prod x_j^a_j
            a_K = rng.choice([-2.0, -1.0, -0.5, 0.5, 1.0, 1.5, 2.0, 3.0], size=len(cols))
            term = np.exp(np.clip(np.log(p_NK) @ a_K, -30, 30))
        elif kind == 1:  # ratio of one input to a sum with another
            den = p_NK[:, -1] + log_uniform(rng, 0.01, 1.0) * np.median(p_NK[:, -1])
            term = p_NK[:, 0] / den
        elif kind == 2:  # saturating: Michaelis-Menten or exponential approach
            k = log_uniform(rng, 0.1, 3.0) * np.median(p_NK[:, 0])
            term = p_NK[:, 0] / (k + p_NK[:, 0])
            if rng.random() < 0.5:
                term = 1.0 - np.exp(-p_NK[:, 0] / k)
            if len(cols) > 1:  # modulated by another input, as a rate by a factor
                term = term * p_NK[:, 1] ** rng.choice([-1.0, 0.5, 1.0])
        else:  # logarithm of a product (a decibel-like response)
            term = np.log(p_NK).sum(axis=1)
        out += rng.normal() * _standardize(term)
    return out


_FUNCTIONS_V2 = (*_FUNCTIONS, _f_physics)
_FUNCTION_WEIGHTS_V2 = np.array([0.12, 0.17, 0.17, 0.12, 0.12, 0.1, 0.2])


def _random_function_v2(rng: np.random.Generator, z_ND: np.ndarray) -> np.ndarray:
    """Like :func:`_random_function`, with physics-like laws among the families."""
    d = z_ND.shape[1]
    relevant = rng.random(d) < rng.uniform(0.3, 1.0)
    relevant[rng.integers(d)] = True
    importance_D = np.exp(rng.normal(0.0, 0.7, size=d))[relevant]
    z_rel = z_ND[:, relevant] * importance_D / np.sqrt(np.mean(importance_D**2))
    n_parts = int(rng.choice([1, 1, 1, 2, 2, 3]))
    picks = rng.choice(len(_FUNCTIONS_V2), size=n_parts, p=_FUNCTION_WEIGHTS_V2)
    out = np.zeros(z_ND.shape[0])
    for k in picks:
        out += rng.uniform(0.3, 1.0) * _standardize(_FUNCTIONS_V2[k](rng, z_rel))
    return out


def _noise_ratio_v2(rng: np.random.Generator, low_noise: bool) -> float:
    """Noise-to-signal ratio: 45 % of tasks nearly deterministic (all if ``low_noise``)."""
    u = 0.0 if low_noise else rng.random()
    if u < 0.45:
        return log_uniform(rng, 0.002, 0.05)
    if u < 0.97:
        return log_uniform(rng, 0.05, 1.0)
    return log_uniform(rng, 1.0, 4.0)


def _scm_task_v2(rng: np.random.Generator, n: int, d: int) -> tuple[np.ndarray, np.ndarray]:
    """A structural causal model whose root causes may be designed or lossy settings.

    The roots are made lossy (design levels, codes, rounding, counts) *before*
    they propagate, so when they are shown as features the target is a
    function of the shown values plus node noise.
    """
    n_roots = int(rng.integers(1, max(2, d) + 1))
    root = rng.normal(size=(n, n_roots))
    shown = np.empty_like(root)
    p_doe = rng.choice([0.0, 0.5, 0.9])
    for j in range(n_roots):
        if rng.random() < p_doe:
            shown[:, j] = _doe_column(rng, n)
            root[:, j] = _standardize(shown[:, j])
        elif rng.random() < 0.3:
            kind = _LOSSY_KINDS[rng.integers(len(_LOSSY_KINDS))]
            shown[:, j], root[:, j] = _lossy(rng, root[:, j], kind)
        else:
            shown[:, j] = _lossless(rng, root[:, j])
    layers = [root]
    h = root
    n_nodes = n_roots
    node_noise = log_uniform(rng, 0.002, 0.3)
    while n_nodes < d + 2 or len(layers) < 2:
        width = int(rng.integers(max(2, d // 2), 2 * d + 8))
        w = rng.normal(size=(h.shape[1], width)) / math.sqrt(h.shape[1])
        w *= rng.random(size=w.shape) < rng.uniform(0.3, 1.0)
        act = _ACTIVATIONS[rng.integers(len(_ACTIVATIONS))]
        h = _standardize(act(h @ w + rng.normal(size=width)))
        h = h + node_noise * rng.normal(size=h.shape)
        layers.append(h)
        n_nodes += width
    nodes_NK = np.concatenate(layers[1:], axis=1)
    k = nodes_NK.shape[1]
    target_idx = int(rng.integers(k // 3, k))
    others = np.delete(np.arange(k), target_idx)
    feat_idx = rng.choice(others, size=d, replace=len(others) < d)
    x_ND = np.stack([_lossless(rng, nodes_NK[:, j]) for j in feat_idx], axis=1)
    if rng.random() < 0.7:  # usually the settings themselves are features
        n_root_feats = min(d, n_roots)
        x_ND[:, :n_root_feats] = shown[:, :n_root_feats]
    return x_ND, nodes_NK[:, target_idx]


def _sample_task_v2(
    rng: np.random.Generator, n: int, d: int, num_train: int, low_noise: bool
) -> tuple[np.ndarray, np.ndarray]:
    if rng.random() < 0.3:
        x_ND, f_N = _scm_task_v2(rng, n, d)
    else:
        x_ND, seen_ND, _, _ = _features_v2(rng, n, d)
        f_N = _random_function_v2(rng, seen_ND)
    f_N = _standardize(f_N)
    ratio = _noise_ratio_v2(rng, low_noise)
    if not low_noise and rng.random() < 0.2:
        eps = np.clip(rng.standard_t(df=rng.uniform(1.5, 6.0), size=n), -50, 50) / 1.5
    else:
        eps = rng.normal(size=n)
    y_N = f_N + ratio * eps
    if not low_noise:
        y_N = _shape_target(rng, y_N)
    x_ND = random_units(rng, x_ND)
    view = rng.random()
    if view < 0.15:
        x_ND = quantile_normal(x_ND, num_train)
    elif view < 0.3:
        x_ND = robust_squash(x_ND, num_train)
    return x_ND, y_N


def sample_task(
    rng: np.random.Generator,
    n: int,
    d: int,
    num_train: int,
    *,
    version: int = 1,
    low_noise: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """Draw one regression task.

    Args:
        rng: Source of randomness.
        n: Rows (context plus queries).
        d: Features.
        num_train: Context rows (the first ``num_train``).
        version: Prior version (see :class:`PriorConfig`).
        low_noise: Version 2 only: Gaussian noise at 0.2-5 % of the signal and
            no target reshaping (the held-out tasks of ``hosttraining.common.in_prior``).

    Returns:
        ``(x_ND, y_N)``: float64 features (in the raw units the prior gave them,
        or after one of tabpfn's monotone preprocessing maps) and the target
        z-normalised with the context's mean and standard deviation.
    """
    if version == 2:
        x_ND, y_N = _sample_task_v2(rng, n, d, num_train, low_noise)
        return x_ND, normalise_on_context(y_N, num_train)
    if version != 1 or low_noise:
        raise ValueError(f"no prior version {version} (low_noise={low_noise})")
    if rng.random() < 0.4:
        z_ND, latent_y_N = _scm_task(rng, n, d)
        y_N = _noisy_target(rng, latent_y_N, z_ND)
    else:
        z_ND = _copula_inputs(rng, n, d)
        y_N = _noisy_target(rng, _random_function(rng, z_ND), z_ND)
    y_N = _shape_target(rng, y_N)

    x_ND = np.stack([real_marginal(rng, z_ND[:, j]) for j in range(d)], axis=1)
    view = rng.random()
    if view < 0.25:
        x_ND = quantile_normal(x_ND, num_train)
    elif view < 0.45:
        x_ND = robust_squash(x_ND, num_train)

    return x_ND, normalise_on_context(y_N, num_train)


def random_units(rng: np.random.Generator, x_ND: np.ndarray) -> np.ndarray:
    """Each column in its own units: a log-uniform scale in [1e-2, 1e3] and an offset."""
    d = x_ND.shape[1]
    scale_D = np.exp(rng.uniform(math.log(1e-2), math.log(1e3), size=d))
    return x_ND * scale_D + rng.normal(0.0, 3.0, size=d) * scale_D


def stack_features(xs: list[np.ndarray]) -> torch.Tensor:
    """Tasks' ``(N, C)`` features as one float32 ``(R, B, C)`` batch, NaN to 0, clamped.

    float32 overflow from extreme marginals would poison the model's scaler.
    """
    x_RBC = torch.from_numpy(np.stack(xs, axis=1).astype(np.float32))
    return torch.nan_to_num(x_RBC, nan=0.0).clamp(-1e8, 1e8)


def normalise_on_context(y_N: np.ndarray, num_train: int) -> np.ndarray:
    """``y_N`` z-normalised with its first ``num_train`` rows' statistics, clipped to +-100."""
    mu = y_N[:num_train].mean()
    sd = y_N[:num_train].std()
    y_N = (y_N - mu) / (sd if sd > 1e-12 else 1.0)
    return np.clip(y_N, -100.0, 100.0)


def batch_shape(rng: np.random.Generator, cfg: PriorConfig) -> tuple[int, int, int, int]:
    """Rows, features, context rows and tasks of the next batch."""
    small_max = min(cfg.small_max_rows, cfg.max_rows)
    if rng.random() < cfg.p_large and cfg.max_rows > small_max:
        n = int(log_uniform(rng, small_max, cfg.max_rows))
    else:
        n = int(log_uniform(rng, cfg.min_rows, small_max))
    # Half log-uniform (favouring few features), half uniform.
    if rng.random() < 0.5:
        d = int(
            np.clip(round(log_uniform(rng, 1.0, cfg.max_features + 1) - 0.5), 1, cfg.max_features)
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
    n, d, num_train, tasks = batch_shape(rng, cfg)
    xs, ys = [], []
    for _ in range(tasks):
        x_ND, y_N = sample_task(rng, n, d, num_train, version=cfg.version)
        xs.append(x_ND)
        ys.append(y_N)
    x_RBC = stack_features(xs)
    y_RB = torch.from_numpy(np.stack(ys, axis=1).astype(np.float32))
    return TaskBatch(x_RBC=x_RBC, y_train_NB=y_RB[:num_train], y_test_TB=y_RB[num_train:])


PRIOR_V2 = PriorConfig(
    min_rows=32,
    small_max_rows=200,
    max_rows=4000,
    p_large=0.8,
    cells_per_batch=16_000,
    max_tasks_per_batch=16,
    version=2,
)
"""The prior of the host chain: version 2, most tables of 200-4,000 rows (80 %
of batches; the rest 32-200), smaller batches than version 1's."""
