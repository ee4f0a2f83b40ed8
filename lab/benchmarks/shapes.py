"""The attention problem sizes the benchmarks time: fixed shapes and a host's ICL shapes.

Shape letters: B batch, H query heads, Hkv key/value heads, L queries,
S sources, D head dimension (the layout of ``scaled_dot_product_attention``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from eval.paper.datasets import load_dataset
from retrofit.models.loading import load_host

__all__ = [
    "ICL_DATASETS",
    "LARGE_SHAPES",
    "MEMORY_SHAPE",
    "QUICK_MEMORY_SHAPE",
    "QUICK_SHAPES",
    "SMALL_SHAPES",
    "Shape",
    "icl_shapes",
]


@dataclass(frozen=True)
class Shape:
    """An attention problem size and the target group it belongs to."""

    B: int
    H: int
    L: int
    S: int
    D: int
    group: str = "large"  # "large", "small", "icl" or "quick"
    label: str = ""

    def dims(self) -> tuple[int, int, int, int, int]:
        """``(B, H, L, S, D)``."""
        return (self.B, self.H, self.L, self.S, self.D)


LARGE_SHAPES: tuple[Shape, ...] = (
    Shape(1, 8, 4096, 2048, 64, "large"),
    Shape(4, 8, 2048, 1024, 32, "large"),
)
SMALL_SHAPES: tuple[Shape, ...] = (
    Shape(1, 8, 1024, 512, 64, "small"),
    Shape(8, 4, 512, 256, 16, "small"),
)
MEMORY_SHAPE = Shape(1, 8, 8192, 4096, 32, "memory")
QUICK_SHAPES: tuple[Shape, ...] = (
    Shape(1, 2, 256, 128, 16, "quick"),
    Shape(2, 2, 128, 64, 8, "quick"),
)
QUICK_MEMORY_SHAPE = Shape(1, 2, 512, 256, 16, "memory")

ICL_DATASETS: dict[str, int] = {
    "qsar_fish": 908,
    "concrete": 1030,
    "airfoil": 1503,
    "red_wine": 1599,
    "abalone": 4177,
    "white_wine": 4898,
}
"""Rows of the six offline datasets (fallback when the suite cannot be read)."""


def icl_shapes(model_path: str = "embedded") -> tuple[list[Shape], dict[str, Any]]:
    """ICL attention shapes of a host on the offline suite.

    Queries are all rows (train and test), keys the training rows of the
    75/25 split; heads and head dimension come from the checkpoint's config
    (``icl_num_heads``; ``embed_dim * feat_agg_num_cls_tokens / icl_num_heads``).

    Returns:
        ``(shapes, source)``: one :class:`Shape` per dataset, and where the
        architecture and row counts were read from.
    """
    # No fallback: a missing checkpoint or dataset raises its typed error
    # (WeightsUnavailableError, CheckpointNotFoundError, DatasetUnavailableError)
    # rather than benchmarking shapes of a model or data the user did not ask for.
    cfg = load_host(model_path).architecture_config
    heads = int(cfg.icl_num_heads)
    width = int(cfg.embed_dim) * int(cfg.feat_agg_num_cls_tokens)
    rows = {name: int(load_dataset(name).X.shape[0]) for name in ICL_DATASETS}
    source: dict[str, Any] = {
        "architecture": f"checkpoint {model_path!r}",
        "rows": "eval.paper.datasets.load_dataset",
    }
    shapes = []
    for name, n in rows.items():
        n_test = math.ceil(0.25 * n)
        shapes.append(Shape(1, heads, n, n - n_test, width // heads, "icl", name))
    source["icl_width"] = width
    return shapes, source
