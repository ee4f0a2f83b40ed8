"""Tiny random TabPFN v2.5, v2.6 and v3.5 regressors for tests (the other hosts' builders
live in ``_tiny_models.py`` and ``test_patch_v2.py``).

Each is built from tabpfn's own config class (``parse_config``/``get_architecture``
of its module) with the zero-initialised projections perturbed
(:func:`eval.calibration.perturb_zero_init`), so a swapped block really changes the
output (the published sizes: ``eval.calibration.PUBLISHED_CONFIGS``).
"""

from __future__ import annotations

from typing import Any

import torch
from _tiny_models import tiny_inference
from tabpfn import ModelSpecs
from tabpfn.architectures import ARCHITECTURES
from tabpfn.architectures.shared.bar_distribution import FullSupportBarDistribution

from eval.calibration import build_random_host

__all__ = ["TINY", "build_host", "tiny_host_specs"]

TINY: dict[str, dict[str, Any]] = {
    "tabpfn_v2_5": {
        "emsize": 8,
        "nlayers": 2,
        "nhead": 2,
        "features_per_group": 2,
        "num_thinking_rows": 3,
        "num_buckets": 16,
        "max_num_classes": 0,
    },
    "tabpfn_v2_6": {
        "emsize": 8,
        "nlayers": 2,
        "nhead": 2,
        "features_per_group": 2,
        "num_thinking_rows": 3,
        "num_buckets": 16,
        "max_num_classes": 0,
    },
    "tabpfn_v3_5": {
        "embed_dim": 8,
        "dist_embed_num_blocks": 1,
        "dist_embed_num_heads": 2,
        "dist_embed_num_inducing_points": 4,
        "feat_agg_num_blocks": 1,
        "feat_agg_num_heads": 2,
        "feat_agg_num_cls_tokens": 2,
        "nlayers": 2,
        "icl_num_heads": 2,
        "icl_num_kv_heads_test": 1,
        "softmax_scaling_mlp_hidden_dim": 8,
        "decoder_head_dim": 4,
        "decoder_num_heads": 2,
        "num_buckets": 16,
        "max_num_classes": 4,  # v3.5 always builds its class embedding
        "cell_ecdf_num_buckets": 8,
        "fourier_encoding_num_frequencies": 2,
    },
}
"""Tiny configs (the ICL width of the tiny v3.5 is 16, with one test KV head as published)."""


def build_host(name: str, seed: int = 0, config: dict[str, Any] | None = None, **overrides):
    """A random ``name`` model (``tabpfn_v2_5``, ...) in eval mode, zero-inits perturbed.

    Args:
        name: The key of ``tabpfn.architectures.ARCHITECTURES``.
        seed: Seed of the initialisation and of the perturbation.
        config: The config fields; ``TINY[name]`` when None.
        **overrides: Fields replacing those of ``config``.
    """
    return build_random_host(name, {**(config or TINY[name]), **overrides}, seed)


def tiny_host_specs(name: str, n_estimators: int = 2, seed: int = 0) -> ModelSpecs:
    """A fresh tiny ``name`` model as ``ModelSpecs``, for ``OTabPFNRegressor(model_path=...)``.

    tabpfn uses an in-memory model by reference and the estimator patches it in
    place, so every estimator of a test gets its own (same seed, same weights).
    v2.5 and v2.6 have no regression borders of their own: a bar distribution
    over ``[-4, 4]`` stands for the checkpoint's.
    """
    model = build_host(name, seed)
    parsed, _ = ARCHITECTURES[name].parse_config(dict(TINY[name]))
    criterion = None
    if not hasattr(model, "regression_borders"):
        buckets = TINY[name]["num_buckets"]
        criterion = FullSupportBarDistribution(torch.linspace(-4.0, 4.0, buckets + 1))
    return ModelSpecs(
        model=model,
        architecture_config=parsed,
        inference_config=tiny_inference(n_estimators),
        norm_criterion=criterion,
    )
