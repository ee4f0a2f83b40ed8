"""Tiny random TabPFN v3 regressors and classifiers for tests.

tabpfn zero-initialises attention ``out_projection`` weights, the MLPs' last
linear and the softmax-scaling query MLP's output, so a freshly built model's
blocks are the identity and a swapped block would change nothing. Every helper
here therefore perturbs those tensors, so a test of patched behaviour fails
when the behaviour is broken.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import torch
from tabpfn.architectures import tabpfn_v3
from tabpfn.checkpoint import save_as_safetensors
from tabpfn.inference_config import InferenceConfig
from tabpfn.preprocessing import PreprocessorConfig

from lab.calibration import perturb_zero_init  # the one recipe, shared with the calibration

__all__ = [
    "TINY_V3_CLASSIFIER_CONFIG",
    "TINY_V3_CONFIG",
    "build_tiny_v3",
    "perturb_zero_init",
    "save_tiny_checkpoint",
    "tiny_inference",
    "tiny_inference_config",
    "tiny_v3_checkpoint",
    "tiny_v3_classifier_checkpoint",
    "tiny_v3_config",
]

TINY_V3_CONFIG: dict[str, Any] = {
    "embed_dim": 8,
    "dist_embed_num_blocks": 1,
    "dist_embed_num_heads": 2,
    "dist_embed_num_inducing_points": 4,
    "feature_group_size": 3,
    "feat_agg_num_blocks": 1,
    "feat_agg_num_heads": 2,
    "feat_agg_num_cls_tokens": 2,
    "nlayers": 2,
    "icl_num_heads": 2,
    "softmax_scaling_mlp_hidden_dim": 8,
    "num_buckets": 16,
    "max_num_classes": -1,
}
"""Fields of ``TabPFNV3Config`` for a regressor small enough for tests (ICL width 16)."""

TINY_V3_CLASSIFIER_CONFIG: dict[str, Any] = {
    **TINY_V3_CONFIG,
    "max_num_classes": 10,
    "decoder_head_dim": 4,
    "decoder_num_heads": 2,
}
"""The tiny v3 as a classifier: up to 10 classes, a ``ManyClassDecoder`` of 2 heads x 4."""


def tiny_v3_config(**overrides: Any) -> dict[str, Any]:
    """The tiny v3 config with ``overrides`` applied (``TabPFNV3Config`` field names)."""
    return {**TINY_V3_CONFIG, **overrides}


def build_tiny_v3(config: dict[str, Any] | None = None, seed: int = 0) -> tabpfn_v3.TabPFNV3:
    """A tiny random ``TabPFNV3`` regressor in eval mode, zero-inits perturbed.

    Args:
        config: ``TabPFNV3Config`` fields; :data:`TINY_V3_CONFIG` when None.
        seed: Seed of the initialisation and of the perturbation.
    """
    parsed, unused = tabpfn_v3.parse_config(dict(config or TINY_V3_CONFIG))
    if unused:
        raise ValueError(f"unknown TabPFNV3Config fields: {sorted(unused)}")
    torch.manual_seed(seed)
    model = tabpfn_v3.get_architecture(parsed)
    perturb_zero_init(model, seed)
    return model.eval()


def tiny_inference(n_estimators: int = 1, **overrides: Any) -> InferenceConfig:
    """An explicit inference config (tabpfn has no default one for v3 or v3.5).

    Light preprocessing keeps tiny fits fast; ``MAX_CPU_SAMPLES`` is left at the
    class default so the loader's own CPU limit applies.
    """
    transform = PreprocessorConfig(
        name="none", categorical_name="numeric", max_features_per_estimator=500
    )
    return InferenceConfig(
        PREPROCESS_TRANSFORMS=[transform],
        N_ESTIMATORS=n_estimators,
        FINGERPRINT_FEATURE=False,
        OUTLIER_REMOVAL_STD=None,
        REGRESSION_Y_PREPROCESS_TRANSFORMS=(None,),
        **overrides,
    )


def tiny_inference_config(n_estimators: int = 1, **overrides: Any) -> dict[str, Any]:
    """:func:`tiny_inference` as the JSON-able dict a checkpoint stores."""
    return json.loads(json.dumps(dataclasses.asdict(tiny_inference(n_estimators, **overrides))))


def save_tiny_checkpoint(
    model: tabpfn_v3.TabPFNV3,
    config: dict[str, Any],
    path: str | Path,
    *,
    inference_config: dict[str, Any] | None = None,
) -> Path:
    """Writes ``model`` as a checkpoint tabpfn's loader reads as v3.

    Args:
        model: The model whose ``state_dict`` is saved.
        config: The ``TabPFNV3Config`` fields it was built from.
        path: Destination; the file name must contain ``v3``.
        inference_config: Stored inference config; :func:`tiny_inference_config`
            when None.

    Returns:
        The path written.
    """
    path = Path(path)
    if "v3" not in path.name:
        raise ValueError(f"tabpfn reads the version from the file name, {path.name!r} lacks 'v3'")
    parsed, _ = tabpfn_v3.parse_config(dict(config))
    checkpoint = {
        "state_dict": {k: v.detach().clone() for k, v in model.state_dict().items()},
        "architecture_name": "tabpfn_v3",
        "config": dataclasses.asdict(parsed),
        "inference_config": inference_config or tiny_inference_config(),
    }
    save_as_safetensors(checkpoint, path)
    return path


def tiny_v3_checkpoint(
    directory: str | Path, *, seed: int = 0, name: str = "tiny_v3.safetensors", **overrides: Any
) -> Path:
    """Builds a perturbed tiny v3 model and saves it under ``directory``."""
    config = tiny_v3_config(**overrides)
    model = build_tiny_v3(config, seed)
    return save_tiny_checkpoint(model, config, Path(directory) / name)


def tiny_v3_classifier_checkpoint(
    directory: str | Path, *, seed: int = 0, name: str = "tiny_v3_classifier.safetensors"
) -> Path:
    """Builds a perturbed tiny v3 classifier and saves it under ``directory``."""
    model = build_tiny_v3(TINY_V3_CLASSIFIER_CONFIG, seed)
    return save_tiny_checkpoint(model, TINY_V3_CLASSIFIER_CONFIG, Path(directory) / name)
