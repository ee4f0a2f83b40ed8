"""The optimisers: Muon takes the hidden matrices, AdamW the rest, each parameter once."""

from __future__ import annotations

import pytest

from hosttraining.classification.train import TINY_CLASSIFIER_CONFIG
from hosttraining.common.loop import build_model
from hosttraining.common.optim import build_optimizers, muon_parameter_names


def test_muon_takes_the_hidden_matrices_and_adamw_the_rest_each_parameter_once() -> None:
    model = build_model(TINY_CLASSIFIER_CONFIG, seed=0)
    adamw, muon = build_optimizers(
        model, "muon", adam_lr=1e-3, muon_lr=2e-3, weight_decay=0.01, muon_adjust_lr="original"
    )
    ids = [id(p) for opt in (adamw, muon) for g in opt.param_groups for p in g["params"]]
    assert len(ids) == len(set(ids)) and set(ids) == {id(p) for p in model.parameters()}
    hidden = dict(model.named_parameters())
    muon_ids = {id(p) for g in muon.param_groups for p in g["params"]}
    assert muon_ids == {id(hidden[n]) for n in muon_parameter_names(model)}
    assert all(p.ndim == 2 for g in muon.param_groups for p in g["params"])
    assert not any(
        n.startswith(("x_embed.", "icl_y_encoder.")) for n in muon_parameter_names(model)
    )
    assert [g["peak_lr"] for g in muon.param_groups] == [2e-3]
    (only,) = build_optimizers(model, "adamw", adam_lr=1e-3, muon_lr=0.0, weight_decay=0.0)
    assert sum(len(g["params"]) for g in only.param_groups) == len(list(model.parameters()))
    with pytest.raises(ValueError, match="unknown optimizer"):
        build_optimizers(model, "sgd", adam_lr=1e-3, muon_lr=0.0, weight_decay=0.0)
