"""Every host class at its published config size, random weights, float64 (slow).

The fast tests prove the same on tiny models; these check that nothing depends
on the tiny sizes (v3.5: 219M parameters, ICL width 1024, one test KV head;
v2.5/v2.6: 64 thinking rows, width 192). Random weights (tabpfn's
initialisation, zero-inits perturbed, ``lab.calibration.build_random_host``):
the published weights cannot be downloaded offline. Run with ``-m slow``.

Shape letters: B batch, R rows, N train rows, C features.
"""

from __future__ import annotations

import pytest
import torch

import retrofit
from lab.calibration import PUBLISHED_CONFIGS, build_random_host
from tests.helpers.null_row_hooks import (
    FinalCarriers,
    LastBlockOutput,
    NullRow,
    NullRowAtBlockEntry,
)

pytestmark = pytest.mark.slow

R, N, B, C = 20, 12, 1, 3
IDENTITY = {"tau": 1e-30, "eps_den": 0.0}


def _forward(model, x, y):
    kwargs = {"task_type": "regression"} if hasattr(model, "icl_y_layernorm") else {}
    with torch.inference_mode():
        return model(x, y, **kwargs)


def _recorders(model):
    """(reference recorder, null-row inserter) for the model's family; train row 2 after T."""
    if hasattr(model, "icl_blocks"):
        return FinalCarriers, lambda m: NullRow(m, 2, as_train=True)
    thinking = getattr(getattr(model, "add_thinking_rows", None), "num_thinking_rows", 0)
    return LastBlockOutput, lambda m: NullRowAtBlockEntry(m, thinking + 2, as_train=True)


def _final(model, x, y, factory):
    rec = factory(model)
    try:
        out = _forward(model, x, y)
    finally:
        rec.close()
    final = rec.final_BRE if hasattr(rec, "final_BRE") else rec.final
    null = getattr(rec, "null_BE", getattr(rec, "null", None))
    return out, final, null


@pytest.mark.parametrize("name", sorted(PUBLISHED_CONFIGS))
def test_a_published_size_host_keeps_a_null_row_null_and_unpatches_exactly(name):
    torch.set_num_threads(2)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(R, B, C, generator=g, dtype=torch.float64)
    y = torch.randn(N, B, generator=g, dtype=torch.float64)
    model = build_random_host(name).double()
    reference_factory, null_factory = _recorders(model)
    host_out = _forward(model, x, y)

    for mode in retrofit.PATCH_MODES:
        retrofit.patch(model, mode)
        out, ref, _ = _final(model, x, y, reference_factory)
        _, ins, null = _final(model, x, y, null_factory)
        drift = ((ins - ref).abs().max() / ref.abs().max()).item()
        assert drift <= 1e-12, (name, mode, drift)
        assert torch.equal(null, torch.zeros_like(null))
        assert ((out - host_out).abs().max() / host_out.abs().max()).item() > 1e-5  # it acts
        retrofit.unpatch(model)
        assert torch.equal(_forward(model, x, y), host_out)

    retrofit.patch(model, "oattention", **IDENTITY)
    identity = _forward(model, x, y)
    retrofit.unpatch(model)
    assert ((identity - host_out).abs().max() / host_out.abs().max()).item() <= 1e-13
