"""Tiny random TabPFN v2, v2.5, v2.6 and v3.5 regressors for tests (v3's builders live in
``tests/helpers/tiny_models.py``).

Each is built from tabpfn's own config class (``parse_config``/``get_architecture``
of its module) with the zero-initialised projections perturbed
(:func:`lab.calibration.perturb_zero_init`), so a swapped block really changes the
output (the published sizes: ``lab.calibration.PUBLISHED_CONFIGS``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from tabpfn import ModelSpecs
from tabpfn.architectures import ARCHITECTURES, tabpfn_v2
from tabpfn.architectures.shared.bar_distribution import FullSupportBarDistribution
from tabpfn.architectures.tabpfn_v2 import TabPFNV2
from tabpfn.checkpoint import save_as_safetensors

from lab.calibration import build_random_host
from tests.helpers.tiny_models import (
    build_tiny_v3,
    perturb_zero_init,
    tiny_inference,
    tiny_inference_config,
    tiny_v3_config,
)

__all__ = [
    "HOST_NAMES",
    "TINY",
    "TINY_MAX_CLASSES",
    "TINY_V2",
    "build_host",
    "build_task_host",
    "build_tiny_v2",
    "save_tiny_host_checkpoint",
    "save_tiny_v2_checkpoint",
    "tiny_classifier_specs",
    "tiny_host_specs",
]

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


#: Every host class tabpfn 9.2 ships, by its key in ``tabpfn.architectures.ARCHITECTURES``.
HOST_NAMES = ("tabpfn_v2", "tabpfn_v2_5", "tabpfn_v2_6", "tabpfn_v3", "tabpfn_v3_5")


def build_task_host(name: str, task: str, classes: int = 4, seed: int = 0):
    """A tiny random ``name`` host for ``task`` (``"regression"`` or ``"multiclass"``), float64.

    Every classifier scores ``classes`` classes; v3's and v3.5's decoders scale
    their queries by the learned log-n scaling (so ``n_eff`` reaches them), and
    v3 has three ICL blocks.
    """
    multiclass = {"max_num_classes": classes} if task == "multiclass" else {}
    if name == "tabpfn_v3":
        decoder = {"decoder_use_softmax_scaling": True} if multiclass else {}
        model = build_tiny_v3(tiny_v3_config(nlayers=3, **multiclass, **decoder), seed)
    elif name == "tabpfn_v3_5":
        model = build_host(name, seed, decoder_use_softmax_scaling=True)
    elif name == "tabpfn_v2":
        model = build_host(name, seed, config={**TINY_V2, **multiclass})
    else:
        model = build_host(name, seed, **multiclass)
    return model.double()


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


def save_tiny_host_checkpoint(name: str, path, seed: int = 0):
    """A tiny ``name`` model (a key of :data:`TINY`) saved as tabpfn's loader reads it.

    tabpfn reads the version from the file name, so ``path``'s name must carry
    it (``tiny-v3.5-regressor.safetensors``). v2.5 and v2.6 get a bar
    distribution over ``[-4, 4]`` as their criterion (v3.5 carries its
    regression borders in its heads); v3.5 does both tasks.
    """
    model = build_host(name, seed)
    parsed, _ = ARCHITECTURES[name].parse_config(dict(TINY[name]))
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    if name != "tabpfn_v3_5":
        borders = torch.linspace(-4.0, 4.0, TINY[name]["num_buckets"] + 1)
        criterion = FullSupportBarDistribution(borders)
        state.update({f"criterion.{k}": v for k, v in criterion.state_dict().items()})
    checkpoint = {
        "state_dict": state,
        "architecture_name": name,
        "config": dataclasses.asdict(parsed),
        "inference_config": tiny_inference_config(),
    }
    save_as_safetensors(checkpoint, path)
    return path


TINY_V2: dict[str, Any] = {
    "emsize": 8,
    "nlayers": 2,
    "nhead": 2,
    "features_per_group": 2,
    "num_buckets": 16,
    "max_num_classes": 0,
}
"""Fields of ``TabPFNV2Config`` for a regressor small enough for tests."""


def build_tiny_v2(seed: int = 0, **overrides) -> TabPFNV2:
    parsed, unused = tabpfn_v2.parse_config({**TINY_V2, **overrides})
    assert not unused
    torch.manual_seed(seed)
    model = tabpfn_v2.get_architecture(parsed)
    perturb_zero_init(model, seed)
    return model.eval()


def save_tiny_v2_checkpoint(model: TabPFNV2, path, **overrides):
    """A v2 checkpoint as tabpfn's loader reads it: no architecture_name, no
    inference_config (tabpfn's default v2 config applies), borders as criterion state."""
    parsed, _ = tabpfn_v2.parse_config({**TINY_V2, **overrides})
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    borders = torch.linspace(-4.0, 4.0, TINY_V2["num_buckets"] + 1)
    criterion = FullSupportBarDistribution(borders)
    state.update({f"criterion.{k}": v for k, v in criterion.state_dict().items()})
    save_as_safetensors({"state_dict": state, "config": dataclasses.asdict(parsed)}, path)
    return path


#: Classes a tiny v2-family classifier scores (the published v2 checkpoints: 10).
TINY_MAX_CLASSES = 10


def tiny_classifier_specs(name: str = "tabpfn_v2", n_estimators: int = 3, seed: int = 0):
    """A fresh tiny ``name`` classifier as ``ModelSpecs``, zero-inits perturbed.

    ``name``: ``tabpfn_v2``, ``tabpfn_v2_5``, ``tabpfn_v2_6`` (a decoder of
    :data:`TINY_MAX_CLASSES` logits per test row), ``tabpfn_v3`` or
    ``tabpfn_v3_5`` (a many-class decoder over the train rows, up to as many
    classes). A fresh model per estimator, as :func:`tiny_host_specs` (same
    seed, same weights).
    """
    overrides = {"max_num_classes": TINY_MAX_CLASSES}
    if name == "tabpfn_v2":
        model = build_tiny_v2(seed, **overrides)
        parsed, _ = tabpfn_v2.parse_config({**TINY_V2, **overrides})
    elif name == "tabpfn_v3":
        config = tiny_v3_config(**overrides)
        model = build_tiny_v3(config, seed)
        parsed, _ = ARCHITECTURES[name].parse_config(config)
    else:
        model = build_host(name, seed, **overrides)
        parsed, _ = ARCHITECTURES[name].parse_config({**TINY[name], **overrides})
    return ModelSpecs(
        model=model, architecture_config=parsed, inference_config=tiny_inference(n_estimators)
    )
